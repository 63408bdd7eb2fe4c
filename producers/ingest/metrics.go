package ingest

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/harnessflow/harnessflow/internal/obs"
)

// Rejection reasons (label of hf_ingest_rejections_total).
const (
	reasonMethod       = "method"
	reasonUnauthorized = "unauthorized"
	reasonForbidden    = "forbidden"
	reasonTooLarge     = "too_large"
	reasonInvalid      = "invalid"
	reasonDelivery     = "delivery"
	reasonClientGone   = "client_gone"
	reasonBusy         = "busy"
	reasonMediaType    = "media_type"
	reasonTimeout      = "timeout"
)

// Span outcomes (label of hf_ingest_otlp_spans_total).
const (
	outcomeAccepted = "accepted"
	outcomeIgnored  = "ignored"
	outcomeRejected = "rejected"
)

// metrics are the gateway's Prometheus metrics, hf_ingest_*.
type metrics struct {
	requests   *prometheus.CounterVec
	events     prometheus.Counter
	rejections *prometheus.CounterVec
	latency    prometheus.Histogram
	// otlpRequests and otlpSpans are /v1/traces' (otlp.go).
	otlpRequests *prometheus.CounterVec
	otlpSpans    *prometheus.CounterVec
}

// newMetrics creates the gateway's metrics, registered nowhere yet.
func newMetrics() metrics {
	return metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "hf", Subsystem: "ingest", Name: "requests_total",
			Help: "Requests to /v1/events by HTTP status code.",
		}, []string{"code"}),
		events: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "hf", Subsystem: "ingest", Name: "events_total",
			Help: "Events accepted and acknowledged by the brokers.",
		}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "hf", Subsystem: "ingest", Name: "rejections_total",
			Help: "Rejected requests to /v1/events and /v1/traces by reason.",
		}, []string{"reason"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "hf", Subsystem: "ingest", Name: "request_duration_seconds",
			Help:    "Latency of /v1/events requests, acknowledgement included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		otlpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "hf", Subsystem: "ingest", Name: "otlp_requests_total",
			Help: "Requests to /v1/traces (OTLP/HTTP) by HTTP status code.",
		}, []string{"code"}),
		otlpSpans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "hf", Subsystem: "ingest", Name: "otlp_spans_total",
			Help: "Spans received on /v1/traces by outcome: accepted (became an acknowledged event), ignored (not mapped), rejected (counted in partial_success).",
		}, []string{"outcome"}),
	}
}

// register registers the metrics with every registerer of regs and creates
// each rejection reason's series at zero.
func (m metrics) register(regs ...prometheus.Registerer) error {
	for _, r := range regs {
		for _, c := range []prometheus.Collector{m.requests, m.events, m.rejections, m.latency, m.otlpRequests, m.otlpSpans} {
			if err := r.Register(c); err != nil {
				return fmt.Errorf("register metrics: %w", err)
			}
		}
	}
	for _, r := range []string{reasonMethod, reasonUnauthorized, reasonForbidden, reasonTooLarge, reasonInvalid, reasonDelivery, reasonClientGone, reasonBusy, reasonMediaType, reasonTimeout} {
		m.rejections.WithLabelValues(r)
	}
	for _, o := range []string{outcomeAccepted, outcomeIgnored, outcomeRejected} {
		m.otlpSpans.WithLabelValues(o)
	}
	return nil
}

// registries returns the registerers the gateway's metrics go to and the
// registry its /metrics serves: r alone when it is a *prometheus.Registry
// (obs.Mux serves only those); a new obs.NewRegistry when r is nil; else r
// and a new obs.NewRegistry, so that /metrics still shows the metrics.
func registries(r prometheus.Registerer) ([]prometheus.Registerer, *prometheus.Registry) {
	if served, ok := r.(*prometheus.Registry); ok {
		return []prometheus.Registerer{served}, served
	}
	served := obs.NewRegistry()
	if r == nil {
		return []prometheus.Registerer{served}, served
	}
	return []prometheus.Registerer{r, served}, served
}
