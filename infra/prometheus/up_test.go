package prometheus_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"gopkg.in/yaml.v3"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/stack"
)

// startUp runs `harnessflow up` in process on loopback ports and returns
// its /metrics host:port; it stops when the test ends.
func startUp(t *testing.T) string {
	t.Helper()
	s, err := stack.New(stack.Config{DataDir: t.TempDir(), BrokerListen: "127.0.0.1:0", IngestListen: "127.0.0.1:0",
		TrainerListen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", Device: "cpu"}, stack.WithLogger(zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("up exited with %v", err)
			}
		case <-time.After(2 * time.Minute):
			t.Error("up did not stop within 2 minutes")
		}
	})
	select {
	case <-s.Ready():
	case err := <-errc:
		t.Fatalf("up did not start: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("up not ready after 2 minutes")
	}
	u, err := url.Parse(s.Endpoints().MetricsURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// freeAddr returns a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startPrometheus runs a real Prometheus on up.yml with its target replaced
// by target, 1 s scrape and rule intervals and this directory's rules, on a
// temporary TSDB; it returns Prometheus's base URL and stops it when the
// test ends.
func startPrometheus(t *testing.T, target string) string {
	t.Helper()
	bin := tool(t, "prometheus")
	b, err := os.ReadFile("up.yml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	rules, err := filepath.Abs("rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	global := cfg["global"].(map[string]any)
	global["scrape_interval"], global["evaluation_interval"] = "1s", "1s"
	cfg["rule_files"] = []string{rules}
	sc := cfg["scrape_configs"].([]any)
	if len(sc) != 1 {
		t.Fatalf("up.yml: %d scrape configs, want 1 (up's single endpoint)", len(sc))
	}
	sc[0].(map[string]any)["static_configs"] = []any{map[string]any{"targets": []string{target}}}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, out, 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	var logs bytes.Buffer
	var mu sync.Mutex
	cmd := exec.Command(bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &lockedWriter{&mu, &logs}, &lockedWriter{&mu, &logs}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			mu.Lock()
			t.Logf("prometheus log:\n%s", logs.String())
			mu.Unlock()
		}
	})
	return "http://" + addr
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// api GETs Prometheus's HTTP API path and decodes its data into v; it
// returns the error Prometheus reports, if any.
func api(base, path string, v any) error {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(base + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var r struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return fmt.Errorf("%s: %s: %w", path, resp.Status, err)
	}
	if r.Status != "success" {
		return fmt.Errorf("%s: %s", path, r.Error)
	}
	return json.Unmarshal(r.Data, v)
}

type rulesData struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Name           string    `json:"name"`
			Type           string    `json:"type"`
			Health         string    `json:"health"`
			State          string    `json:"state"`
			LastError      string    `json:"lastError"`
			LastEvaluation time.Time `json:"lastEvaluation"`
		} `json:"rules"`
	} `json:"groups"`
}

// TestPrometheusScrapesUpAndEvaluatesTheRules starts `harnessflow up` and a
// real Prometheus with up.yml and rules.yml: the target is up, every rule
// evaluates with health ok (no alert fires on an idle, healthy stack), the
// recording rule hf:group_lag:sum has the sink's and the trainer's groups
// (from the lag gauges up serves), and every PromQL expression of the
// pipeline dashboard is a query Prometheus accepts.
func TestPrometheusScrapesUpAndEvaluatesTheRules(t *testing.T) {
	tool(t, "prometheus")
	target := startUp(t)
	base := startPrometheus(t, target)

	var last string
	testenv.Eventually(t, 60*time.Second, "every target up", func() bool {
		var d struct {
			ActiveTargets []struct {
				ScrapeURL string `json:"scrapeUrl"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"activeTargets"`
		}
		if err := api(base, "/api/v1/targets", &d); err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("%+v", d.ActiveTargets)
		if len(d.ActiveTargets) == 0 {
			return false
		}
		for _, tg := range d.ActiveTargets {
			if tg.Health != "up" {
				return false
			}
		}
		return true
	})
	t.Logf("targets: %s", last)

	testenv.Eventually(t, 60*time.Second, "hf:group_lag:sum with the sink's and the trainer's groups", func() bool {
		var d struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
			} `json:"result"`
		}
		if err := api(base, "/api/v1/query?query="+url.QueryEscape("hf:group_lag:sum"), &d); err != nil {
			last = err.Error()
			return false
		}
		groups := map[string]bool{}
		for _, r := range d.Result {
			groups[r.Metric["group"]] = true
		}
		last = fmt.Sprint(groups)
		return groups["hf-sink"] && groups["hf-trainer"]
	})
	t.Logf("hf:group_lag:sum groups: %s", last)

	testenv.Eventually(t, 60*time.Second, `hf_ready{component="up"} == 1`, func() bool {
		var d struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		}
		if err := api(base, "/api/v1/query?query="+url.QueryEscape(`hf_ready{component="up"}`), &d); err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprint(d.Result)
		return len(d.Result) == 1 && d.Result[0].Value[1] == "1"
	})

	var rd rulesData
	testenv.Eventually(t, 30*time.Second, "every rule evaluated with health ok", func() bool {
		if err := api(base, "/api/v1/rules", &rd); err != nil {
			last = err.Error()
			return false
		}
		n := 0
		for _, g := range rd.Groups {
			for _, r := range g.Rules {
				n++
				if r.Health != "ok" || r.LastEvaluation.IsZero() {
					last = fmt.Sprintf("%s: health %q (%s)", r.Name, r.Health, r.LastError)
					return false
				}
			}
		}
		return n >= 9
	})
	for _, g := range rd.Groups {
		for _, r := range g.Rules {
			if r.Type == "alerting" && r.State != "inactive" {
				t.Errorf("alert %s is %s on an idle, healthy stack", r.Name, r.State)
			}
		}
	}

	b, err := os.ReadFile("../grafana/dashboards/pipeline.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			q := strings.ReplaceAll(tg.Expr, "$__rate_interval", "1m")
			var res json.RawMessage
			if err := api(base, "/api/v1/query?query="+url.QueryEscape(q), &res); err != nil {
				t.Errorf("panel %q: %v", p.Title, err)
			}
		}
	}
}
