package chddl_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/harnessflow/harnessflow/internal/chx"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var wantTables = []string{
	"adherence_judgments", "campaigns", "cell_scores", "cells", "checkpoints", "critic_eval_diffs", "critic_evals", "harness_updates", "labeled_samples",
	"rejected_events", "round_metrics", "schema_migrations", "skill_events", "task_attempts", "trainer_steps",
	"v_adherence", "v_benefit_gain", "v_cell_scores", "v_label_summary", "v_pair_gain", "v_round_stability",
	"v_skill_activation", "v_update_gain",
}

func tables(t *testing.T, ch *testenv.CH) []string {
	t.Helper()
	rows, err := ch.Conn.Query(context.Background(), "SELECT name FROM system.tables WHERE database = ? ORDER BY name", ch.Database)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func ledgerRows(t *testing.T, ch *testenv.CH) uint64 {
	t.Helper()
	var n uint64
	if err := ch.Conn.QueryRow(context.Background(), "SELECT count() FROM schema_migrations FINAL").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestFilesAreNumberedAndSplit(t *testing.T) {
	files := chddl.Files()
	if len(files) < 2 || files[0].Name != "0001_tables.sql" || files[1].Name != "0002_views.sql" {
		t.Fatalf("Files() = %v", files)
	}
	for i, f := range files {
		if f.Version != uint32(i+1) || len(f.Checksum) != 64 {
			t.Fatalf("file %d: %+v", i, f)
		}
		stmts := f.Statements("x", chddl.Legacy)
		if len(stmts) < 1 {
			t.Fatalf("%s: %d statements", f.Name, len(stmts))
		}
		for _, s := range stmts {
			if strings.Contains(s, chddl.DBPlaceholder) || strings.HasSuffix(s, ";") || strings.HasPrefix(s, "--") {
				t.Fatalf("%s: bad statement %q", f.Name, s)
			}
			if !strings.HasPrefix(s, "CREATE") && !strings.HasPrefix(s, "DROP TABLE IF EXISTS") {
				t.Fatalf("%s: not an idempotent statement: %q", f.Name, s)
			}
			if head, _, _ := strings.Cut(s, "\n"); strings.HasPrefix(s, "CREATE") && !strings.Contains(head, "IF NOT EXISTS") {
				t.Fatalf("%s: CREATE without IF NOT EXISTS: %q", f.Name, head)
			}
		}
	}
}

func TestMigrateTwiceKeepsOneLedgerRowPerFile(t *testing.T) {
	ch := testenv.ClickHouse(t)
	ctx, cancel := testenv.Context(t)
	defer cancel()
	db := ch.Database + "_hf" // Migrate creates the database itself
	if _, err := chddl.Migrate(ctx, chx.Session(ch.Conn), db); err != nil {
		t.Fatal(err)
	}
	if _, err := chddl.Migrate(ctx, chx.Session(ch.Conn), db); err != nil {
		t.Fatalf("second run: %v", err)
	}
	defer ch.Conn.Exec(context.Background(), "DROP DATABASE IF EXISTS `"+db+"`")
	recs, err := chddl.Applied(ctx, chx.Session(ch.Conn), db)
	if err != nil {
		t.Fatal(err)
	}
	files := chddl.Files()
	if len(recs) != len(files) {
		t.Fatalf("ledger %v, want one row per file", recs)
	}
	for i, r := range recs {
		if r.Version != files[i].Version || r.Checksum != files[i].Checksum || r.Name != files[i].Name {
			t.Fatalf("ledger row %+v, file %+v", r, files[i])
		}
	}
	var raw uint64
	if err := ch.Conn.QueryRow(ctx, "SELECT count() FROM `"+db+"`.schema_migrations").Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if raw != uint64(len(files)) {
		t.Fatalf("ledger holds %d rows (before merges), want %d: the second run re-applied", raw, len(files))
	}
	var n uint64
	if err := ch.Conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ?", db).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != uint64(len(wantTables)) {
		t.Fatalf("%d tables and views, want %d", n, len(wantTables))
	}
}

func TestMigrateRecoversFromInterruption(t *testing.T) {
	ch := testenv.ClickHouse(t)
	ctx, cancel := testenv.Context(t)
	defer cancel()
	// Interrupted in the middle of 0002: its first half ran, nothing recorded.
	views := chddl.Files()[1]
	stmts := views.Statements(ch.Database, chddl.Legacy)
	if _, err := chddl.Migrate(ctx, chx.Session(ch.Conn), ch.Database); err != nil {
		t.Fatal(err)
	}
	for _, s := range stmts[:len(stmts)/2+1] { // drops every view, creates some
		if err := ch.Conn.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	// ... and the ledger and a table are lost too.
	for _, s := range []string{
		"DROP TABLE schema_migrations",
		"DROP TABLE task_attempts",
	} {
		if err := ch.Conn.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if got := tables(t, ch); len(got) >= len(wantTables)-1 {
		t.Fatalf("interruption not simulated: %v", got)
	}
	if _, err := chddl.Migrate(ctx, chx.Session(ch.Conn), ch.Database); err != nil {
		t.Fatalf("re-run after interruption: %v", err)
	}
	if got := tables(t, ch); strings.Join(got, ",") != strings.Join(wantTables, ",") {
		t.Fatalf("after recovery: %v\nwant %v", got, wantTables)
	}
	if n := ledgerRows(t, ch); n != uint64(len(chddl.Files())) {
		t.Fatalf("ledger rows %d", n)
	}
	// The views answer (their tables exist again).
	for _, v := range []string{"v_cell_scores", "v_skill_activation", "v_round_stability"} {
		if err := ch.Conn.Exec(ctx, "SELECT * FROM "+v); err != nil {
			t.Fatalf("%s: %v", v, err)
		}
	}
}

func TestMigrateRejectsEmptyDatabase(t *testing.T) {
	ch := testenv.ClickHouse(t)
	if _, err := chddl.Migrate(context.Background(), chx.Session(ch.Conn), " "); !errors.Is(err, chddl.ErrNoDatabase) {
		t.Fatalf("err = %v", err)
	}
}
