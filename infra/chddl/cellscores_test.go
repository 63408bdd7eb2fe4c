package chddl_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/chx"

	"github.com/harnessflow/harnessflow/infra/chddl"
)

var fixtureCells = []string{"base_A1", "A1_E1", "A1_E2", "A1_E3", "base_A2", "A2_E1", "A2_E2"}

func sameSnapshot(t *testing.T, what string, a, b map[string][]string) {
	t.Helper()
	for _, v := range viewNames {
		if strings.Join(a[v], "\n") != strings.Join(b[v], "\n") {
			t.Errorf("%s: %s differs:\nlive:\n%s\ngot:\n%s", what, v, strings.Join(a[v], "\n"), strings.Join(b[v], "\n"))
		}
	}
}

func TestCellScoresMatchLiveViewsAndStayExactOnRedelivery(t *testing.T) {
	ch := migrated(t)
	c := ch.Conn
	ctx := context.Background()
	f := viewsFixture(true)
	f.insert(t, c, 1)
	live := snapshot(t, c) // no summaries yet: every cell computed live
	if one(t, c, "SELECT count() FROM cell_scores") != "0" {
		t.Fatal("cell_scores filled by someone else")
	}

	if err := chddl.RecomputeCellScores(ctx, chx.Session(c), ch.Database, append(fixtureCells, "base_A1", "", "no-such-cell")); err != nil {
		t.Fatal(err)
	}
	expect(t, c, "SELECT count(), uniqExact(cell_id) FROM cell_scores FINAL", "7", "7")
	sameSnapshot(t, "after recompute", live, snapshot(t, c))

	// The view reads the summary: a newer summary row is what it shows ...
	b, err := c.PrepareBatch(ctx, "INSERT INTO cell_scores (project, cell_id, n_tasks, pass_rate, pass_rate_final, mean_score, mean_score_final, _version)")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Append("p", "A1_E3", uint64(99), 1.0, 2.0, 3.0, 4.0, uint64(1<<63)); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	expect(t, c, "SELECT n_tasks, pass_rate FROM v_cell_scores WHERE cell_id = 'A1_E3'", "99", "1")
	// ... until the cell is recomputed from its attempts again.
	if err := c.Exec(ctx, "ALTER TABLE cell_scores DELETE WHERE cell_id = 'A1_E3' AND n_tasks = 99"); err != nil {
		t.Fatal(err)
	}
	waitRows(t, "the fake summary to be deleted", func() bool {
		return one(t, c, "SELECT count() FROM cell_scores WHERE n_tasks = 99") == "0"
	})
	if err := chddl.RecomputeCellScores(ctx, chx.Session(c), ch.Database, []string{"A1_E3"}); err != nil {
		t.Fatal(err)
	}
	sameSnapshot(t, "after recomputing a cell", live, snapshot(t, c))

	// Redelivery and replay: the same events again with other versions, and
	// the sink recomputing their cells each time, twice.
	f.insert(t, c, 1000)
	f.insert(t, c, 5000)
	for i := 0; i < 2; i++ {
		if err := chddl.RecomputeCellScores(ctx, chx.Session(c), ch.Database, fixtureCells); err != nil {
			t.Fatal(err)
		}
	}
	sameSnapshot(t, "after redelivery", live, snapshot(t, c))

	// A newer attempt-1 row of base_A1/t4 (a new event, higher version) that
	// succeeds: strict 25 -> 50 once recomputed, and A1_E1's gain 50 -> 25.
	newer := fixture{}
	newer.add("task_attempts", attemptRow("base_A1", "t4", 1, "ok", true, true, 0, 1))
	newer.insert(t, c, 9000)
	if err := chddl.RecomputeCellScores(ctx, chx.Session(c), ch.Database, []string{"base_A1"}); err != nil {
		t.Fatal(err)
	}
	expect(t, c, "SELECT n_tasks, pass_rate, pass_rate_final, mean_score FROM v_cell_scores WHERE cell_id = 'base_A1'", "4", "50", "75", "65")
	expect(t, c, "SELECT delta_pp FROM v_pair_gain WHERE cell_id = 'A1_E1'", "25")

	// A cell written without a summary is computed live beside summarized ones.
	late := fixture{}
	late.add("cells", cellRow("A2_E3", "A2", "E3", 1))
	late.add("task_attempts", attemptRow("A2_E3", "t1", 1, "ok", true, true, 0, 0.5))
	late.add("task_attempts", attemptRow("A2_E3", "t2", 1, "timeout", true, true, 0, 1))
	late.insert(t, c, 1)
	expect(t, c, "SELECT n_tasks, pass_rate, mean_score FROM v_cell_scores WHERE cell_id = 'A2_E3'", "2", "50", "25")
	expect(t, c, "SELECT count() FROM v_cell_scores", "8")
	if err := chddl.RecomputeCellScores(ctx, chx.Session(c), ch.Database, []string{"A2_E3"}); err != nil {
		t.Fatal(err)
	}
	expect(t, c, "SELECT n_tasks, pass_rate, mean_score FROM v_cell_scores WHERE cell_id = 'A2_E3'", "2", "50", "25")
	expect(t, c, "SELECT count() FROM cell_scores FINAL", "8")
}

func TestRecomputeCellScoresQuotesIDs(t *testing.T) {
	ch := migrated(t)
	ctx := context.Background()
	odd := `q'u\o` + "\tte"
	f := fixture{}
	f.add("cells", cellRow(odd, "A1", "", 1))
	f.add("task_attempts", attemptRow(odd, "t1", 1, "ok", true, true, 0, 1))
	f.insert(t, ch.Conn, 1)
	if err := chddl.RecomputeCellScores(ctx, chx.Session(ch.Conn), ch.Database, []string{odd, "x') OR 1 = 1 --"}); err != nil {
		t.Fatal(err)
	}
	var n uint64
	var id string
	if err := ch.Conn.QueryRow(ctx, "SELECT count(), any(cell_id) FROM cell_scores").Scan(&n, &id); err != nil {
		t.Fatal(err)
	}
	if n != 1 || id != odd {
		t.Fatalf("cell_scores: %d rows, id %q", n, id)
	}
	if err := chddl.RecomputeCellScores(ctx, chx.Session(ch.Conn), ch.Database, nil); err != nil {
		t.Fatalf("empty list: %v", err)
	}
	if err := chddl.RecomputeCellScores(ctx, chx.Session(ch.Conn), " ", []string{odd}); !errors.Is(err, chddl.ErrNoDatabase) {
		t.Fatalf("no database: %v", err)
	}
	if err := chddl.RecomputeCellScores(ctx, chx.Session(ch.Conn), ch.Database+"_missing", []string{odd}); err == nil {
		t.Fatal("recompute into a missing database succeeded")
	} else if re := (*chddl.RecomputeError)(nil); !errors.As(err, &re) || re.Cells != 1 {
		t.Fatalf("err = %v", err)
	}
}

func TestMigrateReappliesFilesAfterAChangedOne(t *testing.T) {
	ch := migrated(t)
	ctx := context.Background()
	// The ledger says 0002 was applied with other contents (an edited view).
	b, err := ch.Conn.PrepareBatch(ctx, "INSERT INTO schema_migrations (version, name, checksum, applied_at)")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Append(uint32(2), "0002_views.sql", "edited", time.Now().UTC().Add(time.Hour).Truncate(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	if _, err := chddl.Migrate(ctx, chx.Session(ch.Conn), ch.Database); err != nil {
		t.Fatal(err)
	}
	// 0002 and 0003 ran again (0003 after 0002, so v_cell_scores is 0003's),
	// 0001 did not; the ledger's latest record of each is the file's
	// checksum again, although the edited record was stamped an hour ahead.
	// (Physical row counts are not asserted: the ledger is a
	// ReplacingMergeTree, and a background merge may collapse them.)
	expect(t, ch.Conn, "SELECT max(applied_at) > now() + 1800 FROM schema_migrations WHERE version = 1", "0")
	ledger, err := chddl.Applied(ctx, chx.Session(ch.Conn), ch.Database)
	if err != nil {
		t.Fatal(err)
	}
	files := chddl.Files()
	if len(ledger) != len(files) {
		t.Fatalf("ledger has %d versions, want %d", len(ledger), len(files))
	}
	for i, f := range files {
		if ledger[i].Version != f.Version || ledger[i].Checksum != f.Checksum {
			t.Errorf("ledger %d: version %d checksum %q, want %d %q", i, ledger[i].Version, ledger[i].Checksum, f.Version, f.Checksum)
		}
	}
	if !ledger[1].AppliedAt.After(time.Now().Add(59 * time.Minute)) {
		t.Errorf("re-applied 0002 stamped %v: not after the edited record's time", ledger[1].AppliedAt)
	}
	// A second Migrate has nothing to do: the ledger is unchanged.
	if _, err := chddl.Migrate(ctx, chx.Session(ch.Conn), ch.Database); err != nil {
		t.Fatal(err)
	}
	again, err := chddl.Applied(ctx, chx.Session(ch.Conn), ch.Database)
	if err != nil {
		t.Fatal(err)
	}
	for i := range again {
		if !again[i].AppliedAt.Equal(ledger[i].AppliedAt) {
			t.Errorf("second Migrate re-applied version %d", again[i].Version)
		}
	}
	f := fixture{}
	f.add("cells", cellRow("c9", "A1", "", 1))
	f.insert(t, ch.Conn, 1)
	bb, err := ch.Conn.PrepareBatch(ctx, "INSERT INTO cell_scores (project, cell_id, n_tasks, pass_rate, _version)")
	if err != nil {
		t.Fatal(err)
	}
	// A summary computed under the natural-key rules (0009): its version is
	// at least NaturalKeyBase.
	if err := bb.Append("p", "c9", uint64(7), 42.0, chddl.NaturalKeyBase+1); err != nil {
		t.Fatal(err)
	}
	if err := bb.Send(); err != nil {
		t.Fatal(err)
	}
	expect(t, ch.Conn, "SELECT n_tasks, pass_rate FROM v_cell_scores WHERE cell_id = 'c9'", "7", "42")
}

// waitRows polls cond until it holds, for at most 30s.
func waitRows(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}
