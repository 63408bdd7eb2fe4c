package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/broker"
	"github.com/harnessflow/harnessflow/internal/chserver"
	"github.com/harnessflow/harnessflow/internal/testenv"
)

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// httpGet answers GET url with the status and body (0 and the error when
// the request failed).
func httpGet(url string) (int, string) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestProcessAndSinkReadyzAcrossOutages: `process` and `sink` answer
// /readyz 200 while their broker (and, for the sink, ClickHouse) answer,
// 503 naming kafka while the broker is down and clickhouse while
// ClickHouse is, and 200 again once each restarted on the same address;
// /healthz stays 200 throughout, and neither command exits until it is
// stopped, then with status 0.
func TestProcessAndSinkReadyzAcrossOutages(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b1 := testenv.Kafka(t, dir)
	addr := b1.Addr()
	chs := testenv.StartClickHouse(t, "")
	procURL, sinkURL := "http://"+freeAddr(t), "http://"+freeAddr(t)
	ctx, cancel := context.WithCancel(prodCtx(t, 5*time.Minute))
	defer cancel()
	type exit struct {
		code   int
		stderr string
	}
	procDone, sinkDone := make(chan exit, 1), make(chan exit, 1)
	go func() {
		code, _, stderr := prodRunCLI(t, ctx, "", "process", "--brokers", addr, "--listen", strings.TrimPrefix(procURL, "http://"))
		procDone <- exit{code, stderr}
	}()
	go func() {
		code, _, stderr := prodRunCLI(t, ctx, "", "sink", "--brokers", addr, "--clickhouse", chs.Addr(),
			"--database", "readyz", "--listen", strings.TrimPrefix(sinkURL, "http://"))
		sinkDone <- exit{code, stderr}
	}()
	running := func() {
		t.Helper()
		select {
		case e := <-procDone:
			t.Fatalf("process exited with %d: %s", e.code, e.stderr)
		case e := <-sinkDone:
			t.Fatalf("sink exited with %d: %s", e.code, e.stderr)
		default:
		}
	}
	readyz := func(url string, code int, has string) func() bool {
		return func() bool {
			got, body := httpGet(url + "/readyz")
			return got == code && strings.Contains(body, has)
		}
	}
	healthy := func(when string) {
		t.Helper()
		for _, u := range []string{procURL, sinkURL} {
			if code, body := httpGet(u + "/healthz"); code != 200 || body != "ok\n" {
				t.Fatalf("%s /healthz %s = %d %q, want 200 ok", u, when, code, body)
			}
		}
	}
	testenv.Eventually(t, 90*time.Second, "process /readyz 200", readyz(procURL, 200, "ready"))
	testenv.Eventually(t, 90*time.Second, "sink /readyz 200", readyz(sinkURL, 200, "ready"))

	b1.Close()
	testenv.Eventually(t, 20*time.Second, "process /readyz 503 naming kafka", readyz(procURL, 503, "kafka: no Kafka broker answers"))
	testenv.Eventually(t, 20*time.Second, "sink /readyz 503 naming kafka", readyz(sinkURL, 503, "kafka: no Kafka broker answers"))
	healthy("with the broker down")
	running()
	var b2 *broker.Broker
	testenv.Eventually(t, 10*time.Second, "the broker restarts on "+addr, func() bool {
		var err error
		b2, err = broker.Start(broker.Config{Listen: addr, DataDir: dir})
		return err == nil
	})
	t.Cleanup(b2.Close)
	testenv.Eventually(t, 30*time.Second, "process /readyz 200 after the broker restart", readyz(procURL, 200, "ready"))
	testenv.Eventually(t, 30*time.Second, "sink /readyz 200 after the broker restart", readyz(sinkURL, 200, "ready"))
	running()

	if err := chs.Stop(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "sink /readyz 503 naming clickhouse", readyz(sinkURL, 503, "clickhouse: "))
	if code, body := httpGet(procURL + "/readyz"); code != 200 {
		t.Fatalf("process /readyz with ClickHouse down = %d %q, want 200 (it does not use ClickHouse)", code, body)
	}
	healthy("with ClickHouse down")
	sctx, scancel := context.WithTimeout(ctx, 90*time.Second)
	defer scancel()
	chs2, err := chserver.Start(sctx, chs.Config())
	if err != nil {
		t.Fatalf("restart ClickHouse: %v", err)
	}
	t.Cleanup(func() { _ = chs2.Stop() })
	testenv.Eventually(t, 30*time.Second, "sink /readyz 200 after ClickHouse is back", readyz(sinkURL, 200, "ready"))
	running()

	cancel()
	if e := <-procDone; e.code != 0 {
		t.Errorf("process exit %d after the stop: %s", e.code, e.stderr)
	}
	if e := <-sinkDone; e.code != 0 {
		t.Errorf("sink exit %d after the stop: %s", e.code, e.stderr)
	}
}
