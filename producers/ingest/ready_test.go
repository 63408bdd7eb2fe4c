package ingest_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/broker"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers/ingest"
	"github.com/harnessflow/harnessflow/producers/producerstest"
)

// getPath answers GET url with the status and body (0 when the request failed).
func getPath(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestReadyzAcrossBrokerRestart: /readyz is 200 while the broker answers,
// 503 naming kafka while it is down, and 200 again once it is back on the
// same address; /healthz stays 200 throughout; the gateway keeps running
// (runGateway's cleanup fails the test if Run returned an error) and takes
// events again after the restart.
func TestReadyzAcrossBrokerRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b1 := testenv.Kafka(t, dir)
	addr := b1.Addr()
	g := runGateway(t, ingest.Config{Brokers: []string{addr}, DeliveryTimeout: 20 * time.Second})
	testenv.Eventually(t, 10*time.Second, "/readyz 200 with the broker up", func() bool {
		code, _ := getPath(g.url + "/readyz")
		return code == 200
	})
	b1.Close()
	var body string
	testenv.Eventually(t, 15*time.Second, "/readyz 503 naming kafka with the broker down", func() bool {
		var code int
		code, body = getPath(g.url + "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "kafka: no Kafka broker answers") &&
			strings.Contains(body, addr)
	})
	if code, hb := getPath(g.url + "/healthz"); code != 200 || hb != "ok\n" {
		t.Fatalf("/healthz with the broker down = %d %q, want 200 ok", code, hb)
	}
	var b2 *broker.Broker
	testenv.Eventually(t, 10*time.Second, "the broker restarts on "+addr, func() bool {
		var err error
		b2, err = broker.Start(broker.Config{Listen: addr, DataDir: dir})
		return err == nil
	})
	t.Cleanup(b2.Close)
	testenv.Eventually(t, 15*time.Second, "/readyz 200 after the broker restart", func() bool {
		code, _ := getPath(g.url + "/readyz")
		return code == 200
	})
	if code, hb := getPath(g.url + "/healthz"); code != 200 || hb != "ok\n" {
		t.Fatalf("/healthz after the restart = %d %q", code, hb)
	}
	ev := producerstest.TaskAttempt(1, "projA")
	ev.Source = ""
	if code, resp := g.post("tok-a", jsonOf(t, ev)); code != http.StatusAccepted {
		t.Fatalf("post after the broker restart = %d %s", code, resp)
	}
}
