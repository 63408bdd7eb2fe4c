// Package grafana_test checks infra/grafana: every dashboard names a
// provisioned data source, every PromQL expression parses (promtool), and
// every ClickHouse query, Grafana macros substituted, runs on both engines
// the project supports (18.16 and current) after the migrations. The metric
// names the dashboards use are checked in infra/prometheus's tests.
package grafana_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Data source types the dashboards use.
const (
	typePrometheus = "prometheus"
	typeClickHouse = "grafana-clickhouse-datasource"
)

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type target struct {
	RefID      string `json:"refId"`
	Datasource *dsRef `json:"datasource"`
	Expr       string `json:"expr"`
	RawSQL     string `json:"rawSql"`
	EditorType string `json:"editorType"`
	Format     *int   `json:"format"`
	QueryType  string `json:"queryType"`
}

type panel struct {
	ID         int      `json:"id"`
	Type       string   `json:"type"`
	Title      string   `json:"title"`
	Datasource *dsRef   `json:"datasource"`
	Targets    []target `json:"targets"`
	Panels     []panel  `json:"panels"` // inside a row
}

type variable struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Datasource *dsRef `json:"datasource"`
	Query      any    `json:"query"`
}

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

// query is one query of a dashboard: a panel's target or a variable's.
type query struct {
	where string // dashboard file, panel title, refId
	ds    dsRef
	text  string // PromQL or SQL
}

// provisioned returns the provisioned data sources by uid.
func provisioned(t *testing.T) map[string]string {
	t.Helper()
	files, _ := filepath.Glob("provisioning/datasources/*.yml")
	if len(files) == 0 {
		t.Fatal("no provisioning/datasources/*.yml")
	}
	out := map[string]string{}
	for _, f := range files {
		var doc struct {
			APIVersion  int `yaml:"apiVersion"`
			Datasources []struct {
				Name string `yaml:"name"`
				UID  string `yaml:"uid"`
				Type string `yaml:"type"`
			} `yaml:"datasources"`
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if doc.APIVersion != 1 {
			t.Errorf("%s: apiVersion %d, want 1", f, doc.APIVersion)
		}
		for _, d := range doc.Datasources {
			if d.UID == "" || d.Type == "" || d.Name == "" {
				t.Errorf("%s: data source %+v lacks a name, uid or type", f, d)
			}
			out[d.UID] = d.Type
		}
	}
	return out
}

// dashboards parses every dashboard JSON and returns its queries, failing
// the test for a panel or variable whose data source is not provisioned.
func dashboards(t *testing.T) []query {
	t.Helper()
	ds := provisioned(t)
	files, _ := filepath.Glob("dashboards/*.json")
	if len(files) < 2 {
		t.Fatalf("dashboards: %v, want the pipeline's and the analysts'", files)
	}
	var out []query
	uids := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
			t.Errorf("%s: no uid, title or panels", f)
		}
		if prev, ok := uids[d.UID]; ok {
			t.Errorf("%s and %s share uid %s", prev, f, d.UID)
		}
		uids[d.UID] = f
		check := func(where string, r *dsRef) bool {
			if r == nil {
				t.Errorf("%s: no datasource", where)
				return false
			}
			if typ, ok := ds[r.UID]; !ok || typ != r.Type {
				t.Errorf("%s: datasource %+v is not provisioned (provisioned: %v)", where, *r, ds)
				return false
			}
			return true
		}
		var walk func(ps []panel)
		walk = func(ps []panel) {
			for _, p := range ps {
				walk(p.Panels)
				where := fmt.Sprintf("%s: panel %q", f, p.Title)
				if p.Type == "row" {
					continue
				}
				check(where, p.Datasource)
				if len(p.Targets) == 0 {
					t.Errorf("%s: no targets", where)
				}
				for _, tg := range p.Targets {
					w := where + " " + tg.RefID
					if !check(w, tg.Datasource) {
						continue
					}
					out = append(out, targetQuery(t, w, tg))
				}
			}
		}
		walk(d.Panels)
		for _, v := range d.Templating.List {
			if v.Type != "query" {
				continue
			}
			w := fmt.Sprintf("%s: variable %s", f, v.Name)
			if check(w, v.Datasource) {
				s, _ := v.Query.(string)
				out = append(out, query{where: w, ds: *v.Datasource, text: s})
			}
		}
	}
	return out
}

// targetQuery checks the shape of a target for its data source and returns
// its query.
func targetQuery(t *testing.T, where string, tg target) query {
	t.Helper()
	q := query{where: where, ds: *tg.Datasource}
	switch tg.Datasource.Type {
	case typePrometheus:
		q.text = tg.Expr
	case typeClickHouse:
		// The plugin's (v4) SQL editor query: format 0 time series, 1 table.
		q.text = tg.RawSQL
		if tg.EditorType != "sql" || tg.Format == nil || !(*tg.Format == 0 && tg.QueryType == "timeseries" || *tg.Format == 1 && tg.QueryType == "table") {
			t.Errorf("%s: editorType %q format %v queryType %q: want sql with 0/timeseries or 1/table", where, tg.EditorType, tg.Format, tg.QueryType)
		}
	}
	if strings.TrimSpace(q.text) == "" {
		t.Errorf("%s: empty query", where)
	}
	return q
}

// TestDashboardsUseProvisionedDataSources: the dashboards parse, and every
// panel, target and variable names a provisioned data source by uid and
// type; the dashboards provider loads the folder docker-compose.yml mounts.
func TestDashboardsUseProvisionedDataSources(t *testing.T) {
	qs := dashboards(t)
	types := map[string]int{}
	for _, q := range qs {
		types[q.ds.Type]++
	}
	if types[typePrometheus] == 0 || types[typeClickHouse] == 0 {
		t.Errorf("queries per data source type: %v", types)
	}
	b, err := os.ReadFile("provisioning/dashboards/harnessflow.yml")
	if err != nil {
		t.Fatal(err)
	}
	var prov struct {
		Providers []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	if err := yaml.Unmarshal(b, &prov); err != nil {
		t.Fatal(err)
	}
	if len(prov.Providers) != 1 || prov.Providers[0].Type != "file" || prov.Providers[0].Options.Path != "/var/lib/grafana/dashboards" {
		t.Errorf("dashboard providers: %+v", prov.Providers)
	}
}

// TestDashboardPromQLParses writes every PromQL expression of the dashboards
// as a recording rule and has promtool check them ($__rate_interval as 1m).
func TestDashboardPromQLParses(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		msg := "promtool is not installed; install Debian's prometheus package: sudo apt-get install -y prometheus (or make test-deps as root)"
		testenv.Missing(t, msg)
	}
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for _, q := range dashboards(t) {
		if q.ds.Type == typePrometheus {
			rules = append(rules, rule{Record: fmt.Sprintf("dashboard:expr%d", len(rules)), Expr: PromQL(q.text)})
		}
	}
	doc := map[string]any{"groups": []any{map[string]any{"name": "dashboards", "rules": rules}}}
	b, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "dashboards.rules.yml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", f).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules (the dashboards' PromQL): %v\n%s\n%s", err, out, b)
	}
}

// PromQL returns expr with Grafana's interval variables replaced by what
// Prometheus parses.
func PromQL(expr string) string {
	return strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "$__range", "1h").Replace(expr)
}

// The time range the test's queries cover, as Grafana's unix seconds.
var from, to = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC).Unix()

var (
	macroCall = regexp.MustCompile(`\$__(timeFilter|timeInterval)\(([^)]*)\)`)
	leftover  = regexp.MustCompile(`\$\{?[A-Za-z_]+`)
)

// SQL returns sql with the ClickHouse plugin's (v4) macros expanded as the
// plugin expands them, over the test's time range and a 60 s interval, and
// the dashboard variables set to a value. A macro it does not know stays and
// fails the test.
func SQL(t *testing.T, where, sql string) string {
	t.Helper()
	s := macroCall.ReplaceAllStringFunc(sql, func(m string) string {
		g := macroCall.FindStringSubmatch(m)
		col := strings.TrimSpace(g[2])
		if g[1] == "timeFilter" {
			return fmt.Sprintf("%s >= toDateTime(%d) AND %s <= toDateTime(%d)", col, from, col, to)
		}
		return fmt.Sprintf("toStartOfInterval(toDateTime(%s), INTERVAL 60 second)", col)
	})
	s = strings.NewReplacer("$__interval_s", "60", "$__fromTime", fmt.Sprintf("toDateTime(%d)", from), "$__toTime", fmt.Sprintf("toDateTime(%d)", to),
		"${campaign}", "e2e").Replace(s)
	if m := leftover.FindString(s); m != "" {
		t.Errorf("%s: unknown macro or variable %s in %s", where, m, sql)
	}
	return s
}

// TestDashboardSQLRunsOnBothEngines runs every ClickHouse query of the
// dashboards on ClickHouse 18.16 and on the current engine (chDB), each on
// a freshly migrated database.
func TestDashboardSQLRunsOnBothEngines(t *testing.T) {
	var sqls []query
	for _, q := range dashboards(t) {
		if q.ds.Type == typeClickHouse {
			q.text = SQL(t, q.where, q.text)
			sqls = append(sqls, q)
		}
	}
	if len(sqls) == 0 {
		t.Fatal("no ClickHouse queries")
	}
	ctx, cancel := testenv.Context(t)
	defer cancel()

	old := testenv.ClickHouse(t)
	if _, err := chddl.Migrate(ctx, chx.Session(old.Conn), old.Database); err != nil {
		t.Fatalf("migrate on 18.16: %v", err)
	}
	cur := testenv.CurrentClickHouse(t)
	if _, err := chddl.Migrate(ctx, cur, cur.Database); err != nil {
		t.Fatalf("migrate on %s: %v", cur.Version, err)
	}
	for _, q := range sqls {
		rows, err := old.Conn.Query(ctx, q.text)
		if err == nil {
			for rows.Next() {
			}
			err = rows.Err()
			rows.Close()
		}
		if err != nil {
			t.Errorf("%s on ClickHouse 18.16: %v\n%s", q.where, err, q.text)
		}
		if _, _, err := cur.QueryStrings(ctx, q.text); err != nil {
			t.Errorf("%s on ClickHouse %s: %v\n%s", q.where, cur.Version, err, q.text)
		}
	}
}
