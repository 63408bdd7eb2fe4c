package chddl_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/testenv"
)

// row is one fixture row: column -> value of the column's Go type.
type row map[string]any

// fixture is a set of rows per table, inserted with named-column batches.
type fixture map[string][]row

func (f fixture) add(table string, r row) { f[table] = append(f[table], r) }

// insert writes every row of f with _version = version + the row's index, so
// that inserting f again with another version makes duplicates of the same
// event_ids with different versions.
func (f fixture) insert(t testing.TB, conn driver.Conn, version uint64) {
	t.Helper()
	ctx := context.Background()
	tables := make([]string, 0, len(f))
	for tb := range f {
		tables = append(tables, tb)
	}
	sort.Strings(tables)
	for _, tb := range tables {
		rows := f[tb]
		// Group rows by column set: one batch per set.
		groups := map[string][]row{}
		var order []string
		for _, r := range rows {
			cols := make([]string, 0, len(r))
			for c := range r {
				cols = append(cols, c)
			}
			sort.Strings(cols)
			key := strings.Join(cols, ",")
			if _, ok := groups[key]; !ok {
				order = append(order, key)
			}
			groups[key] = append(groups[key], r)
		}
		for _, key := range order {
			cols := strings.Split(key, ",")
			b, err := conn.PrepareBatch(ctx, fmt.Sprintf("INSERT INTO %s (%s, _version)", tb, key))
			if err != nil {
				t.Fatalf("prepare %s: %v", tb, err)
			}
			for i, r := range groups[key] {
				vals := make([]any, 0, len(cols)+1)
				for _, c := range cols {
					vals = append(vals, r[c])
				}
				vals = append(vals, version+uint64(i))
				if err := b.Append(vals...); err != nil {
					t.Fatalf("append %s %v: %v", tb, r, err)
				}
			}
			if err := b.Send(); err != nil {
				t.Fatalf("insert %s: %v", tb, err)
			}
		}
	}
}

func fp(v float64) *float64 { return &v }

var evSeq int

// nextID is a new event id; later ids sort after earlier ones as strings
// (zero-padded), since the views' winner among events of one natural key
// and one event time is the greatest event id: with "att-99" before
// "att-100" a test's newer event lost whenever the tests run before it
// (shuffled) had taken the sequence past a power of ten (ci39).
func nextID(prefix string) string { evSeq++; return fmt.Sprintf("%s-%08d", prefix, evSeq) }

func campaignRow(id string, agents, evolvers []string) row {
	return row{"event_id": nextID("camp"), "project": "p", "campaign_id": id, "benchmarks": []string{"swe"},
		"anchor_agents": agents, "anchor_evolvers": evolvers, "label_epsilon": 0.02, "label_alpha": 0.05}
}

func cellRow(cell, agent, evolver string, seed int32) row {
	route := "in_situ"
	if evolver == "" {
		route = "baseline"
	}
	return row{"event_id": nextID("cell"), "project": "p", "kind": "started", "cell_id": cell, "campaign_id": "c1",
		"benchmark": "swe", "agent_model": agent, "evolver_model": evolver, "seed": seed, "route": route}
}

func attemptRow(cell, task string, attempt int32, status string, success, final bool, avail int32, score float64) row {
	b := func(x bool) uint8 {
		if x {
			return 1
		}
		return 0
	}
	return row{"event_id": nextID("att"), "project": "p", "cell_id": cell, "task_id": task, "attempt": attempt,
		"status": status, "success": b(success), "final": b(final), "skills_available": avail, "score": score}
}

func skillRow(cell, task string, attempt int32, tool, status string) row {
	return row{"event_id": nextID("sk"), "project": "p", "cell_id": cell, "task_id": task, "attempt": attempt,
		"tool": tool, "skill_name": "skillX", "status": status}
}

func judgmentRow(cell, task, skill string, f, vc, vo, ru, na int32, phases [5]*float64) row {
	return row{"event_id": nextID("adj"), "project": "p", "cell_id": cell, "task_id": task, "attempt": int32(1),
		"skill_name": skill, "judge_model": "judge", "followed": f, "violated_commission": vc,
		"violated_omission": vo, "required_unobserved": ru, "not_applicable": na,
		"harness_loaded": phases[0], "first_action": phases[1], "midpoint": phases[2], "pre_final": phases[3],
		"final_validation": phases[4]}
}

func roundRow(cell, agent, evolver string, cycle int32, lift *float64) row {
	return row{"event_id": nextID("rm"), "project": "p", "cell_id": cell, "campaign_id": "c1", "benchmark": "swe",
		"agent_model": agent, "evolver_model": evolver, "seed": int32(1), "cycle": cycle, "n_tasks": int32(4), "lift_vs_baseline": lift}
}

func sampleRow(cell, agent, evolver, update, label string, effect float64, producedMs int64) row {
	return row{"event_id": nextID("ls"), "project": "p", "sample_id": nextID("sample"), "update_id": update,
		"cell_id": cell, "campaign_id": "c1", "benchmark": "swe", "agent_model": agent, "evolver_model": evolver,
		"label": label, "effect": effect, "produced_at_ms": producedMs, "produced_at": time.UnixMilli(producedMs).UTC()}
}

// viewsFixture is the hand-computed campaign of the view tests (figures in
// the comments; docs/analysts.md's examples run against it too). Cell A2_E2
// is left out: pass withA2E2 to add it.
func viewsFixture(withA2E2 bool) fixture {
	f := fixture{}
	f.add("campaigns", campaignRow("c1", []string{"A1", "A2"}, []string{"E1", "E2"}))
	for _, c := range [][3]string{
		{"base_A1", "A1", ""}, {"A1_E1", "A1", "E1"}, {"A1_E2", "A1", "E2"}, {"A1_E3", "A1", "E3"},
		{"base_A2", "A2", ""}, {"A2_E1", "A2", "E1"},
	} {
		f.add("cells", cellRow(c[0], c[1], c[2], 1))
	}
	// base_A1: strict 25 (t1), retry 50 (t1, t2 on attempt 2), mean_score 40.
	f.add("task_attempts", attemptRow("base_A1", "t1", 1, "ok", true, true, 0, 1))
	f.add("task_attempts", attemptRow("base_A1", "t2", 1, "ok", false, false, 0, 0.2))
	f.add("task_attempts", attemptRow("base_A1", "t2", 2, "ok", true, true, 0, 1))
	f.add("task_attempts", attemptRow("base_A1", "t3", 1, "ok", false, true, 0, 0.4))
	f.add("task_attempts", attemptRow("base_A1", "t4", 1, "ok", false, true, 0, 0))
	// A1_E1: strict 75 (t4's attempt 1 claims success but errored), retry 100.
	for _, tk := range []string{"t1", "t2", "t3"} {
		f.add("task_attempts", attemptRow("A1_E1", tk, 1, "ok", true, true, 2, 1))
	}
	f.add("task_attempts", attemptRow("A1_E1", "t4", 1, "error", true, false, 2, 0.9))
	f.add("task_attempts", attemptRow("A1_E1", "t4", 2, "ok", true, true, 2, 1))
	// A1_E2: 0 (Δ = -25). A1_E3 (not an anchor evolver): 100 (Δ = +75).
	for _, tk := range []string{"t1", "t2", "t3", "t4"} {
		f.add("task_attempts", attemptRow("A1_E2", tk, 1, "ok", false, true, 0, 0))
		f.add("task_attempts", attemptRow("A1_E3", tk, 1, "ok", true, true, 0, 1))
	}
	// base_A2: 50. A2_E1: 75 (Δ = +25). A2_E2: 75 (Δ = +25).
	cells := []string{"base_A2", "A2_E1"}
	if withA2E2 {
		f.add("cells", cellRow("A2_E2", "A2", "E2", 1))
		cells = append(cells, "A2_E2")
	}
	for _, c := range cells {
		for i, tk := range []string{"t1", "t2", "t3", "t4"} {
			ok := i < 2 || (c != "base_A2" && i < 3)
			f.add("task_attempts", attemptRow(c, tk, 1, "ok", ok, true, 0, 0))
		}
	}
	// Skill events in A1_E1 (5 attempts offered skills): loads at t1/1 and
	// t4/1, a multikey rejection at t2/1, a list_skills at t3/1, not_found at
	// t4/2. SLR = 2/5, LPR = 50 (t4/1 errored), load success = 2/4.
	f.add("skill_events", skillRow("A1_E1", "t1", 1, "load_skill", "loaded"))
	f.add("skill_events", skillRow("A1_E1", "t2", 1, "load_skill", "rejected_multikey"))
	f.add("skill_events", skillRow("A1_E1", "t3", 1, "list_skills", "loaded"))
	f.add("skill_events", skillRow("A1_E1", "t4", 1, "load_skill", "loaded"))
	f.add("skill_events", skillRow("A1_E1", "t4", 2, "load_skill", "not_found"))
	// Judgments of A1: HFR = (3/4 + 1/4) / 2 = 0.5, t3 (denominator 0)
	// skipped. Phases: hl 0.7, fa 0.7, mid 0.5, pre 0.4, fv 0.3.
	f.add("adherence_judgments", judgmentRow("A1_E1", "t1", "skillX", 3, 1, 0, 0, 0,
		[5]*float64{fp(0.8), fp(0.7), fp(0.6), fp(0.5), fp(0.4)}))
	f.add("adherence_judgments", judgmentRow("A1_E1", "t2", "skillX", 1, 0, 1, 2, 0,
		[5]*float64{fp(0.6), nil, fp(0.4), fp(0.3), fp(0.2)}))
	f.add("adherence_judgments", judgmentRow("A1_E1", "t3", "skillY", 0, 0, 0, 0, 3, [5]*float64{}))
	// A2: harness_loaded 0 -> decay NULL, drift 0, HFR 0.
	f.add("adherence_judgments", judgmentRow("A2_E1", "t1", "skillX", 0, 1, 0, 0, 0,
		[5]*float64{fp(0), fp(0), fp(0), fp(0), fp(0)}))
	// Rounds: A1_E1 lifts 10, 20, 30 (+ a round without lift): mean 20, sd 10.
	for i, l := range []*float64{fp(10), fp(20), fp(30), nil} {
		f.add("round_metrics", roundRow("A1_E1", "A1", "E1", int32(i+1), l))
	}
	f.add("round_metrics", roundRow("A1_E2", "A1", "E2", 1, fp(5)))
	// Samples of A1_E1: u1 re-evaluated positive -> negative -> negative (1 flip
	// in 2), u2 neutral, u3 and u4 positive (effects 0.10, 0.30).
	f.add("labeled_samples", sampleRow("A1_E1", "A1", "E1", "u1", "positive", 0.05, 1000))
	f.add("labeled_samples", sampleRow("A1_E1", "A1", "E1", "u1", "negative", -0.05, 2000))
	f.add("labeled_samples", sampleRow("A1_E1", "A1", "E1", "u1", "negative", -0.04, 3000))
	f.add("labeled_samples", sampleRow("A1_E1", "A1", "E1", "u2", "neutral", 0, 1000))
	f.add("labeled_samples", sampleRow("A1_E1", "A1", "E1", "u3", "positive", 0.10, 1000))
	f.add("labeled_samples", sampleRow("A1_E1", "A1", "E1", "u4", "positive", 0.30, 1000))
	return f
}

// one returns the single value query yields, as QueryStrings renders it.
func one(t *testing.T, conn driver.Conn, query string) string {
	t.Helper()
	_, rows, err := chx.QueryStrings(context.Background(), conn, query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	if len(rows) != 1 || len(rows[0]) != 1 {
		t.Fatalf("%s: %d rows %v, want one value", query, len(rows), rows)
	}
	return rows[0][0]
}

// expect checks query's one row against want, column by column.
func expect(t *testing.T, conn driver.Conn, query string, want ...string) {
	t.Helper()
	_, rows, err := chx.QueryStrings(context.Background(), conn, query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	if len(rows) != 1 {
		t.Fatalf("%s: %d rows %v, want 1", query, len(rows), rows)
	}
	if got := strings.Join(rows[0], " | "); got != strings.Join(want, " | ") {
		t.Errorf("%s\n got: %s\nwant: %s", query, got, strings.Join(want, " | "))
	}
}

// Views lists every analyst view.
var viewNames = []string{"v_cell_scores", "v_pair_gain", "v_update_gain", "v_benefit_gain",
	"v_skill_activation", "v_adherence", "v_round_stability", "v_label_summary"}

// snapshot returns the full, sorted contents of every view.
func snapshot(t *testing.T, conn driver.Conn) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, v := range viewNames {
		_, rows, err := chx.QueryStrings(context.Background(), conn, "SELECT * FROM "+v)
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		var lines []string
		for _, r := range rows {
			lines = append(lines, strings.Join(r, "|"))
		}
		sort.Strings(lines)
		out[v] = lines
	}
	return out
}

func migrated(t *testing.T) *testenv.CH {
	t.Helper()
	ch := testenv.ClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := chddl.Migrate(ctx, chx.Session(ch.Conn), ch.Database); err != nil {
		t.Fatal(err)
	}
	return ch
}

func TestViewsOnHandComputedFixture(t *testing.T) {
	ch := migrated(t)
	c := ch.Conn
	viewsFixture(false).insert(t, c, 1)

	t.Run("cell scores: strict and retry readings", func(t *testing.T) {
		q := "SELECT n_tasks, pass_rate, pass_rate_final, mean_score FROM v_cell_scores WHERE cell_id = "
		expect(t, c, q+"'base_A1'", "4", "25", "50", "40")
		expect(t, c, q+"'A1_E1'", "4", "75", "100", "75") // errored attempt 1 is a failure
		expect(t, c, q+"'A1_E2'", "4", "0", "0", "0")
		expect(t, c, "SELECT evolver_model, route, seed FROM v_cell_scores WHERE cell_id = 'base_A2'", "", "baseline", "1")
	})
	t.Run("pair gain", func(t *testing.T) {
		q := "SELECT base_pass_rate, pass_rate, delta_pp FROM v_pair_gain WHERE cell_id = "
		expect(t, c, q+"'A1_E1'", "25", "75", "50")
		expect(t, c, q+"'A1_E2'", "25", "0", "-25")
		expect(t, c, q+"'A2_E1'", "50", "75", "25")
		expect(t, c, "SELECT count() FROM v_pair_gain", "4") // baselines are not pairs
	})
	t.Run("update gain is NULL while an anchor agent's cell is missing", func(t *testing.T) {
		q := "SELECT delta_update_pp, n_anchor_agents, seeds FROM v_update_gain WHERE evolver_model = "
		expect(t, c, q+"'E1'", "37.5", "2", "1") // mean of +50 (A1) and +25 (A2)
		expect(t, c, q+"'E2'", "NULL", "2", "0") // A2_E2 missing
		expect(t, c, q+"'E3'", "NULL", "2", "0")
	})
	t.Run("benefit gain is the max over anchor evolvers with cells below baseline", func(t *testing.T) {
		q := "SELECT delta_benefit_pp, best_evolver, mean_delta_pp, cells_below_baseline, seeds, evolvers FROM v_benefit_gain WHERE agent_model = "
		expect(t, c, q+"'A1'", "50", "E1", "12.5", "1", "1", "2") // E3 (+75) is not an anchor evolver
		expect(t, c, q+"'A2'", "25", "E1", "25", "0", "1", "1")
	})
	t.Run("skill activation", func(t *testing.T) {
		q := "SELECT attempts, skill_load_rate, loaded_pass_rate, hfr, skill_load_success_rate FROM v_skill_activation WHERE agent_model = "
		// SLR ignores rejected_multikey and list_skills; HFR skips t3 (denominator 0).
		expect(t, c, q+"'A1'", "18", "0.4", "50", "0.5", "0.5")
		expect(t, c, q+"'A2'", "8", "NULL", "NULL", "0", "NULL")
	})
	t.Run("adherence drift and decay", func(t *testing.T) {
		q := "SELECT judgments, harness_loaded, first_action, midpoint, pre_final, final_validation, drift, decay_rate FROM v_adherence WHERE agent_model = "
		expect(t, c, q+"'A1'", "3", "0.7", "0.7", "0.5", "0.4", "0.3", "-0.4", "0.5714285714")
		expect(t, c, q+"'A2'", "1", "0", "0", "0", "0", "0", "0", "NULL")
	})
	t.Run("round stability", func(t *testing.T) {
		q := "SELECT rounds, mean_lift, stddev_lift, cv, flip_rate, stability_score FROM v_round_stability WHERE "
		expect(t, c, q+"level = 'cell' AND cell_id = 'A1_E1'", "3", "20", "10", "0.5", "0.5", "10")
		expect(t, c, q+"level = 'cell' AND cell_id = 'A1_E2'", "1", "5", "NULL", "NULL", "0", "NULL")
		expect(t, c, q+"level = 'pair' AND agent_model = 'A1' AND evolver_model = 'E1'", "3", "20", "10", "0.5", "0.5", "10")
	})
	t.Run("label summary", func(t *testing.T) {
		expect(t, c, "SELECT updates, positive, negative, neutral, effective_update_rate, mean_gain FROM v_label_summary WHERE agent_model = 'A1' AND evolver_model = 'E1'",
			"4", "2", "1", "1", "0.5", "20")
	})

	// The missing anchor cell arrives: Δupdate(E2) becomes defined (exactly 0,
	// not NULL), and A2's Δbenefit now spans both anchor evolvers.
	late := fixture{}
	late.add("cells", cellRow("A2_E2", "A2", "E2", 1))
	for i, tk := range []string{"t1", "t2", "t3", "t4"} {
		late.add("task_attempts", attemptRow("A2_E2", tk, 1, "ok", i < 3, true, 0, 0))
	}
	late.insert(t, c, 1)
	expect(t, c, "SELECT delta_update_pp, seeds FROM v_update_gain WHERE evolver_model = 'E2'", "0", "1")
	expect(t, c, "SELECT delta_benefit_pp, mean_delta_pp, cells_below_baseline, evolvers FROM v_benefit_gain WHERE agent_model = 'A2'",
		"25", "25", "0", "2")
}

func TestViewsIgnoreDuplicateEvents(t *testing.T) {
	ch := migrated(t)
	ctx := context.Background()
	f := viewsFixture(true)
	f.insert(t, ch.Conn, 1)
	before := snapshot(t, ch.Conn)
	for v, rows := range before {
		if len(rows) == 0 {
			t.Fatalf("%s is empty on the fixture", v)
		}
	}
	// The same event_ids again, twice, with other versions (a redelivery and
	// a replay), in separate parts that have not merged.
	f.insert(t, ch.Conn, 1000)
	f.insert(t, ch.Conn, 5000)
	var raw uint64
	if err := ch.Conn.QueryRow(ctx, "SELECT count() FROM task_attempts").Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if want := uint64(3 * len(f["task_attempts"])); raw != want {
		t.Fatalf("raw task_attempts rows = %d, want %d (duplicates merged already?)", raw, want)
	}
	after := snapshot(t, ch.Conn)
	for _, v := range viewNames {
		if strings.Join(before[v], "\n") != strings.Join(after[v], "\n") {
			t.Errorf("%s changed after duplicates:\nbefore:\n%s\nafter:\n%s", v,
				strings.Join(before[v], "\n"), strings.Join(after[v], "\n"))
		}
	}
	// And after the merges have collapsed them.
	for tb := range f {
		if err := ch.Conn.Exec(ctx, "OPTIMIZE TABLE "+tb+" FINAL"); err != nil {
			t.Fatal(err)
		}
	}
	merged := snapshot(t, ch.Conn)
	for _, v := range viewNames {
		if strings.Join(before[v], "\n") != strings.Join(merged[v], "\n") {
			t.Errorf("%s changed after merging duplicates", v)
		}
	}
}
