// Package obs is what every harnessflow service shows its operators: JSON
// logs (zerolog, HF_LOG_LEVEL), Prometheus /metrics, /healthz and /readyz.
package obs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultListen is the /metrics, /healthz and /readyz address of `up` and
// of the sink unless told otherwise (9464: Prometheus's default-port
// allocation for exporters).
const DefaultListen = "127.0.0.1:9464"

// NewRegistry returns a Prometheus registry with the Go and process
// collectors. Besides Go's defaults it exports go_gc_heap_live_bytes (the
// heap marked live by the last GC: a service's state without the garbage
// awaiting collection, which RSS includes).
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// MuxOption configures Mux.
type MuxOption func(*muxOptions)

type muxOptions struct {
	component  string
	ready      <-chan struct{}
	checks     []check
	checkEvery time.Duration
}

// ReadyMetric is the gauge Mux registers with WithReady: 1 while the
// component is ready (what /readyz answers 200 for: started, and every
// WithCheck passing), else 0; its label
// "component" names the component. Prometheus alerts on it
// (infra/prometheus/rules.yml).
const ReadyMetric = "hf_ready"

// WithReady makes /readyz answer 503 "starting" until ready is closed: the
// one readiness idiom of harnessflow's services, whose Ready method returns
// a channel closed once they serve (connected, caught up with their
// checkpoint, listening). When Mux's Gatherer is also a Registerer, the
// gauge ReadyMetric{component} is registered there.
func WithReady(component string, ready <-chan struct{}) MuxOption {
	return func(o *muxOptions) { o.component, o.ready = component, ready }
}

// RegisterReady registers ReadyMetric{component} on r, evaluated at each
// scrape by ready (1 when it returns true). A second registration of the same
// component is a no-op.
func RegisterReady(r prometheus.Registerer, component string, ready func() bool) {
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: ReadyMetric,
		Help:        "1 while the component is ready (its /readyz answers 200), else 0.",
		ConstLabels: prometheus.Labels{"component": component}}, func() float64 {
		if ready() {
			return 1
		}
		return 0
	})
	if err := r.Register(g); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			panic(fmt.Sprintf("obs: register %s{component=%q}: %v", ReadyMetric, component, err))
		}
	}
}

// Mux returns a ServeMux with /metrics (what g gathers), /healthz, /readyz,
// and Go's /debug/pprof/ profiles when the environment has HF_PPROF=1.
//
// /healthz is liveness: 200 "ok" while health returns nil (a nil health is
// always ok), 503 with the error otherwise; it does not look at the
// service's brokers or ClickHouse, so an orchestrator does not restart a
// process that only waits for them. /readyz is readiness: 503 "starting"
// until the WithReady channel is closed, 503 with the error while health
// fails, 503 with one "name: reason" line per failing WithCheck (its brokers
// or ClickHouse unreachable), else 200 "ready"; it recovers by itself when
// what it needs comes back.
func Mux(g prometheus.Gatherer, health func() error, opts ...MuxOption) *http.ServeMux {
	var o muxOptions
	for _, opt := range opts {
		opt(&o)
	}
	ho := promhttp.HandlerOpts{}
	if r, ok := g.(prometheus.Registerer); ok {
		// promhttp's own error counter goes where the service's metrics are.
		ho.Registry = r
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, ho))
	started := func() bool {
		if o.ready == nil {
			return true
		}
		select {
		case <-o.ready:
			return true
		default:
			return false
		}
	}
	rd := newReadiness(o.checks, o.checkEvery)
	if r, ok := g.(prometheus.Registerer); ok && o.ready != nil {
		RegisterReady(r, o.component, func() bool {
			return started() && (health == nil || health() == nil) && rd.Err() == nil
		})
	}
	check := func(w http.ResponseWriter) bool {
		if health != nil {
			if err := health(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return false
			}
		}
		return true
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if check(w) {
			_, _ = w.Write([]byte("ok\n"))
		}
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !started() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		if !check(w) {
			return
		}
		if err := rd.Err(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	if os.Getenv("HF_PPROF") == "1" {
		// Go's profiles (heap, CPU, goroutines) for an operator chasing
		// memory or CPU in production; off unless asked for.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// Serve listens on addr and serves h until ctx ends, then shuts down within
// 5 s. A caller that needs the bound address (port 0) binds the listener
// itself and calls ServeListener.
func Serve(ctx context.Context, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return ServeListener(ctx, ln, h)
}

// ServeListener is Serve on a listener the caller bound (and hands over: it
// is closed when serving ends). A caller that must keep an address it
// checked binds it and passes the listener, instead of closing a probe and
// binding again: between the two, any outgoing connection may be given the
// port as its source port.
func ServeListener(ctx context.Context, ln net.Listener, h http.Handler) error {
	return ServeListenerGrace(ctx, ln, h, 5*time.Second)
}

// ServeListenerGrace is ServeListener giving the requests in flight when
// ctx ends up to grace to finish (ServeListener gives 5 s): a handler that
// may rightly wait longer (ingest waits for the brokers' acknowledgement)
// is not cut off by a clean stop, which would then end in an error.
func ServeListenerGrace(ctx context.Context, ln net.Listener, h http.Handler, grace time.Duration) error {
	return ServeServer(ctx, ln, &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, grace)
}

// ServeServer is ServeListenerGrace with a server the caller configured (its
// Handler and timeouts; a TLS caller passes a tls.NewListener): it serves
// srv on ln until ctx ends, then shuts srv down within grace.
func ServeServer(ctx context.Context, ln net.Listener, srv *http.Server, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		err := srv.Shutdown(sctx)
		if e := <-errc; e != nil && !errors.Is(e, http.ErrServerClosed) {
			return e
		}
		return err
	}
}
