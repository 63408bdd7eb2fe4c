package chddl_test

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/chx"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/sinks/report"
)

// The tests of this file run every migration, view, report query and
// documented example on two engines, ClickHouse 18.16 (clickhouse-server)
// and a current ClickHouse (26.7, chDB in process), over one fixture, and
// require the same rows from both.

// engineTables are the tables the fixture fills: every table a view or the
// report reads.
var engineTables = []string{"campaigns", "cells", "task_attempts", "skill_events", "adherence_judgments",
	"round_metrics", "labeled_samples", "rejected_events", "cell_scores", "critic_evals", "critic_eval_diffs"}

// recomputed are the cells whose cell_scores rows the recompute writes; the
// others are computed live by v_cell_scores.
var recomputed = []string{"base_A1", "A1_E1", "A2_E2"}

// enginesFixture is the view fixture with every cell of the tie and edge
// cases: A2's two anchor evolvers tie on Δ (best_evolver), a task without an
// attempt-1 row, a round re-emitted without a lift (NULL after a value), a
// cell with one round, re-evaluated labels, dead letters.
func enginesFixture() fixture {
	f := viewsFixture(true)
	f.add("task_attempts", attemptRow("base_A2", "t5", 2, "ok", true, true, 0, 1))
	f.add("task_attempts", attemptRow("A2_E1", "t5", 2, "ok", true, true, 0, 1))
	f.add("task_attempts", attemptRow("A2_E2", "t5", 2, "ok", true, true, 0, 1))
	f.add("round_metrics", roundRow("A2_E1", "A2", "E1", 1, fp(7)))
	f.add("round_metrics", roundRow("A2_E1", "A2", "E1", 1, nil))
	f.add("round_metrics", roundRow("A2_E1", "A2", "E1", 2, fp(9)))
	f.add("labeled_samples", sampleRow("A2_E1", "A2", "E1", "u9", "neutral", 0.01, 1000))
	f.add("labeled_samples", sampleRow("A2_E1", "A2", "E1", "u9", "positive", 0.2, 1000))
	f.add("rejected_events", row{"event_id": "rj-1", "stage": "syntax", "reason_code": "bad_enum", "message": "status: bad enum",
		"source_topic": "hf.attempts", "source_partition": int32(1), "source_offset": int64(9)})
	f.add("rejected_events", row{"event_id": "rj-2", "stage": "decode", "reason_code": "malformed", "message": "not avro",
		"source_topic": "hf.attempts", "source_partition": int32(2), "source_offset": int64(4)})
	return f
}

// currentMigrated is a migrated database on the current engine.
func currentMigrated(t *testing.T) *testenv.CHDB {
	t.Helper()
	cur := testenv.CurrentClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := chddl.Migrate(ctx, cur, cur.Database)
	if err != nil {
		t.Fatalf("migrate on %s: %v", cur.Version, err)
	}
	if res.Dialect != chddl.Current || res.ServerVersion.Major < 22 || len(res.Applied) != len(chddl.Files()) {
		t.Fatalf("migrate on %s: %+v", cur.Version, res)
	}
	return cur
}

// loadBoth migrates a database on each engine and fills both with the
// fixture: on 18.16 three times (versions 1, 1000, 5000: redelivered
// duplicates in parts that have not merged) with the recompute run for some
// cells, and the critic_evals and critic_eval_diffs rows twice, then
// copied row for row to the current engine, where the recompute runs again.
func loadBoth(t *testing.T) (*testenv.CH, *testenv.CHDB) {
	t.Helper()
	return loadBothWith(t, enginesFixture())
}

// loadBothWith is loadBoth with fixture f.
func loadBothWith(t *testing.T, f fixture) (*testenv.CH, *testenv.CHDB) {
	t.Helper()
	old, cur := migrated(t), currentMigrated(t)
	ctx := context.Background()
	for _, v := range []uint64{1, 1000, 5000} {
		f.insert(t, old.Conn, v)
	}
	insertCriticEvals(t, old.Conn, 2)
	if err := chddl.RecomputeCellScores(ctx, chx.Session(old.Conn), old.Database, recomputed); err != nil {
		t.Fatal(err)
	}
	testenv.CopyTables(t, old, cur, engineTables...)
	if err := chddl.RecomputeCellScores(ctx, cur, cur.Database, recomputed); err != nil {
		t.Fatalf("recompute on %s: %v", cur.Version, err)
	}
	for _, q := range []string{"SELECT count() FROM task_attempts", "SELECT count() FROM cell_scores"} {
		a, b, err := testenv.QueryBoth(old, cur, q)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: 18.16 %v, %s %v", q, a.Rows, cur.Version, b.Rows)
	}
	_, raw, err := cur.QueryStrings(ctx, "SELECT count() FROM task_attempts")
	if err != nil || raw[0][0] != strconv.Itoa(3*len(f["task_attempts"])) {
		t.Fatalf("current engine holds %v task_attempts rows, want the %d unmerged copies (%v)", raw, 3*len(f["task_attempts"]), err)
	}
	return old, cur
}

// viewDiffs compares every view on both engines and returns the views that
// differ, with their differences; a view that fails or is empty counts too.
func viewDiffs(t *testing.T, old *testenv.CH, cur *testenv.CHDB) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, v := range viewNames {
		a, b, err := testenv.QueryBoth(old, cur, "SELECT * FROM "+v)
		switch {
		case err != nil:
			out[v] = err.Error()
		case len(a.Rows) == 0:
			out[v] = "empty on the fixture"
		default:
			if d := testenv.Diff("18.16", a, "chDB", b, false); d != "" {
				out[v] = d
			}
		}
	}
	return out
}

func TestViewsSameOnBothEngines(t *testing.T) {
	old, cur := loadBoth(t)
	for v, d := range viewDiffs(t, old, cur) {
		t.Errorf("%s differs between 18.16 and %s:\n%s", v, cur.Version, d)
	}
	// The tie is broken the same way, by name, on both.
	a, b, err := testenv.QueryBoth(old, cur, "SELECT best_evolver, delta_benefit_pp FROM v_benefit_gain WHERE agent_model = 'A2'")
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Rows) != 1 || a.Rows[0][0] != "E1" || testenv.Diff("18.16", a, "chDB", b, true) != "" {
		t.Errorf("tied best_evolver: 18.16 %v, current %v; want E1 on both", a.Rows, b.Rows)
	}
}

func TestReportSameOnBothEngines(t *testing.T) {
	old, cur := loadBoth(t)
	ctx := context.Background()
	ra, err := report.Build(ctx, old.Conn, "", "c1")
	if err != nil {
		t.Fatal(err)
	}
	rb, err := report.Build(ctx, cur, "", "c1")
	if err != nil {
		t.Fatalf("report on %s: %v", cur.Version, err)
	}
	if len(ra.Cells) == 0 || len(ra.BenefitGain) == 0 || len(ra.Unstable) == 0 || len(ra.Labels) == 0 || len(ra.Rounds) == 0 || len(ra.Critic) != 2 {
		t.Fatalf("report on 18.16 is missing sections: %+v", ra)
	}
	// The rounds carry their MDE (4 tasks: 140 pp); the learning curves
	// their checkpoints in order, trainer-a's a-1 from its newer evaluation.
	for _, p := range ra.Rounds {
		if p.NTasks != 4 || p.MDE == nil || !testenv.Close(*p.MDE, 140) {
			t.Fatalf("round %+v: want n 4, MDE 140 pp", p)
		}
	}
	a, b := ra.Critic[0], ra.Critic[1]
	if a.Trainer != "trainer-a" || len(a.Points) != 2 || a.Points[0].ModelVersion != "a-1" || a.Points[1].Verdict != report.VerdictBeats || a.NoSignal != "" ||
		a.Points[0].Comparison("rmse").Baseline != "median" || !testenv.Close(a.Points[0].Comparison("rmse").Model.Value, 0.184) {
		t.Fatalf("trainer-a's curve on 18.16: %+v", a)
	}
	if b.Trainer != "trainer-b" || !strings.Contains(b.NoSignal, "4 held-out groups are too few") {
		t.Fatalf("trainer-b's curve on 18.16: %+v", b)
	}
	if d := testenv.DiffJSON(ra, rb); d != "" {
		t.Errorf("harnessflow report differs between 18.16 and %s:\n%s", cur.Version, d)
	}
	// The latest campaign is found the same way (Build with no campaign).
	la, err1 := report.Build(ctx, old.Conn, "", "")
	lb, err2 := report.Build(ctx, cur, "", "")
	if err1 != nil || err2 != nil || la.Campaign != lb.Campaign {
		t.Errorf("latest campaign: %v %v / %v %v", la, err1, lb, err2)
	}
}

// TestDocumentedQueriesSameOnBothEngines runs every SQL example of
// docs/analysts.md and of the README on both engines; an example with ORDER BY
// must give the same rows in the same order.
func TestDocumentedQueriesSameOnBothEngines(t *testing.T) {
	old, cur := loadBoth(t)
	n := 0
	for _, doc := range []string{"../../docs/analysts.md", "../../README.md"} {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for i, blk := range sqlBlock.FindAllSubmatch(text, -1) {
			for _, q := range splitSQL(string(blk[1])) {
				n++
				a, b, err := testenv.QueryBoth(old, cur, q)
				if err != nil {
					t.Errorf("%s example %d: %v\n%s", doc, i+1, err, q)
					continue
				}
				if len(a.Rows) == 0 {
					t.Errorf("%s example %d returned no rows:\n%s", doc, i+1, q)
				}
				if d := testenv.Diff("18.16", a, "chDB", b, strings.Contains(q, "ORDER BY")); d != "" {
					t.Errorf("%s example %d differs between 18.16 and %s:\n%s\n%s", doc, i+1, cur.Version, q, d)
				}
			}
		}
	}
	if n < 15 {
		t.Fatalf("%d documented queries, want at least 15", n)
	}
}

// splitSQL splits a block of examples into statements (each ends with ';' at
// the end of a line; `--` comments after it are dropped).
func splitSQL(block string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(block, "\n") {
		code, _, _ := strings.Cut(line, "--")
		if strings.TrimSpace(code) == "" {
			continue
		}
		cur.WriteString(code)
		cur.WriteByte('\n')
		if strings.HasSuffix(strings.TrimSpace(code), ";") {
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// TestOldAnyJoinViewDiffersAcrossEngines is the mutation check of the
// comparison: with v_pair_gain written as before (ANY INNER JOIN), the
// engines disagree, and the comparison says so.
func TestOldAnyJoinViewDiffersAcrossEngines(t *testing.T) {
	old, cur := loadBoth(t)
	ctx := context.Background()
	// v_pair_gain's statements in each dialect, its joins made ANY again.
	mutant := func(database string, d chddl.Dialect) []string {
		var out []string
		for _, s := range chddl.Files()[1].Statements(database, d) {
			if head, _, _ := strings.Cut(s, "\n"); strings.HasSuffix(head, ".v_pair_gain") || strings.HasSuffix(head, ".v_pair_gain AS") {
				if strings.HasPrefix(s, "CREATE") && !strings.Contains(s, "ALL INNER JOIN") {
					t.Fatalf("v_pair_gain has no ALL INNER JOIN:\n%s", s)
				}
				out = append(out, strings.Replace(s, "ALL INNER JOIN", "ANY INNER JOIN", 1))
			}
		}
		if len(out) == 0 {
			t.Fatal("no v_pair_gain in 0002")
		}
		return out
	}
	for _, s := range mutant(old.Database, chddl.Legacy) {
		if err := old.Conn.Exec(ctx, s); err != nil {
			t.Fatalf("18.16: %v", err)
		}
	}
	for _, s := range mutant(cur.Database, chddl.Current) {
		if err := cur.Exec(ctx, s); err != nil {
			t.Fatalf("current: %v", err)
		}
	}
	diffs := viewDiffs(t, old, cur)
	if diffs["v_pair_gain"] == "" {
		t.Fatalf("the ANY INNER JOIN v_pair_gain gives the same rows on both engines: the comparison cannot fail")
	}
	t.Logf("ANY INNER JOIN v_pair_gain, as the engines differ:\n%s", diffs["v_pair_gain"])
	for v, d := range diffs {
		if v != "v_pair_gain" {
			t.Logf("downstream %s also differs:\n%s", v, d)
		}
	}
}

// TestPrintedSchemaApplies applies `migrate --print`'s statements by hand,
// the current dialect on the current engine and the legacy one on 18.16;
// Migrate then finds nothing to do, and every view answers.
func TestPrintedSchemaApplies(t *testing.T) {
	ctx := context.Background()
	t.Run("current engine", func(t *testing.T) {
		cur := testenv.CurrentClickHouse(t)
		for _, s := range printed(t, cur.Database, chddl.Current) {
			if err := cur.Exec(ctx, s); err != nil {
				t.Fatalf("%v\n%s", err, s)
			}
		}
		res, err := chddl.Migrate(ctx, cur, cur.Database)
		if err != nil || len(res.Applied) != 0 {
			t.Fatalf("migrate after the printed schema: %+v %v", res, err)
		}
		for _, v := range viewNames {
			if _, _, err := cur.QueryStrings(ctx, "SELECT count() FROM "+v); err != nil {
				t.Errorf("%s: %v", v, err)
			}
		}
	})
	t.Run("18.16", func(t *testing.T) {
		old := testenv.ClickHouse(t)
		for _, s := range printed(t, old.Database, chddl.Legacy) {
			if err := old.Conn.Exec(ctx, s); err != nil {
				t.Fatalf("%v\n%s", err, s)
			}
		}
		res, err := chddl.Migrate(ctx, chx.Session(old.Conn), old.Database)
		if err != nil || len(res.Applied) != 0 || res.Dialect != chddl.Legacy {
			t.Fatalf("migrate after the printed schema: %+v %v", res, err)
		}
		for _, v := range viewNames {
			if err := old.Conn.Exec(ctx, "SELECT count() FROM "+v); err != nil {
				t.Errorf("%s: %v", v, err)
			}
		}
	})
}

// printed returns Print's statements: each ends with ';' at the end of a line.
func printed(t *testing.T, database string, d chddl.Dialect) []string {
	t.Helper()
	var buf bytes.Buffer
	if err := chddl.Print(&buf, database, d); err != nil {
		t.Fatal(err)
	}
	stmts := splitSQL(buf.String())
	if len(stmts) < 20 {
		t.Fatalf("%d printed statements", len(stmts))
	}
	for i, s := range stmts {
		if !strings.HasSuffix(s, ";") {
			t.Fatalf("statement %d does not end with ';': %q", i, s)
		}
		if d == chddl.Legacy && strings.Contains(s, "OR REPLACE") || d == chddl.Current && strings.Contains(s, "DROP TABLE") {
			t.Fatalf("dialect %s printed %q", d, s)
		}
		stmts[i] = strings.TrimSuffix(s, ";")
	}
	return stmts
}

// TestViewsAlwaysAnswerWhileReplaced re-applies the view migrations one
// statement at a time and queries every view after each: in the current
// dialect no view is ever missing; in the legacy one (18.16) one is, between
// its DROP and its CREATE, which is why Current is used wherever the server
// has CREATE OR REPLACE VIEW.
func TestViewsAlwaysAnswerWhileReplaced(t *testing.T) {
	ctx := context.Background()
	missing := func(query func(string) error) []string {
		var out []string
		for _, v := range viewNames {
			if err := query("SELECT count() FROM " + v); err != nil {
				out = append(out, v)
			}
		}
		return out
	}
	cur := currentMigrated(t)
	old := migrated(t)
	gaps := 0
	for _, f := range chddl.Files()[1:] {
		for _, s := range f.Statements(cur.Database, chddl.Current) {
			if err := cur.Exec(ctx, s); err != nil {
				t.Fatal(err)
			}
			if m := missing(func(q string) error { _, _, err := cur.QueryStrings(ctx, q); return err }); len(m) > 0 {
				t.Fatalf("after %.60q on the current engine, %v do not answer", s, m)
			}
		}
		for _, s := range f.Statements(old.Database, chddl.Legacy) {
			if err := old.Conn.Exec(ctx, s); err != nil {
				t.Fatal(err)
			}
			if m := missing(func(q string) error { return old.Conn.Exec(ctx, q) }); len(m) > 0 {
				gaps++
			}
		}
	}
	if gaps == 0 {
		t.Fatalf("the legacy dialect never left a view missing: the check cannot fail")
	}
}

// TestOlderBinaryLeavesNewerSchemaAlone: once a newer harnessflow has
// recorded a migration this binary does not have, Migrate changes nothing
// (not even a view that differs from this binary's) and says why.
func TestOlderBinaryLeavesNewerSchemaAlone(t *testing.T) {
	ctx := context.Background()
	cur := currentMigrated(t)
	next := chddl.Files()[len(chddl.Files())-1].Version + 1
	for _, s := range []string{
		"CREATE OR REPLACE VIEW v_label_summary AS SELECT 'from the future' AS note",
		"INSERT INTO schema_migrations (version, name, checksum, applied_at) SELECT toUInt32(" + strconv.Itoa(int(next)) + "), 'future.sql', 'abc', now()",
		// and the newer binary also changed a file this binary knows
		"INSERT INTO schema_migrations (version, name, checksum, applied_at) SELECT toUInt32(2), '0002_views.sql', 'changed', now() + 5",
	} {
		if err := cur.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	res, err := chddl.Migrate(ctx, cur, cur.Database)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Newer) != 1 || res.Newer[0].Version != next || len(res.Applied) != 0 {
		t.Fatalf("result %+v, want the newer migration reported and nothing applied", res)
	}
	_, rows, err := cur.QueryStrings(ctx, "SELECT note FROM v_label_summary")
	if err != nil || len(rows) != 1 || rows[0][0] != "from the future" {
		t.Fatalf("the newer view was replaced: %v %v", rows, err)
	}
	// Without the newer record the same binary re-applies the changed file.
	if err := cur.Exec(ctx, "ALTER TABLE schema_migrations DELETE WHERE version = "+strconv.Itoa(int(next))+" SETTINGS mutations_sync = 1"); err != nil {
		t.Fatal(err)
	}
	res, err = chddl.Migrate(ctx, cur, cur.Database)
	if err != nil || len(res.Applied) == 0 || res.Applied[0] != "0002_views.sql" {
		t.Fatalf("after the newer record is gone: %+v %v", res, err)
	}
}
