package chddl_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chx"
)

// TestVerifyCellsFindsWhatARecomputeMissed: VerifyCells reports a cell
// until its summary is what its attempts give, and reports one whose listed
// attempts the read does not see (a replica that has not fetched an insert
// yet: here, an id never inserted).
func TestVerifyCellsFindsWhatARecomputeMissed(t *testing.T) {
	ch := migrated(t)
	c := ch.Conn
	ctx := context.Background()
	se := chx.Session(c)
	f := viewsFixture(true)
	f.insert(t, c, 1)

	// The checks a sink makes: each cell with two of its event ids.
	_, rows, err := chx.QueryStrings(ctx, c, "SELECT project, cell_id, arraySort(groupUniqArray(event_id)) FROM task_attempts GROUP BY project, cell_id ORDER BY cell_id")
	if err != nil {
		t.Fatal(err)
	}
	var checks []chddl.CellCheck
	for _, r := range rows {
		var ids []string
		for _, id := range strings.Split(strings.Trim(r[2], "[]"), ",") {
			ids = append(ids, strings.Trim(id, "'"))
		}
		checks = append(checks, chddl.CellCheck{Key: chddl.CellKey{Project: r[0], CellID: r[1]}, EventIDs: ids[:min(2, len(ids))]})
	}
	if len(checks) != len(fixtureCells) {
		t.Fatalf("fixture cells with attempts: %d, want %d", len(checks), len(fixtureCells))
	}
	verify := func(what string, checks []chddl.CellCheck, want ...string) {
		t.Helper()
		got, err := chddl.VerifyCells(ctx, se, ch.Database, checks)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var ids []string
		for _, k := range got {
			ids = append(ids, k.CellID)
		}
		sort.Strings(ids)
		sort.Strings(want)
		if fmt.Sprint(ids) != fmt.Sprint(want) {
			t.Errorf("%s: unsettled %v, want %v", what, ids, want)
		}
	}

	// No summary yet: every cell is unsettled.
	all := append([]string(nil), fixtureCells...)
	verify("before any recompute", checks, all...)
	// One recompute of all but A2_E2: only A2_E2 is left.
	var keys []chddl.CellKey
	for _, ck := range checks {
		if ck.Key.CellID != "A2_E2" {
			keys = append(keys, ck.Key)
		}
	}
	if err := chddl.RecomputeCells(ctx, se, ch.Database, keys); err != nil {
		t.Fatal(err)
	}
	verify("after recomputing all but A2_E2", checks, "A2_E2")
	// An insert the read does not hold yet: its cell is unsettled though
	// its summary matches what was read.
	stale := append([]chddl.CellCheck(nil), checks...)
	stale = append(stale, chddl.CellCheck{Key: checks[0].Key, EventIDs: []string{"not-fetched-yet"}})
	verify("with an id the read lacks", stale, "A2_E2", checks[0].Key.CellID)
	// A new attempt inserted after the summary: the cell is unsettled until
	// recomputed.
	newer := fixture{}
	newer.add("task_attempts", attemptRow("base_A1", "t9", 1, "ok", true, true, 0, 1))
	newer.insert(t, c, 9000)
	verify("after a new attempt of base_A1", checks, "A2_E2", "base_A1")
	if err := chddl.RecomputeCells(ctx, se, ch.Database, []chddl.CellKey{{Project: checks[0].Key.Project, CellID: "base_A1"}, {Project: checks[0].Key.Project, CellID: "A2_E2"}}); err != nil {
		t.Fatal(err)
	}
	verify("after recomputing them", checks)
	// A cell of another project with the same id is another cell.
	verify("another project's cell", []chddl.CellCheck{{Key: chddl.CellKey{Project: "other", CellID: "base_A1"}}}, "base_A1")
	verify("nothing to check", nil)
	if _, err := chddl.VerifyCells(ctx, se, " ", checks); err == nil {
		t.Error("VerifyCells without a database succeeded")
	}
}
