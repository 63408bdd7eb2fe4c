package chddl

import (
	"context"
	"fmt"
	"strings"
)

// Migration 0004 (0004_project_keys.sql) puts the project first in the sort
// key of every event table: a ReplacingMergeTree deduplicates rows by its
// whole sort key, so a key without project collapses two projects' rows that
// share an event id (ids chosen by the producer) into one. ClickHouse cannot
// change the leading columns of an existing table's ORDER BY, so Migrate
// rebuilds each event table whose ORDER BY does not start with project
// before it applies 0004 (rekey):
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

// rekeyVersion is the migration before whose statements rekey runs.
const rekeyVersion = 4

// rekeyTables are the event tables and the sort keys 0004 gives them. The
// dead letters (rejected_events: ids from Kafka coordinates), checkpoints
// and trainer steps belong to no project and keep their keys.
var rekeyTables = []struct{ name, orderBy string }{
	{"campaigns", "(project, campaign_id, event_id)"},
	{"cells", "(project, cell_id, kind, event_id)"},
	{"task_attempts", "(project, cell_id, task_id, event_id)"},
	{"skill_events", "(project, cell_id, task_id, event_id)"},
	{"harness_updates", "(project, cell_id, update_id, event_id)"},
	{"adherence_judgments", "(project, cell_id, task_id, event_id)"},
	{"labeled_samples", "(project, cell_id, update_id, event_id)"},
	{"round_metrics", "(project, cell_id, cycle, event_id)"},
}

const (
	rekeySuffix = "__rekey"
	oldSuffix   = "__pre_project"
)

// RekeyError is a table rebuild of migration 0004 that did not finish.
type RekeyError struct {
	Table string
	Err   error
}

func (e *RekeyError) Error() string {
	return fmt.Sprintf("chddl: rebuild %s with project in its sort key (migration 0004): %v", e.Table, e.Err)
}

func (e *RekeyError) Unwrap() error { return e.Err }

// rekey rebuilds the event tables of database whose sort key does not start
// with project, and drops a cell_scores without a project column (see
// above). It is idempotent.
func rekey(ctx context.Context, s Session, database string) error {
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
	for _, t := range rekeyTables {
		if err := rekeyTable(ctx, s, q, t.name, t.orderBy, engine); err != nil {
			return &RekeyError{Table: t.name, Err: err}
		}
	}
	if _, ok := engine["cell_scores"]; ok {
		_, cols, err := s.QueryStrings(ctx, "SELECT name FROM system.columns WHERE database = "+QuoteString(database)+
			" AND table = 'cell_scores' AND name = 'project'")
		if err != nil {
			return &RekeyError{Table: "cell_scores", Err: err}
		}
		if len(cols) == 0 {
			if err := s.Exec(ctx, "DROP TABLE IF EXISTS "+q+".cell_scores"); err != nil {
				return &RekeyError{Table: "cell_scores", Err: err}
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
// database: a CREATE TABLE of an earlier file that 0004 rebuilds gets
// 0004's sort key, and 0003's cell_scores is 0004's (which, finding it,
// creates nothing), so that the printed schema is what Migrate leaves and
// needs no DROP.
func printedStatement(f File, stmt, database string, d Dialect) string {
	q := QuoteIdent(database)
	if f.Version >= rekeyVersion || !strings.HasPrefix(stmt, "CREATE TABLE IF NOT EXISTS ") {
		return stmt
	}
	for _, t := range rekeyTables {
		if strings.HasPrefix(stmt, "CREATE TABLE IF NOT EXISTS "+q+"."+t.name+" (") {
			if i := strings.LastIndex(stmt, "ORDER BY "); i >= 0 {
				return stmt[:i] + "ORDER BY " + t.orderBy
			}
		}
	}
	if strings.HasPrefix(stmt, "CREATE TABLE IF NOT EXISTS "+q+".cell_scores (") {
		for _, g := range Files() {
			if g.Version != rekeyVersion {
				continue
			}
			for _, s := range g.Statements(database, d) {
				if strings.HasPrefix(s, "CREATE TABLE IF NOT EXISTS "+q+".cell_scores (") {
					return s
				}
			}
		}
	}
	return stmt
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
