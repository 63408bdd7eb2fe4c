package chddl_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/testenv"
)

// dropEvalSetColumns leaves e's critic tables as before 0008: without
// eval_set_sha256 and eval_epoch.
func dropEvalSetColumns(t *testing.T, e engine) {
	t.Helper()
	for _, tb := range []string{"critic_evals", "critic_eval_diffs"} {
		e.exec(t, "ALTER TABLE {db}."+tb+" DROP COLUMN eval_epoch")
		e.exec(t, "ALTER TABLE {db}."+tb+" DROP COLUMN eval_set_sha256")
	}
}

// evalSetColumns lists the columns of table tb of database db from
// checkpoint_sha256 to step, as "name type" in table order.
func evalSetColumns(t *testing.T, e engine, db, tb string) string {
	t.Helper()
	cols := e.rows(t, "SELECT name, type FROM system.columns WHERE database = "+chddl.QuoteString(db)+" AND table = "+chddl.QuoteString(tb))
	var out []string
	in := false
	for _, c := range cols {
		name, _, _ := strings.Cut(c, "\t")
		in = in || name == "checkpoint_sha256"
		if in {
			out = append(out, strings.ReplaceAll(c, "\t", " "))
		}
		if name == "step" {
			break
		}
	}
	return strings.Join(out, ", ")
}

const wantEvalSetColumns = "checkpoint_sha256 String, eval_set_sha256 String, eval_epoch UInt64, step UInt64"

// TestMigrate0008AddsEvalSetColumns: a database migrated through 0007
// whose critic tables hold rows is upgraded by Migrate, on both engines:
// only 0008 is applied, both tables get eval_set_sha256 and eval_epoch
// after checkpoint_sha256, the old rows survive with an empty set and epoch 0, the
// trainer's columns can be written, and a second Migrate finds nothing to
// do. A fresh database has them from the start.
func TestMigrate0008AddsEvalSetColumns(t *testing.T) {
	for _, e := range bothEngines(t) {
		t.Run(e.name, func(t *testing.T) {
			ctx, cancel := testenv.Context(t)
			defer cancel()
			if _, err := chddl.Migrate(ctx, e.s, e.db); err != nil {
				t.Fatal(err)
			}
			for _, tb := range []string{"critic_evals", "critic_eval_diffs"} {
				if got := evalSetColumns(t, e, e.db, tb); got != wantEvalSetColumns {
					t.Fatalf("fresh %s: %s, want %s", tb, got, wantEvalSetColumns)
				}
			}
			// As of 0007: the columns gone, the ledger without 0008.
			dropEvalSetColumns(t, e)
			e.exec(t, "DROP TABLE {db}.schema_migrations")
			e.exec(t, "CREATE TABLE {db}.schema_migrations (version UInt32, name String, checksum String, applied_at DateTime) "+
				"ENGINE = ReplacingMergeTree(applied_at) ORDER BY version")
			for _, f := range chddl.Files() {
				if f.Version < 8 {
					e.exec(t, fmt.Sprintf("INSERT INTO {db}.schema_migrations (version, name, checksum, applied_at) SELECT toUInt32(%d), '%s', '%s', now()",
						f.Version, f.Name, f.Checksum))
				}
			}
			for _, tb := range []string{"critic_evals", "critic_eval_diffs"} {
				e.exec(t, "INSERT INTO {db}."+tb+" (trainer, project, model_version, checkpoint_sha256, metric, evaluated_at) "+
					"SELECT 't', '', 't-v1', 'ck1', 'rmse', toDateTime(1700000000)")
			}

			res, err := chddl.Migrate(ctx, e.s, e.db)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(res.Applied, ",") != filesFrom(8) {
				t.Errorf("applied %v, want 0008 and the files after it (%s)", res.Applied, filesFrom(8))
			}
			for _, tb := range []string{"critic_evals", "critic_eval_diffs"} {
				if got := evalSetColumns(t, e, e.db, tb); got != wantEvalSetColumns {
					t.Errorf("upgraded %s: %s, want %s", tb, got, wantEvalSetColumns)
				}
				if got := e.one(t, "SELECT concat(model_version, ' [', eval_set_sha256, '] ', toString(eval_epoch)) FROM {db}."+tb); got != "t-v1 [] 0" {
					t.Errorf("%s: the old row reads %q, want t-v1 [] 0", tb, got)
				}
				e.exec(t, "INSERT INTO {db}."+tb+" (trainer, project, model_version, checkpoint_sha256, eval_set_sha256, eval_epoch, metric, evaluated_at) "+
					"SELECT 't', '', 't-v2', 'ck2', 'set2', toUInt64(3), 'rmse', toDateTime(1700000001)")
				if got := e.one(t, "SELECT concat(eval_set_sha256, ' ', toString(eval_epoch)) FROM {db}."+tb+" WHERE model_version = 't-v2'"); got != "set2 3" {
					t.Errorf("%s: the new row reads %q", tb, got)
				}
			}
			again, err := chddl.Migrate(ctx, e.s, e.db)
			if err != nil || len(again.Applied) != 0 {
				t.Fatalf("second migrate: %+v %v", again, err)
			}
		})
	}
}

// TestMigrateCluster0008AddsEvalSetColumns: on a live 2 × 2 cluster
// migrated before 0008 (its critic tables, local and Distributed, without
// the evaluation set's columns; the ledger's 0008 record another file's),
// MigrateCluster applies 0008 alone and gives both columns, ON CLUSTER, to
// the replicated local tables (ALTER) and the Distributed ones (created
// again) on every node; a row written through one node's Distributed table
// reads back with them through another's.
func TestMigrateCluster0008AddsEvalSetColumns(t *testing.T) {
	cl := testenv.ClickHouseCluster(t)
	ctx, cancel := testenv.Context(t)
	defer cancel()
	const db = "evalsets"
	open := func(n int) chddl.Session {
		nd := cl.Nodes()[n]
		conn, err := chx.Open(ctx, nd.Addr(), "", chx.Cluster())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return chx.Session(conn)
	}
	first, other := open(0), open(len(cl.Nodes())-1)
	e := engine{name: "cluster", s: first, db: db, d: chddl.Legacy}
	if _, err := chddl.MigrateCluster(ctx, first, db, "hf"); err != nil {
		t.Fatal(err)
	}
	// 18.16 takes no ALTER ON CLUSTER of the Distributed tables here (see
	// addColumns): they are created again over the narrower local tables.
	for _, tb := range []string{"critic_evals", "critic_eval_diffs"} {
		for _, col := range []string{"eval_epoch", "eval_set_sha256"} {
			e.exec(t, "ALTER TABLE {db}."+tb+chddl.LocalSuffix+" ON CLUSTER hf DROP COLUMN "+col)
		}
		e.exec(t, "DROP TABLE {db}."+tb+" ON CLUSTER hf")
		e.exec(t, "CREATE TABLE {db}."+tb+" ON CLUSTER hf AS {db}."+tb+chddl.LocalSuffix+
			" ENGINE = Distributed('hf', '"+db+"', '"+tb+chddl.LocalSuffix+"', "+chddl.ShardKeys[tb]+")")
	}
	files := chddl.Files()
	last := files[7]
	if last.Version != 8 {
		t.Fatalf("the eighth migration is %s: this test replays 0008", last.Name)
	}
	e.exec(t, fmt.Sprintf("INSERT INTO {db}.schema_migrations (version, name, checksum, applied_at) SELECT toUInt32(8), '%s', 'older', now() + 60", last.Name))
	res, err := chddl.MigrateCluster(ctx, first, db, "hf")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(res.Applied, ",") != filesFrom(8) {
		t.Errorf("applied %v, want %s (0008 and the files after it)", res.Applied, filesFrom(8))
	}
	for i := range cl.Nodes() {
		en := engine{name: cl.Nodes()[i].Name(), s: open(i), db: db, d: chddl.Legacy}
		for _, tb := range []string{"critic_evals", "critic_eval_diffs"} {
			for _, x := range []string{tb + chddl.LocalSuffix, tb} {
				testenv.WaitFor(t, 30*time.Second, en.name+" "+x+"'s columns", func() (bool, string) {
					got := evalSetColumns(t, en, db, x)
					return got == wantEvalSetColumns, got
				})
			}
		}
	}
	e.exec(t, "INSERT INTO {db}.critic_evals (trainer, project, model_version, checkpoint_sha256, eval_set_sha256, eval_epoch, metric, evaluated_at) "+
		"SELECT 't', '', 't-v2', 'ck2', 'set2', toUInt64(3), 'rmse', toDateTime(1700000001)")
	eo := engine{name: "other node", s: other, db: db, d: chddl.Legacy}
	testenv.WaitFor(t, 30*time.Second, "the row through another node", func() (bool, string) {
		got := eo.rows(t, "SELECT concat(eval_set_sha256, ' ', toString(eval_epoch)) FROM {db}.critic_evals")
		return len(got) == 1 && got[0] == "set2 3", fmt.Sprint(got)
	})
	again, err := chddl.MigrateCluster(ctx, other, db, "hf")
	if err != nil || len(again.Applied) != 0 {
		t.Fatalf("second migrate, through another node: %+v %v", again, err)
	}
}

// filesFrom names the migrations from version v on, comma-separated: what
// Migrate re-applies after v changed (every file after a re-applied one).
func filesFrom(v uint32) string {
	var out []string
	for _, f := range chddl.Files() {
		if f.Version >= v {
			out = append(out, f.Name)
		}
	}
	return strings.Join(out, ",")
}
