package stack

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/harnessflow/harnessflow/internal/broker"
	"github.com/harnessflow/harnessflow/internal/testenv"
)

func getStatus(url string) (int, string) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestUpReadyzAcrossBrokerRestart: under `up` with external brokers, the
// stack's /readyz, the trainer's and the gateway's answer 503 naming kafka
// while the broker is down and 200 again once it restarted on the same
// address; /healthz stays 200; no component exits (Run keeps running: the
// processors, the sink, the trainer and the gateway all ride it out).
func TestUpReadyzAcrossBrokerRestart(t *testing.T) {
	dir := t.TempDir()
	kdir := t.TempDir()
	b1 := testenv.Kafka(t, kdir)
	addr := b1.Addr()
	s, err := New(Config{
		DataDir: dir, Brokers: []string{addr}, IngestListen: "127.0.0.1:0",
		TrainerListen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", Device: "cpu",
	}, WithLogger(zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	select {
	case <-s.Ready():
	case err := <-errc:
		t.Fatalf("stack did not start: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("stack not ready after 2 minutes")
	}
	ep := s.Endpoints()
	bases := []string{strings.TrimSuffix(ep.MetricsURL, "/metrics"), strings.TrimSuffix(ep.TrainerURL, "/v1/score"),
		strings.TrimSuffix(ep.IngestURL, "/v1/events")}
	all := func(code int, has string) func() bool {
		return func() bool {
			for _, b := range bases {
				if got, body := getStatus(b + "/readyz"); got != code || !strings.Contains(body, has) {
					return false
				}
			}
			return true
		}
	}
	running := func() {
		t.Helper()
		select {
		case err := <-errc:
			t.Fatalf("the stack exited: %v", err)
		default:
		}
	}
	testenv.Eventually(t, 30*time.Second, "every /readyz 200", all(200, "ready"))
	b1.Close()
	testenv.Eventually(t, 30*time.Second, "every /readyz 503 naming kafka", all(503, "kafka: no Kafka broker answers"))
	for _, b := range bases {
		if code, body := getStatus(b + "/healthz"); code != 200 || body != "ok\n" {
			t.Fatalf("%s/healthz with the broker down = %d %q", b, code, body)
		}
	}
	running()
	var b2 *broker.Broker
	testenv.Eventually(t, 10*time.Second, "the broker restarts on "+addr, func() bool {
		b2, err = broker.Start(broker.Config{Listen: addr, DataDir: kdir})
		return err == nil
	})
	t.Cleanup(b2.Close)
	testenv.Eventually(t, 60*time.Second, "every /readyz 200 after the broker restart", all(200, "ready"))
	running()
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("stack exited with %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("stack did not stop within 2 minutes")
	}
}
