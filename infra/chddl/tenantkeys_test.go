package chddl_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/testenv"
)

// engine is one of the two engines the migrations are tested on, as a
// chddl.Session with a database of the test's own.
type engine struct {
	name string
	s    chddl.Session
	db   string
	d    chddl.Dialect
}

// bothEngines are a fresh database on ClickHouse 18.16 and one on the
// current engine (chDB).
func bothEngines(t *testing.T) []engine {
	t.Helper()
	old, cur := testenv.ClickHouse(t), testenv.CurrentClickHouse(t)
	return []engine{
		{"18.16", chx.Session(old.Conn), old.Database, chddl.Legacy},
		{"chDB " + cur.Version, cur, cur.Database, chddl.Current},
	}
}

func (e engine) exec(t *testing.T, q string) {
	t.Helper()
	if err := e.s.Exec(context.Background(), strings.ReplaceAll(q, "{db}", chddl.QuoteIdent(e.db))); err != nil {
		t.Fatalf("%s: %.300s: %v", e.name, q, err)
	}
}

// rows answers q ({db} replaced) as lines of tab-separated values.
func (e engine) rows(t *testing.T, q string) []string {
	t.Helper()
	_, rows, err := e.s.QueryStrings(context.Background(), strings.ReplaceAll(q, "{db}", chddl.QuoteIdent(e.db)))
	if err != nil {
		t.Fatalf("%s: %.300s: %v", e.name, q, err)
	}
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = strings.Join(r, "\t")
	}
	return out
}

func (e engine) one(t *testing.T, q string) string {
	t.Helper()
	r := e.rows(t, q)
	if len(r) != 1 {
		t.Fatalf("%s: %s: %d rows %q, want one", e.name, q, len(r), r)
	}
	return r[0]
}

// Inserts as INSERT ... SELECT: 18.16 takes no inline VALUES through Exec.
const (
	insertDeadLetter = "INSERT INTO {db}.rejected_events (event_id, project, source, stage, reason_code, message, _version) " +
		"SELECT '%s', '%s', 'processor', 'semantic', 'unknown_cell', '%s', toUInt64(%d)"
	insertCheckpoint = "INSERT INTO {db}.checkpoints (event_id, project, source, model_version, step, metric_name, metric_value, _version) " +
		"SELECT 'checkpoint:%[3]s', '%[1]s', '%[2]s', '%[3]s', toInt64(7), ['heldout_acc'], [%[4]g], toUInt64(%[5]d)"
)

// TestDeadLettersAndCheckpointsKeepTheirProject: two projects' dead
// letters with one event id both stay in rejected_events FINAL, and a
// checkpoint_published row from a tenant (its project set, as the gateway
// sets every tenant event's) with the trainer's source, model version and
// event id, written later, does not replace the trainer's row (project "").
// On both engines. Before 0007, rejected_events was keyed by event_id and
// checkpoints by (model_version, event_id): the later row replaced the
// other.
func TestDeadLettersAndCheckpointsKeepTheirProject(t *testing.T) {
	for _, e := range bothEngines(t) {
		t.Run(e.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := chddl.Migrate(ctx, e.s, e.db); err != nil {
				t.Fatal(err)
			}
			e.exec(t, fmt.Sprintf(insertDeadLetter, "dl-1", "projB", "projB attempt", 1))
			e.exec(t, fmt.Sprintf(insertDeadLetter, "dl-1", "projA", "projA forgery", 1000))
			if got := e.rows(t, "SELECT project, message FROM {db}.rejected_events FINAL ORDER BY project"); strings.Join(got, "\n") != "projA\tprojA forgery\nprojB\tprojB attempt" {
				t.Errorf("rejected_events FINAL:\n%s\nwant both projects' dead letters", strings.Join(got, "\n"))
			}
			e.exec(t, fmt.Sprintf(insertCheckpoint, "", "trainer:t", "t-v1", 0.5, 1))
			e.exec(t, fmt.Sprintf(insertCheckpoint, "projA", "trainer:t", "t-v1", 0.99, 1000))
			if got := e.one(t, "SELECT toString(metric_value) FROM {db}.checkpoints FINAL WHERE project = '' AND source = 'trainer:t'"); got != "[0.5]" {
				t.Errorf("the trainer's checkpoint row has metrics %s, want [0.5]: a tenant's row replaced it", got)
			}
			if got := e.one(t, "SELECT count() FROM {db}.checkpoints FINAL"); got != "2" {
				t.Errorf("checkpoints FINAL holds %s rows, want the trainer's and the forgery", got)
			}
		})
	}
}

// TestMigrate0007UpgradesADatabaseWithRows: a database migrated through
// 0006 (rejected_events keyed by event_id, checkpoints by (model_version,
// event_id), critic tables without project) and holding rows is upgraded
// by Migrate, on both engines: 0007 (and 0008 after it) is applied, every row survives
// with its _version, the two tables are rebuilt with project
// leading their keys and no copy is left behind, the critic tables' old
// rows read project "", the trainer writes the new column, and a second
// Migrate finds nothing to do. A copy left by an interrupted rebuild is
// redone.
func TestMigrate0007UpgradesADatabaseWithRows(t *testing.T) {
	for _, e := range bothEngines(t) {
		t.Run(e.name, func(t *testing.T) {
			ctx, cancel := testenv.Context(t)
			defer cancel()
			asOf0006(ctx, t, e)
			for i, p := range []string{"p", "q", "p"} {
				e.exec(t, fmt.Sprintf(insertDeadLetter, fmt.Sprintf("dl-%d", i), p, "m", i+1))
			}
			e.exec(t, fmt.Sprintf(insertCheckpoint, "", "trainer:t", "t-v1", 0.5, 1))
			e.exec(t, fmt.Sprintf(insertCheckpoint, "", "trainer:t", "t-v2", 0.6, 2))
			for _, tb := range []string{"critic_evals", "critic_eval_diffs"} {
				e.exec(t, "INSERT INTO {db}."+tb+" (trainer, model_version, metric, evaluated_at) SELECT 't', 't-v1', 'rmse', toDateTime(1700000000)")
			}
			counts := func() string {
				var out []string
				for _, tb := range []string{"rejected_events", "checkpoints", "critic_evals", "critic_eval_diffs"} {
					out = append(out, tb+"="+e.one(t, "SELECT count() FROM {db}."+tb))
				}
				return strings.Join(out, " ")
			}
			before := counts()
			if before != "rejected_events=3 checkpoints=2 critic_evals=1 critic_eval_diffs=1" {
				t.Fatalf("fixture: %s", before)
			}
			// An interrupted earlier rebuild left a partial copy.
			e.exec(t, "CREATE TABLE {db}.rejected_events__rekey AS {db}.rejected_events")

			res, err := chddl.Migrate(ctx, e.s, e.db)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(res.Applied, ",") != filesFrom(7) {
				t.Errorf("applied %v, want 0007 and the files after it (%s)", res.Applied, filesFrom(7))
			}
			if got := counts(); got != before {
				t.Errorf("rows after the upgrade: %s, before: %s", got, before)
			}
			for tb, key := range map[string]string{"rejected_events": "ORDER BY (project, event_id)",
				"checkpoints": "ORDER BY (project, source, model_version, event_id)"} {
				if full := e.one(t, "SELECT engine_full FROM system.tables WHERE database = "+chddl.QuoteString(e.db)+" AND name = '"+tb+"'"); !strings.Contains(full, key) {
					t.Errorf("%s: %s, want %s", tb, full, key)
				}
			}
			if n := e.one(t, "SELECT count() FROM system.tables WHERE database = "+chddl.QuoteString(e.db)+
				" AND (name LIKE '%\\_\\_rekey' OR name LIKE '%\\_\\_pre\\_project')"); n != "0" {
				t.Errorf("%s copies left behind", n)
			}
			if got := e.rows(t, "SELECT project, event_id FROM {db}.rejected_events FINAL ORDER BY event_id"); strings.Join(got, ",") != "p\tdl-0,q\tdl-1,p\tdl-2" {
				t.Errorf("rejected_events FINAL after the upgrade: %q", got)
			}
			for _, tb := range []string{"critic_evals", "critic_eval_diffs"} {
				if got := e.one(t, "SELECT concat('[', project, ']') FROM {db}."+tb); got != "[]" {
					t.Errorf("%s: an old row's project %s, want ''", tb, got)
				}
				e.exec(t, "INSERT INTO {db}."+tb+" (trainer, project, model_version, metric, evaluated_at) SELECT 't', 'p', 't-v2', 'rmse', toDateTime(1700000001)")
			}
			// Dead letters of two projects with one id stay two rows now.
			e.exec(t, fmt.Sprintf(insertDeadLetter, "dl-0", "q", "m", 500))
			if got := e.one(t, "SELECT count() FROM {db}.rejected_events FINAL WHERE event_id = 'dl-0'"); got != "2" {
				t.Errorf("dl-0 of p and q: %s rows in rejected_events FINAL, want 2", got)
			}
			again, err := chddl.Migrate(ctx, e.s, e.db)
			if err != nil || len(again.Applied) != 0 {
				t.Fatalf("second migrate: %+v %v", again, err)
			}
		})
	}
}

// asOf0006 leaves e's database as a binary with migrations 0001-0006 left
// it: Migrate, then the two tables 0007 rebuilds re-created with 0001's
// keys, the critic tables without project (nor 0008's columns), and a
// ledger that ends at 0006.
func asOf0006(ctx context.Context, t *testing.T, e engine) {
	t.Helper()
	if _, err := chddl.Migrate(ctx, e.s, e.db); err != nil {
		t.Fatal(err)
	}
	q := chddl.QuoteIdent(e.db)
	e.exec(t, "DROP TABLE {db}.rejected_events")
	e.exec(t, "DROP TABLE {db}.checkpoints")
	for _, s := range chddl.Files()[0].Statements(e.db, e.d) {
		if strings.HasPrefix(s, "CREATE TABLE IF NOT EXISTS "+q+".rejected_events (") ||
			strings.HasPrefix(s, "CREATE TABLE IF NOT EXISTS "+q+".checkpoints (") {
			e.exec(t, s)
		}
	}
	dropEvalSetColumns(t, e)
	e.exec(t, "ALTER TABLE {db}.critic_evals DROP COLUMN project")
	e.exec(t, "ALTER TABLE {db}.critic_eval_diffs DROP COLUMN project")
	e.exec(t, "DROP TABLE {db}.schema_migrations")
	e.exec(t, "CREATE TABLE {db}.schema_migrations (version UInt32, name String, checksum String, applied_at DateTime) "+
		"ENGINE = ReplacingMergeTree(applied_at) ORDER BY version")
	for _, f := range chddl.Files() {
		if f.Version < 7 {
			e.exec(t, fmt.Sprintf("INSERT INTO {db}.schema_migrations (version, name, checksum, applied_at) SELECT toUInt32(%d), '%s', '%s', now()",
				f.Version, f.Name, f.Checksum))
		}
	}
	if full := e.one(t, "SELECT engine_full FROM system.tables WHERE database = "+chddl.QuoteString(e.db)+" AND name = 'rejected_events'"); strings.Contains(full, "project") {
		t.Fatalf("the 0006 schema already keys rejected_events by project: %s", full)
	}
}
