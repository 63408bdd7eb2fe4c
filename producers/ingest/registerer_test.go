package ingest_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/harnessflow/harnessflow/producers/ingest"
)

// metricNames returns the names of the metric families r gathers.
func metricNames(t *testing.T, r prometheus.Gatherer) map[string]bool {
	t.Helper()
	mfs, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	return names
}

// servedMetrics returns the text of srv's /metrics.
func servedMetrics(t *testing.T, srv *ingest.Server) string {
	t.Helper()
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	return string(body)
}

// stop ends srv's producer: Run with an ended context returns at once.
func stop(srv *ingest.Server) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = srv.Run(ctx)
}

func TestWithRegistererRegistersAndServes(t *testing.T) {
	t.Parallel()
	cfg := ingest.Config{Brokers: []string{"127.0.0.1:1"}, Tokens: map[string]string{"tok": "p"}}
	// hf_ingest_requests_total has no series before a request.
	want := []string{"hf_ingest_events_total", "hf_ingest_rejections_total", "hf_ingest_request_duration_seconds"}

	// A registry: the metrics are registered in it and /metrics serves it.
	reg := prometheus.NewRegistry()
	srv, err := ingest.New(cfg, ingest.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer stop(srv)
	// Another component's metric in the same registry is served too.
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "hf_test_other_total", Help: "another component's metric"}))
	got := metricNames(t, reg)
	text := servedMetrics(t, srv)
	for _, n := range want {
		if !got[n] {
			t.Errorf("registry lacks %s", n)
		}
	}
	for _, n := range append(want, "hf_test_other_total") {
		if !strings.Contains(text, "\n"+n) {
			t.Errorf("/metrics lacks %s", n)
		}
	}

	// A registerer that is not a registry: the metrics go to it, and the
	// gateway's own registry serves them too.
	reg2 := prometheus.NewRegistry()
	srv2, err := ingest.New(cfg, ingest.WithRegisterer(prometheus.WrapRegistererWith(prometheus.Labels{"gw": "2"}, reg2)))
	if err != nil {
		t.Fatal(err)
	}
	defer stop(srv2)
	got = metricNames(t, reg2)
	text = servedMetrics(t, srv2)
	for _, n := range want {
		if !got[n] {
			t.Errorf("wrapped registerer lacks %s", n)
		}
		if !strings.Contains(text, "\n"+n) {
			t.Errorf("/metrics of a wrapped registerer lacks %s", n)
		}
	}
}
