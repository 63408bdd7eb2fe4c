package prometheus_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"gopkg.in/yaml.v3"

	"github.com/harnessflow/harnessflow/internal/obs"
	"github.com/harnessflow/harnessflow/processors"
	"github.com/harnessflow/harnessflow/producers/ingest"
	"github.com/harnessflow/harnessflow/sinks/chsink"
	"github.com/harnessflow/harnessflow/trainer"
	"github.com/harnessflow/harnessflow/trainer/backend"
)

// capture is a prometheus.Registerer that keeps the name of every metric
// a collector describes: vectors without a child yet included, which a
// scrape would not show.
type capture struct{ names map[string]bool }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (c *capture) Register(col prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { col.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			c.names[m[1]] = true
		}
	}
	return nil
}

func (c *capture) MustRegister(cs ...prometheus.Collector) {
	for _, x := range cs {
		_ = c.Register(x)
	}
}

func (c *capture) Unregister(prometheus.Collector) bool { return true }

// declared returns the name of every metric the gateway, the processors,
// the sink and the trainer register (built, never run), plus Prometheus's
// own up.
func declared(t *testing.T) map[string]bool {
	t.Helper()
	c := &capture{names: map[string]bool{"up": true}}
	brokers := []string{"127.0.0.1:1"}
	if _, err := ingest.New(ingest.Config{Brokers: brokers, Listen: "127.0.0.1:0", Tokens: map[string]string{"t": "p"}},
		ingest.WithRegisterer(c), ingest.WithLogger(zerolog.Nop())); err != nil {
		t.Fatal(err)
	}
	if _, err := processors.New(processors.Config{Brokers: brokers}, processors.WithRegisterer(c), processors.WithLogger(zerolog.Nop())); err != nil {
		t.Fatal(err)
	}
	if _, err := chsink.New(chsink.Config{Brokers: brokers, ClickHouse: "127.0.0.1:1"}, chsink.WithRegisterer(c)); err != nil {
		t.Fatal(err)
	}
	if _, err := trainer.New(trainer.Config{Brokers: brokers, ClickHouse: "127.0.0.1:1", CheckpointDir: t.TempDir(), Listen: "off",
		Model: trainer.ModelConfig{Buckets: 1 << 10, CatBuckets: 16, Dim: 8, Hidden: 8}},
		trainer.WithRegisterer(c), trainer.WithBackend(backend.NewCPU()), trainer.WithLogger(zerolog.Nop())); err != nil {
		t.Fatal(err)
	}
	// obs.Mux registers the readiness gauge of every service that serves
	// /readyz (obs.WithReady).
	obs.RegisterReady(c, "any", func() bool { return true })
	for _, want := range []string{"hf_ready", "hf_ingest_events_total", "hf_process_commit_lag", "hf_sink_commit_lag", "hf_trainer_commit_lag"} {
		if !c.names[want] {
			t.Fatalf("capture missed %s: %v", want, c.names)
		}
	}
	return c.names
}

var (
	hfName    = regexp.MustCompile(`\bhf_[a-z0-9_]+\b`)
	ruleName  = regexp.MustCompile(`\bhf:[a-z0-9_:]+`)
	nameRegex = regexp.MustCompile(`__name__=~"([^"]+)"`)
	group     = regexp.MustCompile(`\(([^()]*)\)`)
)

// expand returns the names a __name__ regex of the rules' simple form
// (alternations, one level of groups) matches.
func expand(re string) []string {
	if m := group.FindStringSubmatchIndex(re); m != nil {
		var out []string
		for _, alt := range strings.Split(re[m[2]:m[3]], "|") {
			out = append(out, expand(re[:m[0]]+alt+re[m[1]:])...)
		}
		return out
	}
	return strings.Split(re, "|")
}

// usedNames returns the metric names expr reads: hf_* names, the names its
// __name__ regexes match, and recording rules' hf:* names (separately).
func usedNames(expr string) (metrics, recorded []string) {
	for _, m := range nameRegex.FindAllStringSubmatch(expr, -1) {
		metrics = append(metrics, expand(m[1])...)
		expr = strings.Replace(expr, m[0], "", 1)
	}
	metrics = append(metrics, hfName.FindAllString(expr, -1)...)
	if strings.Contains(expr, "up{") || strings.HasPrefix(expr, "up ") {
		metrics = append(metrics, "up")
	}
	return metrics, ruleName.FindAllString(expr, -1)
}

type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Record string `yaml:"record"`
			Alert  string `yaml:"alert"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// TestRulesAndDashboardsUseDeclaredMetrics: every metric name rules.yml and
// the Prometheus panels of infra/grafana's dashboards read is one the
// components declare (histograms with their _bucket, _sum, _count), and
// every hf:* name is a recording rule of rules.yml.
func TestRulesAndDashboardsUseDeclaredMetrics(t *testing.T) {
	names := declared(t)
	known := func(n string) bool {
		for _, suf := range []string{"", "_bucket", "_sum", "_count"} {
			if strings.HasSuffix(n, suf) && names[strings.TrimSuffix(n, suf)] {
				return true
			}
		}
		return false
	}
	b, err := os.ReadFile("rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	exprs := map[string]string{} // where -> expr
	records := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				records[r.Record] = true
			}
			exprs["rules.yml "+r.Record+r.Alert] = r.Expr
		}
	}
	files, _ := filepath.Glob("../grafana/dashboards/*.json")
	for _, f := range files {
		b, err := os.ReadFile(f)
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
			t.Fatalf("%s: %v", f, err)
		}
		for _, p := range d.Panels {
			for i, tg := range p.Targets {
				if tg.Expr != "" {
					exprs[f+" "+p.Title+" "+string(rune('A'+i))] = tg.Expr
				}
			}
		}
	}
	if len(exprs) < 15 {
		t.Fatalf("only %d expressions found", len(exprs))
	}
	var used []string
	for where, e := range exprs {
		ms, rs := usedNames(e)
		if len(ms)+len(rs) == 0 {
			t.Errorf("%s: reads no metric: %s", where, e)
		}
		for _, n := range ms {
			if !known(n) {
				t.Errorf("%s: %s is no metric of harnessflow's (in %s)", where, n, e)
			}
			used = append(used, n)
		}
		for _, n := range rs {
			if !records[n] {
				t.Errorf("%s: %s is no recording rule of rules.yml", where, n)
			}
		}
	}
	sort.Strings(used)
	t.Logf("%d expressions read %d distinct metrics", len(exprs), len(compact(used)))
}

func compact(s []string) []string {
	var out []string
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// TestEveryAlertHasARunbook: every alert links its section of
// docs/operations.md, and the section exists.
func TestEveryAlertHasARunbook(t *testing.T) {
	b, err := os.ReadFile("rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rf struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if want := "docs/operations.md#" + strings.ToLower(r.Alert); r.Annotations["runbook"] != want {
				t.Errorf("%s: runbook %q, want %q", r.Alert, r.Annotations["runbook"], want)
			}
			if !strings.Contains(string(doc), "\n### "+r.Alert+"\n") {
				t.Errorf("docs/operations.md has no section ### %s", r.Alert)
			}
		}
	}
	if n < 5 {
		t.Errorf("%d alerts", n)
	}
}
