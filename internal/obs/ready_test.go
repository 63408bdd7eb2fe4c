package obs

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestReadyzFollowsChecks: /readyz answers 503 naming every failing
// WithCheck while /healthz stays 200 (liveness), hf_ready is 0 meanwhile,
// and both recover once the check passes again.
func TestReadyzFollowsChecks(t *testing.T) {
	t.Parallel()
	var kafkaDown, chDown atomic.Bool
	ready := make(chan struct{})
	close(ready)
	reg := NewRegistry()
	mux := Mux(reg, nil, WithReady("sink", ready), WithCheckEvery(time.Nanosecond),
		WithCheck("kafka", func(context.Context) error {
			if kafkaDown.Load() {
				return errors.New("no broker answers at 127.0.0.1:1")
			}
			return nil
		}),
		WithCheck("clickhouse", func(context.Context) error {
			if chDown.Load() {
				return errors.New("connection refused")
			}
			return nil
		}))
	gauge := func() string {
		_, body := get(t, mux, "/metrics")
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, ReadyMetric+"{") {
				return l
			}
		}
		t.Fatalf("no %s in /metrics", ReadyMetric)
		return ""
	}
	if code, body := get(t, mux, "/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("/readyz with every check passing = %d %q", code, body)
	}
	kafkaDown.Store(true)
	chDown.Store(true)
	code, body := get(t, mux, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "kafka: no broker answers at 127.0.0.1:1") ||
		!strings.Contains(body, "clickhouse: connection refused") {
		t.Fatalf("/readyz with kafka and clickhouse down = %d %q, want 503 naming both", code, body)
	}
	if code, body := get(t, mux, "/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz with the brokers down = %d %q, want 200 ok (liveness)", code, body)
	}
	if g := gauge(); g != `hf_ready{component="sink"} 0` {
		t.Fatalf("gauge while unreachable: %s", g)
	}
	kafkaDown.Store(false)
	if code, body := get(t, mux, "/readyz"); code != http.StatusServiceUnavailable || strings.Contains(body, "kafka") ||
		!strings.Contains(body, "clickhouse") {
		t.Fatalf("/readyz with clickhouse alone down = %d %q", code, body)
	}
	chDown.Store(false)
	if code, body := get(t, mux, "/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("/readyz after recovery = %d %q", code, body)
	}
	if g := gauge(); g != `hf_ready{component="sink"} 1` {
		t.Fatalf("gauge after recovery: %s", g)
	}
}

// TestReadyzBoundedByCheckTimeout: a check that never answers (it ignores
// its context) fails /readyz after about CheckTimeout instead of holding
// the request; concurrent requests share one run; the result is reused
// for the WithCheckEvery period.
func TestReadyzBoundedByCheckTimeout(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	defer close(block)
	var runs atomic.Int32
	ready := make(chan struct{})
	close(ready)
	mux := Mux(NewRegistry(), nil, WithReady("trainer", ready), WithCheckEvery(time.Hour),
		WithCheck("kafka", func(context.Context) error {
			runs.Add(1)
			<-block
			return nil
		}))
	start := time.Now()
	codes := make(chan int, 3)
	bodies := make(chan string, 3)
	for i := 0; i < 3; i++ {
		go func() {
			code, body := get(t, mux, "/readyz")
			codes <- code
			bodies <- body
		}()
	}
	for i := 0; i < 3; i++ {
		if code, body := <-codes, <-bodies; code != http.StatusServiceUnavailable || !strings.Contains(body, "kafka: no answer within") {
			t.Fatalf("/readyz with a hung check = %d %q", code, body)
		}
	}
	if took := time.Since(start); took > CheckTimeout+2*time.Second {
		t.Fatalf("/readyz took %s with a hung check, want about %s", took, CheckTimeout)
	}
	if code, _ := get(t, mux, "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("cached result: %d", code)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the check ran %d times for 4 requests within the period, want 1", n)
	}
}
