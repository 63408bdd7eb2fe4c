package chddl_test

import (
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/testenv"
)

// asProject returns a copy of f whose rows belong to project, with the same
// event ids, cell ids and update ids; flip turns every attempt's outcome
// around (success and score), so that the copy's figures differ.
func asProject(f fixture, project string, flip bool) fixture {
	out := fixture{}
	for tb, rows := range f {
		for _, r := range rows {
			c := row{}
			for k, v := range r {
				c[k] = v
			}
			c["project"] = project
			if flip && tb == "task_attempts" {
				if s, ok := c["success"].(uint8); ok {
					c["success"] = 1 - s
				}
				if s, ok := c["score"].(float64); ok {
					c["score"] = 1 - s
				}
			}
			out.add(tb, c)
		}
	}
	return out
}

// projectSnapshot is every view's rows of one project, sorted.
func projectSnapshot(t *testing.T, conn driver.Conn, project string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, v := range viewNames {
		_, rows, err := chx.QueryStrings(context.Background(), conn, "SELECT * FROM "+v+" WHERE project = "+chddl.QuoteString(project))
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

// TestTwoProjectsOnOneCellIDStayApart: project q writes the same cells (ids,
// update ids, even event ids) as project p with other outcomes, later (higher
// versions). Every view gives each project what it gives that project alone,
// before and after the cell_scores summaries are recomputed. Before the
// project was in the sort keys and the views' keys, q's rows replaced p's
// (same sort key) and the views mixed the two projects' cells.
func TestTwoProjectsOnOneCellIDStayApart(t *testing.T) {
	fp := viewsFixture(true)
	fp = asProject(fp, "p", false)
	fq := asProject(fp, "q", true)
	var keys []chddl.CellKey
	for _, c := range fixtureCells {
		keys = append(keys, chddl.CellKey{Project: "p", CellID: c}, chddl.CellKey{Project: "q", CellID: c})
	}
	ctx := context.Background()

	alone := map[string]map[string][]string{}
	for project, f := range map[string]fixture{"p": fp, "q": fq} {
		ch := migrated(t)
		f.insert(t, ch.Conn, 1)
		alone[project] = projectSnapshot(t, ch.Conn, project)
		if len(alone[project]["v_cell_scores"]) != len(fixtureCells) {
			t.Fatalf("%s alone: %d cells", project, len(alone[project]["v_cell_scores"]))
		}
	}
	if strings.Join(alone["p"]["v_cell_scores"], "\n") == strings.Join(alone["q"]["v_cell_scores"], "\n") {
		t.Fatal("the two projects' figures are the same: the test tests nothing")
	}

	ch := migrated(t)
	fp.insert(t, ch.Conn, 1)
	fq.insert(t, ch.Conn, 1000)
	for _, step := range []string{"live", "recomputed"} {
		if step == "recomputed" {
			if err := chddl.RecomputeCells(ctx, chx.Session(ch.Conn), ch.Database, keys); err != nil {
				t.Fatal(err)
			}
			expect(t, ch.Conn, "SELECT count() FROM cell_scores FINAL", "14")
		}
		for _, project := range []string{"p", "q"} {
			sameSnapshot(t, step+", project "+project+" beside the other", alone[project], projectSnapshot(t, ch.Conn, project))
		}
	}
	// A recompute by cell id alone (RecomputeCellScores) summarizes each
	// project's cell apart too.
	if err := chddl.RecomputeCellScores(ctx, chx.Session(ch.Conn), ch.Database, fixtureCells); err != nil {
		t.Fatal(err)
	}
	for _, project := range []string{"p", "q"} {
		sameSnapshot(t, "recomputed by cell id, project "+project, alone[project], projectSnapshot(t, ch.Conn, project))
	}
}

// TestMigrateRekeysAnOldDatabase: a database migrated by a binary without
// 0004 (files 0001-0003, sort keys without project) and holding data is
// rebuilt by Migrate: every event table's sort key starts with project, no
// row is lost, no copy is left behind, and the views give what a database
// created with 0004 gives. A copy left by an interrupted rebuild is redone.
func TestMigrateRekeysAnOldDatabase(t *testing.T) {
	ctx := context.Background()
	old := testenv.ClickHouse(t)
	for _, f := range chddl.Files() {
		if f.Version >= 4 {
			continue
		}
		for _, s := range f.Statements(old.Database, chddl.Legacy) {
			if err := old.Conn.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v\n%s", f.Name, err, s)
			}
		}
	}
	fx := viewsFixture(true)
	fx.insert(t, old.Conn, 1)
	counts := func() map[string]string {
		out := map[string]string{}
		for _, tb := range []string{"cells", "task_attempts", "skill_events", "adherence_judgments", "labeled_samples", "round_metrics", "campaigns", "harness_updates"} {
			out[tb] = one(t, old.Conn, "SELECT count() FROM "+tb)
		}
		return out
	}
	before := counts()
	if k := one(t, old.Conn, "SELECT engine_full FROM system.tables WHERE database = currentDatabase() AND name = 'cells'"); strings.Contains(k, "(project,") {
		t.Fatalf("the old schema already keys by project: %s", k)
	}
	// An interrupted earlier rebuild left a partial copy.
	if err := old.Conn.Exec(ctx, "CREATE TABLE task_attempts__rekey AS task_attempts"); err != nil {
		t.Fatal(err)
	}

	if _, err := chddl.Migrate(ctx, chx.Session(old.Conn), old.Database); err != nil {
		t.Fatal(err)
	}
	if got := counts(); strings.Join(mapLines(got), ",") != strings.Join(mapLines(before), ",") {
		t.Errorf("rows per table %v after the rebuild, %v before", got, before)
	}
	for _, tb := range []string{"cells", "task_attempts", "labeled_samples", "adherence_judgments", "campaigns"} {
		k := one(t, old.Conn, "SELECT engine_full FROM system.tables WHERE database = currentDatabase() AND name = '"+tb+"'")
		if !strings.Contains(k, "ORDER BY (project,") {
			t.Errorf("%s: %s", tb, k)
		}
	}
	expect(t, old.Conn, "SELECT count() FROM system.tables WHERE database = currentDatabase() AND (name LIKE '%\\_\\_rekey' OR name LIKE '%\\_\\_pre\\_project')", "0")

	fresh := migrated(t)
	fx.insert(t, fresh.Conn, 1)
	sameSnapshot(t, "rebuilt database", snapshot(t, fresh.Conn), snapshot(t, old.Conn))
	// Nothing left to do.
	res, err := chddl.Migrate(ctx, chx.Session(old.Conn), old.Database)
	if err != nil || len(res.Applied) != 0 {
		t.Fatalf("second migrate: %+v %v", res, err)
	}
}

func mapLines(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// TestReleasedFilesUnchanged: the fragments' {by} keeps the text, hence the
// ledger checksums, of the files released before 0004; a changed checksum
// would make every deployed database apply them again, and an older binary
// undo the newer schema.
func TestReleasedFilesUnchanged(t *testing.T) {
	want := map[string]string{
		"0001_tables.sql":      "0e565950cfc92cb538e301c5cffada1a0c819fc8416b448f8f07544406320c4c",
		"0002_views.sql":       "5752fc27936d042d7d2d806d85ed6d7a0588de3993237db4eaeebd336e6bd4c3",
		"0003_cell_scores.sql": "8c8fe44aeb4a2de3c79974e1a7b0a83f8679bf97de4d52efdc64974793803212",
	}
	for _, f := range chddl.Files() {
		if w, ok := want[f.Name]; ok && f.Checksum != w {
			t.Errorf("%s: checksum %s, released as %s", f.Name, f.Checksum, w)
		}
	}
}

// TestTwoProjectsSameOnBothEngines: the engines fixture in project p and
// again in project q (same cell and event ids, other outcomes) gives the same
// rows in every view on ClickHouse 18.16 and on the current engine, and each
// project's rows there are what the fixture alone gives on 18.16.
func TestTwoProjectsSameOnBothEngines(t *testing.T) {
	f := enginesFixture()
	for tb, rows := range asProject(f, "q", true) {
		if tb == "rejected_events" {
			continue // dead letters belong to no project
		}
		for _, r := range rows {
			f.add(tb, r)
		}
	}
	old, cur := loadBothWith(t, f)
	for v, d := range viewDiffs(t, old, cur) {
		t.Errorf("%s differs between the engines:\n%s", v, d)
	}
	single, _ := loadBoth(t)
	sameSnapshot(t, "project p beside q on 18.16", projectSnapshot(t, single.Conn, "p"), projectSnapshot(t, old.Conn, "p"))
}
