package chddl

import (
	"context"
	"fmt"
	"strings"
)

// Migrations 0004 (0004_project_keys.sql) and 0007 (0007_tenant_keys.sql)
// put the project first in sort keys. 0004 does it for every event table: a ReplacingMergeTree deduplicates rows by its
// whole sort key, so a key without project collapses two projects' rows that
// share an event id (ids chosen by the producer) into one. ClickHouse cannot
// change the leading columns of an existing table's ORDER BY, so Migrate
// rebuilds each table of a migration's rekeys whose ORDER BY does not start
// with project before it applies that migration (rekey):
//
//   - detected by system.tables.engine_full: its ORDER BY does not start
//     with "(project,";
//   - rebuilt by copy: CREATE TABLE <t>__rekey AS <t> with the new key,
//     INSERT ... SELECT every row, check that both hold the same number of
//     rows, RENAME <t> TO <t>__pre_project, <t>__rekey TO <t>, DROP the old
//     table. Rows keep their _version, so nothing is deduplicated otherwise
//     than before (only two projects' rows stop collapsing);
//   - an interrupted rebuild is finished by running Migrate again: a
//     leftover <t>__rekey is dropped and copied again, or renamed to <t>
//     when <t> is missing (stopped between the two renames); a leftover
//     <t>__pre_project is dropped once <t> has the new key;
//   - writers must be stopped while it runs (the sinks run Migrate at start,
//     before they consume; stop the other sinks before upgrading the first):
//     a row written to the old table after the copy would be lost, so a
//     count that differs after the copy stops Migrate with an error and the
//     old table in place (stop the writers, run `harnessflow migrate` again).
//
// The copy reads and writes every row once: on a large database, run
// `harnessflow migrate` on its own, sinks stopped, before restarting them.
// Unlike the rest of Migrate, the rebuild is not meant to run twice at once
// (two sinks starting together on an old database): one of them may fail
// on the other's copy or rename; the next Migrate finishes the rebuild.
// cell_scores, a summary the sink recomputes, had no project column: it is
// dropped and re-created (0004); until the sink recomputes a cell,
// v_cell_scores computes it live, with the same figures.
//
// 0007 does the same, by the same copy, for the tables 0004 left without a
// project (issue 35): rejected_events, whose key was event_id alone, so a
// dead letter of one project with the id of another's replaced it; and
// checkpoints, keyed (project, source, model_version, event_id), so that a
// checkpoint_published row that did not come from the trainer (whose rows
// have project '' and source "trainer:<name>"; every event a tenant sends
// through the gateway carries the tenant's non-empty project) never replaces
// the trainer's row.

// rekeyed is a table a migration rebuilds, and the sort key it gives it.
type rekeyed struct{ name, orderBy string }

// rekeys are, per migration, the tables rebuilt before its statements run,
// with their new sort keys. Every key starts with project (keyedByProject).
var rekeys = map[uint32][]rekeyed{
	// The event tables; trainer_steps and the critic tables are the
	// trainer's own (no tenant writes them) and keep their keys.
	4: {
		{"campaigns", "(project, campaign_id, event_id)"},
		{"cells", "(project, cell_id, kind, event_id)"},
		{"task_attempts", "(project, cell_id, task_id, event_id)"},
		{"skill_events", "(project, cell_id, task_id, event_id)"},
		{"harness_updates", "(project, cell_id, update_id, event_id)"},
		{"adherence_judgments", "(project, cell_id, task_id, event_id)"},
		{"labeled_samples", "(project, cell_id, update_id, event_id)"},
		{"round_metrics", "(project, cell_id, cycle, event_id)"},
	},
	// The dead letters and the checkpoints.
	7: {
		{"rejected_events", "(project, event_id)"},
		{"checkpoints", "(project, source, model_version, event_id)"},
	},
}

// addedColumn is a column a migration adds to an existing table, after the
// column after.
type addedColumn struct{ table, column, typ, after string }

// addedColumns are, per migration, the columns added to older databases'
// tables before its statements run (its CREATE TABLE IF NOT EXISTS, which
// holds them, creates nothing where the table exists). 18.16 has no ADD
// COLUMN IF NOT EXISTS: Migrate looks the column up first.
var addedColumns = map[uint32][]addedColumn{
	7: {
		{"critic_evals", "project", "String", "trainer"},
		{"critic_eval_diffs", "project", "String", "trainer"},
	},
	// The evaluation set each row was evaluated on (issue 36), in order:
	// eval_epoch comes after the column added just before it.
	8: {
		{"critic_evals", "eval_set_sha256", "String", "checkpoint_sha256"},
		{"critic_evals", "eval_epoch", "UInt64", "eval_set_sha256"},
		{"critic_eval_diffs", "eval_set_sha256", "String", "checkpoint_sha256"},
		{"critic_eval_diffs", "eval_epoch", "UInt64", "eval_set_sha256"},
	},
	// The id of the event a dead letter refuses (issue 42): the views leave
	// out the events refused as late_beyond_window by it.
	9: {
		{"rejected_events", "source_event_id", "String", "payload"},
	},
}

// addColumns adds the columns of migration version's addedColumns that the
// tables of database lack; on a cluster (cluster set) ON CLUSTER to the
// replicated local table, and the Distributed table over it, which lacks
// them too, is dropped ON CLUSTER for the migration's CREATE (which holds
// them, and runs next) to create again: 18.16 refuses an ALTER ... ON
// CLUSTER of a table that is not replicated on a cluster whose shards
// replicate ("isn't replicated, but shard #1 is replicated according to its
// cluster definition"). A Distributed table holds no rows of its own, and
// harnessflow's writers insert synchronously (chx.Cluster), so none are
// queued in it; an insert that comes while it is gone fails (stop the
// trainers while a cluster migrates). A table that does not exist yet is
// left to the migration's CREATE. It is idempotent.
func addColumns(ctx context.Context, s Session, database, cluster string, version uint32) error {
	q := QuoteIdent(database)
	for _, c := range addedColumns[version] {
		tables := []string{c.table}
		if cluster != "" {
			tables = []string{c.table + LocalSuffix, c.table}
		}
		for _, tb := range tables {
			has := func() (bool, bool, error) {
				_, rows, err := s.QueryStrings(ctx, "SELECT name FROM system.columns WHERE database = "+QuoteString(database)+
					" AND table = "+QuoteString(tb)+" AND name IN ("+QuoteString(c.column)+", "+QuoteString(c.after)+")")
				if err != nil {
					return false, false, err
				}
				found := map[string]bool{}
				for _, r := range rows {
					if len(r) == 1 {
						found[r[0]] = true
					}
				}
				return found[c.column], found[c.after], nil
			}
			col, table, err := has()
			if err != nil {
				return &ColumnError{Version: version, Table: tb, Column: c.column, Err: err}
			}
			if col || !table {
				continue
			}
			on := ""
			if cluster != "" {
				on = " ON CLUSTER " + cluster
			}
			if cluster != "" && tb == c.table {
				// The Distributed table: re-created by the migration's CREATE.
				if err := s.Exec(ctx, "DROP TABLE IF EXISTS "+q+"."+QuoteIdent(tb)+on); err != nil {
					return &ColumnError{Version: version, Table: tb, Column: c.column, Err: err}
				}
				continue
			}
			stmt := "ALTER TABLE " + q + "." + QuoteIdent(tb) + on + " ADD COLUMN " + QuoteIdent(c.column) + " " + c.typ + " AFTER " + QuoteIdent(c.after)
			if err := s.Exec(ctx, stmt); err != nil {
				// Another Migrate may have added it meanwhile.
				if col, _, err2 := has(); err2 != nil || !col {
					return &ColumnError{Version: version, Table: tb, Column: c.column, Err: err}
				}
			}
		}
	}
	return nil
}

// ColumnError is a column a migration adds to an existing table that could
// not be added.
type ColumnError struct {
	Version       uint32
	Table, Column string
	Err           error
}

func (e *ColumnError) Error() string {
	return fmt.Sprintf("chddl: add column %s to %s (migration %04d): %v; fix the cause and migrate again (the ALTER is idempotent)",
		e.Column, e.Table, e.Version, e.Err)
}

func (e *ColumnError) Unwrap() error { return e.Err }

// cellScoresVersion is the migration that re-creates cell_scores with a
// project column (0004).
const cellScoresVersion = 4

const (
	rekeySuffix = "__rekey"
	oldSuffix   = "__pre_project"
)

// RekeyError is a table rebuild of a migration that did not finish.
type RekeyError struct {
	// Version is the migration (4 or 7).
	Version uint32
	Table   string
	Err     error
}

func (e *RekeyError) Error() string {
	return fmt.Sprintf("chddl: rebuild %s with project in its sort key (migration %04d): %v", e.Table, e.Version, e.Err)
}

func (e *RekeyError) Unwrap() error { return e.Err }

// rekey rebuilds the tables of migration version's rekeys in database whose
// sort key does not start with project, and for 0004 drops a cell_scores
// without a project column (see above). It is idempotent.
func rekey(ctx context.Context, s Session, database string, version uint32) error {
	tables, ok := rekeys[version]
	if !ok {
		return nil
	}
	q := QuoteIdent(database)
	_, rows, err := s.QueryStrings(ctx, "SELECT name, engine_full FROM system.tables WHERE database = "+QuoteString(database))
	if err != nil {
		return fmt.Errorf("chddl: list the tables of %s: %w", database, err)
	}
	engine := map[string]string{}
	for _, r := range rows {
		if len(r) == 2 {
			engine[r[0]] = r[1]
		}
	}
	for _, t := range tables {
		if err := rekeyTable(ctx, s, q, t.name, t.orderBy, engine); err != nil {
			return &RekeyError{Version: version, Table: t.name, Err: err}
		}
	}
	if _, ok := engine["cell_scores"]; ok && version == cellScoresVersion {
		_, cols, err := s.QueryStrings(ctx, "SELECT name FROM system.columns WHERE database = "+QuoteString(database)+
			" AND table = 'cell_scores' AND name = 'project'")
		if err != nil {
			return &RekeyError{Version: version, Table: "cell_scores", Err: err}
		}
		if len(cols) == 0 {
			if err := s.Exec(ctx, "DROP TABLE IF EXISTS "+q+".cell_scores"); err != nil {
				return &RekeyError{Version: version, Table: "cell_scores", Err: err}
			}
		}
	}
	return nil
}

// keyedByProject reports whether a table's engine_full names a sort key that
// starts with project.
func keyedByProject(engineFull string) bool {
	_, key, ok := strings.Cut(engineFull, "ORDER BY ")
	return ok && strings.HasPrefix(strings.TrimSpace(key), "(project,")
}

func rekeyTable(ctx context.Context, s Session, q, name, orderBy string, engine map[string]string) error {
	tbl, tmp, old := q+"."+QuoteIdent(name), q+"."+QuoteIdent(name+rekeySuffix), q+"."+QuoteIdent(name+oldSuffix)
	full, have := engine[name]
	_, haveTmp := engine[name+rekeySuffix]
	if !have {
		if !haveTmp {
			return nil // not created yet (0001 creates it): nothing to rebuild
		}
		// Stopped between the two renames: the copy is complete.
		if err := s.Exec(ctx, "RENAME TABLE "+tmp+" TO "+tbl); err != nil {
			return err
		}
		return s.Exec(ctx, "DROP TABLE IF EXISTS "+old)
	}
	if keyedByProject(full) {
		if err := s.Exec(ctx, "DROP TABLE IF EXISTS "+tmp); err != nil {
			return err
		}
		return s.Exec(ctx, "DROP TABLE IF EXISTS "+old)
	}
	for _, stmt := range rebuildStatements(q, name, orderBy)[:3] {
		if err := s.Exec(ctx, stmt); err != nil {
			return err
		}
	}
	n, err := countRows(ctx, s, tbl)
	if err != nil {
		return err
	}
	m, err := countRows(ctx, s, tmp)
	if err != nil {
		return err
	}
	if n != m {
		_ = s.Exec(ctx, "DROP TABLE IF EXISTS "+tmp)
		return fmt.Errorf("%s holds %s rows, its copy %s: rows were written during the copy; stop every writer (sinks) and migrate again", name, n, m)
	}
	for _, stmt := range rebuildStatements(q, name, orderBy)[3:] {
		if err := s.Exec(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// rebuildStatements rebuilds table name of the quoted database q with the
// sort key orderBy: drop a leftover copy, create the copy, fill it, swap the
// two, drop the old table.
func rebuildStatements(q, name, orderBy string) []string {
	tbl, tmp, old := q+"."+QuoteIdent(name), q+"."+QuoteIdent(name+rekeySuffix), q+"."+QuoteIdent(name+oldSuffix)
	return []string{
		"DROP TABLE IF EXISTS " + tmp,
		"CREATE TABLE " + tmp + " AS " + tbl + " ENGINE = ReplacingMergeTree(_version) ORDER BY " + orderBy,
		"INSERT INTO " + tmp + " SELECT * FROM " + tbl,
		"RENAME TABLE " + tbl + " TO " + old + ", " + tmp + " TO " + tbl,
		"DROP TABLE " + old,
	}
}

// printedStatement is stmt of file f as Print writes it for an empty
// database: a CREATE TABLE of an earlier file whose table a later file
// creates again is that later file's (0003's cell_scores is 0004's; 0001's
// rejected_events and checkpoints are 0007's; 0005's, 0006's and 0007's
// critic tables are 0008's), and one that a later migration rebuilds without creating it
// (0004's event tables) gets that migration's sort key, so that the printed
// schema is what Migrate leaves and needs no DROP or ALTER.
func printedStatement(f File, stmt, database string, d Dialect) string {
	q := QuoteIdent(database)
	if !strings.HasPrefix(stmt, "CREATE TABLE IF NOT EXISTS ") {
		return stmt
	}
	head, _, _ := strings.Cut(stmt, "\n")
	later := ""
	for _, g := range Files() {
		if g.Version <= f.Version {
			continue
		}
		for _, s := range g.Statements(database, d) {
			if h, _, _ := strings.Cut(s, "\n"); h == head {
				later = s
			}
		}
	}
	if later != "" {
		return later
	}
	if t, ok := finalKey(f.Version, stmt, q); ok {
		if i := strings.LastIndex(stmt, "ORDER BY "); i >= 0 {
			return stmt[:i] + "ORDER BY " + t
		}
	}
	return stmt
}

// finalKey is the sort key of the latest migration after version that
// rebuilds the table stmt creates in the quoted database q, if any.
func finalKey(version uint32, stmt, q string) (string, bool) {
	key, found, at := "", false, version
	for v, tables := range rekeys {
		if v <= at {
			continue
		}
		for _, t := range tables {
			if strings.HasPrefix(stmt, "CREATE TABLE IF NOT EXISTS "+q+"."+t.name+" (") {
				key, found, at = t.orderBy, true, v
			}
		}
	}
	return key, found
}

func countRows(ctx context.Context, s Session, tbl string) (string, error) {
	_, rows, err := s.QueryStrings(ctx, "SELECT toString(count()) FROM "+tbl)
	if err != nil {
		return "", err
	}
	if len(rows) != 1 || len(rows[0]) != 1 {
		return "", fmt.Errorf("count %s: %d rows", tbl, len(rows))
	}
	return rows[0][0], nil
}
