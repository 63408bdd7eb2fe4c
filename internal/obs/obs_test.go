package obs

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestMuxServesMetricsHealthAndPprofOnlyWhenAsked(t *testing.T) {
	t.Setenv("HF_PPROF", "")
	mux := Mux(NewRegistry(), nil)
	if code, body := get(t, mux, "/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	if code, body := get(t, mux, "/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") ||
		!strings.Contains(body, "\ngo_memstats_heap_inuse_bytes ") || !strings.Contains(body, "\ngo_gc_heap_live_bytes ") {
		t.Fatalf("/metrics = %d, go collector or its go_memstats_heap_inuse_bytes / go_gc_heap_live_bytes missing:\n%s", code, body)
	}
	if code, _ := get(t, mux, "/debug/pprof/heap"); code != http.StatusNotFound {
		t.Fatalf("/debug/pprof/heap without HF_PPROF = %d, want 404", code)
	}
	t.Setenv("HF_PPROF", "1")
	mux = Mux(NewRegistry(), nil)
	if code, body := get(t, mux, "/debug/pprof/heap?debug=1"); code != 200 || !strings.Contains(body, "heap profile") {
		t.Fatalf("/debug/pprof/heap with HF_PPROF=1 = %d", code)
	}
}

// TestReadyzWaitsForReadyThenFollowsHealth: /readyz is 503 "starting" until
// the WithReady channel closes, then answers as /healthz does; without
// WithReady it is /healthz. A Gatherer that is no Registry serves /metrics.
func TestReadyzWaitsForReadyThenFollowsHealth(t *testing.T) {
	t.Parallel()
	var unhealthy error
	ready := make(chan struct{})
	reg := NewRegistry()
	mux := Mux(prometheus.Gatherers{reg}, func() error { return unhealthy }, WithReady("test", ready))
	if code, body := get(t, mux, "/readyz"); code != http.StatusServiceUnavailable || body != "starting\n" {
		t.Fatalf("/readyz before ready = %d %q, want 503 starting", code, body)
	}
	if code, _ := get(t, mux, "/healthz"); code != 200 {
		t.Fatalf("/healthz before ready = %d, want 200 (alive, not yet ready)", code)
	}
	close(ready)
	if code, body := get(t, mux, "/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("/readyz after ready = %d %q", code, body)
	}
	unhealthy = errors.New("clickhouse unreachable")
	if code, body := get(t, mux, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "clickhouse unreachable") {
		t.Fatalf("/readyz while unhealthy = %d %q", code, body)
	}
	if code, body := get(t, Mux(reg, nil), "/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("/readyz without WithReady = %d %q", code, body)
	}
	if code, body := get(t, mux, "/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("/metrics from a Gatherers = %d", code)
	}
}

// TestReadyGaugeFollowsReadyz: on a registry, WithReady registers
// hf_ready{component}: 0 while starting or unhealthy, 1 when /readyz is 200;
// a second Mux on the same registry does not panic.
func TestReadyGaugeFollowsReadyz(t *testing.T) {
	t.Parallel()
	var unhealthy error
	ready := make(chan struct{})
	reg := NewRegistry()
	health := func() error { return unhealthy }
	mux := Mux(reg, health, WithReady("sink", ready))
	_ = Mux(reg, health, WithReady("sink", ready))
	gauge := func() string {
		_, body := get(t, mux, "/metrics")
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, ReadyMetric+"{") {
				return l
			}
		}
		t.Fatalf("no %s in /metrics:\n%s", ReadyMetric, body)
		return ""
	}
	if g := gauge(); g != `hf_ready{component="sink"} 0` {
		t.Fatalf("starting: %s", g)
	}
	close(ready)
	if g := gauge(); g != `hf_ready{component="sink"} 1` {
		t.Fatalf("ready: %s", g)
	}
	unhealthy = errors.New("down")
	if g := gauge(); g != `hf_ready{component="sink"} 0` {
		t.Fatalf("unhealthy: %s", g)
	}
}

// TestServeGraceLetsRequestsInFlightFinish: after ctx ends, a request in
// flight gets up to the grace to answer; the server stops taking new
// connections at once, and returns nil once the request is answered. With a
// grace shorter than the request, it returns the shutdown's deadline.
func TestServeGraceLetsRequestsInFlightFinish(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		grace time.Duration
		clean bool
	}{{"long grace", time.Minute, true}, {"short grace", 50 * time.Millisecond, false}} {
		t.Run(c.name, func(t *testing.T) {
			entered, release := make(chan struct{}), make(chan struct{})
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(entered)
				<-release
				w.WriteHeader(http.StatusAccepted)
			})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			served := make(chan error, 1)
			go func() { served <- ServeListenerGrace(ctx, ln, h, c.grace) }()
			answered := make(chan int, 1)
			go func() {
				resp, err := http.Post("http://"+addr+"/", "text/plain", nil)
				if err != nil {
					answered <- 0
					return
				}
				resp.Body.Close()
				answered <- resp.StatusCode
			}()
			<-entered
			cancel()
			// The listener closes at once: wait until a new connection is refused.
			for {
				conn, err := net.Dial("tcp", addr)
				if err != nil {
					break
				}
				conn.Close()
				runtime.Gosched()
			}
			if !c.clean {
				if err := <-served; !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("serve with a 50ms grace returned %v, want the deadline", err)
				}
				close(release)
				<-answered
				return
			}
			select {
			case err := <-served:
				t.Fatalf("serve returned %v with a request in flight", err)
			default:
			}
			close(release)
			if code := <-answered; code != http.StatusAccepted {
				t.Fatalf("request in flight answered %d, want 202", code)
			}
			if err := <-served; err != nil {
				t.Fatalf("serve after the request finished: %v", err)
			}
		})
	}
}
