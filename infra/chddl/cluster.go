package chddl

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// On a ClickHouse cluster (MigrateCluster, PrintCluster) the same migrations
// create, for each table T of the contract:
//
//   - T_local (LocalSuffix) on every node, ON CLUSTER: the table as on a
//     single server with its engine made Replicated
//     (ReplacingMergeTree(v) becomes ReplicatedReplacingMergeTree(
//     '/clickhouse/tables/{shard}/<database>/T_local', '{replica}', v)), so
//     the replicas of a shard hold the same rows;
//   - T on every node: a Distributed table over T_local with the contract's
//     name and columns, sharded by ShardKeys[T]. Every writer inserts into T
//     and every reader reads T, from any node.
//
// The sharding keys keep each entity's rows on one shard: every row of a
// cell (project, cell_id) of every event table, and cell_scores' summary of
// it, hash to the same shard, and so does every redelivery of an event
// (its event id belongs to one cell). ReplacingMergeTree and FINAL
// deduplicate within a shard only, which is then all that is needed: the
// row a redelivery collapses into is on the shard it goes to.
//
// The analyst views are created ON CLUSTER on every node, over the
// Distributed tables. Their subqueries that read a table inside IN or JOIN
// become GLOBAL IN / GLOBAL JOIN on a cluster (clusterSQL): the subquery runs
// once, on the node that was asked, and its result is sent to the shards,
// instead of each shard reading the Distributed table again (which
// ClickHouse refuses by default, distributed_product_mode = deny, and which
// would be wrong across shards with 'local'). The result is the same rows as
// on one server (chcluster tests compare every view).
//
// The migration ledger, schema_migrations, is one ReplicatedReplacingMergeTree
// replicated to every node of every shard (ZooKeeper path
// /clickhouse/tables/all/<database>/schema_migrations, replica
// '{shard}-{replica}'): every node reads the whole ledger, and migrate run
// again from any node finds nothing to do.
//
// The rebuilds of old tables before migrations 0004 and 0007 (rekey.go) do
// not run on a cluster: a cluster schema is created with the final keys. A
// cluster migrated before 0007 keeps rejected_events_local keyed by
// event_id and checkpoints_local by (model_version, event_id) (rebuilding
// replicated tables is left to the operator); the columns 0007 and 0008
// add to the critic tables are added there too, ON CLUSTER, to each local
// table, and the Distributed one over it is dropped and created again with
// them (addColumns: 18.16 takes no ALTER ON CLUSTER of a Distributed table
// on a cluster whose shards replicate).

// LocalSuffix names the local, replicated table under each Distributed one.
const LocalSuffix = "_local"

// ShardKeys are the sharding expressions of the Distributed tables: one
// entity's rows on one shard.
var ShardKeys = map[string]string{
	"campaigns":           "cityHash64(project, campaign_id)",
	"cells":               "cityHash64(project, cell_id)",
	"task_attempts":       "cityHash64(project, cell_id)",
	"skill_events":        "cityHash64(project, cell_id)",
	"harness_updates":     "cityHash64(project, cell_id)",
	"adherence_judgments": "cityHash64(project, cell_id)",
	"labeled_samples":     "cityHash64(project, cell_id)",
	"round_metrics":       "cityHash64(project, cell_id)",
	"cell_scores":         "cityHash64(project, cell_id)",
	"rejected_events":     "cityHash64(event_id)",
	"checkpoints":         "cityHash64(model_version)",
	"trainer_steps":       "cityHash64(trainer)",
	"critic_evals":        "cityHash64(trainer)",
	"critic_eval_diffs":   "cityHash64(trainer)",
}

// ErrBadCluster says a cluster name is unusable.
var ErrBadCluster = errors.New("chddl: the cluster name must be letters, digits and _ (as in the servers' remote_servers)")

var clusterNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func checkCluster(cluster string) error {
	if !clusterNameRE.MatchString(cluster) {
		return fmt.Errorf("%w: %q", ErrBadCluster, cluster)
	}
	return nil
}

const clusterLedgerDDL = `CREATE TABLE IF NOT EXISTS %s.schema_migrations ON CLUSTER %s (
    version UInt32,
    name String,
    checksum String,
    applied_at DateTime
) ENGINE = ReplicatedReplacingMergeTree(%s, '{shard}-{replica}', applied_at) ORDER BY version`

func clusterLedger(database, cluster string) string {
	return fmt.Sprintf(clusterLedgerDDL, QuoteIdent(database), cluster,
		QuoteString("/clickhouse/tables/all/"+database+"/schema_migrations"))
}

// quotedName matches a name as QuoteIdent writes it.
const quotedName = "`(?:[^`\\\\]|\\\\.)*`"

var (
	tableRE  = regexp.MustCompile("(?s)^CREATE TABLE IF NOT EXISTS (" + quotedName + `)\.(\w+) (\(.*\)) ENGINE = (\w*MergeTree)\(([^)]*)\) (ORDER BY .*)$`)
	inSubRE  = regexp.MustCompile(`\b(GLOBAL\s+)?(NOT\s+)?IN(\s*)\((\s*)SELECT\b`)
	joinRE   = regexp.MustCompile(`\b(GLOBAL\s+)?(ANY|ALL)(\s+)(INNER|LEFT|RIGHT|FULL)(\s+)JOIN\b`)
	viewsRE  = regexp.MustCompile("^(CREATE OR REPLACE VIEW|CREATE VIEW IF NOT EXISTS|DROP TABLE IF EXISTS) (" + quotedName + `\.\w+)`)
	dbStmtRE = regexp.MustCompile("^CREATE DATABASE IF NOT EXISTS (" + quotedName + ")$")
)

// clusterStatements turns one statement of a single server's schema into
// its cluster form (see the comment at the top of this file).
func clusterStatements(stmt, database, cluster string) ([]string, error) {
	if m := dbStmtRE.FindStringSubmatch(stmt); m != nil {
		return []string{stmt + " ON CLUSTER " + cluster}, nil
	}
	if m := tableRE.FindStringSubmatch(stmt); m != nil {
		q, name, cols, engine, args, order := m[1], m[2], m[3], m[4], m[5], m[6]
		key, ok := ShardKeys[name]
		if !ok {
			return nil, fmt.Errorf("chddl: table %s has no sharding key for a cluster (ShardKeys)", name)
		}
		local := name + LocalSuffix
		zkPath := QuoteString("/clickhouse/tables/{shard}/" + database + "/" + local)
		repArgs := zkPath + ", '{replica}'"
		if strings.TrimSpace(args) != "" {
			repArgs += ", " + args
		}
		return []string{
			fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.%s ON CLUSTER %s %s ENGINE = Replicated%s(%s) %s", q, local, cluster, cols, engine, repArgs, order),
			fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.%s ON CLUSTER %s %s ENGINE = Distributed(%s, %s, %s, %s)",
				q, name, cluster, cols, QuoteString(cluster), QuoteString(database), QuoteString(local), key),
		}, nil
	}
	if m := viewsRE.FindStringSubmatchIndex(stmt); m != nil {
		head, rest := stmt[:m[5]], stmt[m[5]:]
		return []string{head + " ON CLUSTER " + cluster + clusterSQL(rest)}, nil
	}
	return nil, fmt.Errorf("chddl: no cluster form for the statement %.80q", stmt)
}

// clusterSQL makes a query's IN subqueries and joins GLOBAL (those that
// already are stay as they are).
func clusterSQL(sql string) string {
	global := func(re *regexp.Regexp) func(string) string {
		return func(m string) string {
			if re.FindStringSubmatch(m)[1] != "" {
				return m
			}
			return "GLOBAL " + m
		}
	}
	sql = inSubRE.ReplaceAllStringFunc(sql, global(inSubRE))
	return joinRE.ReplaceAllStringFunc(sql, global(joinRE))
}

// ClusterSQL is a query over the contract's tables in the form a cluster
// needs (GLOBAL IN and GLOBAL JOIN): for code that builds queries with IN
// subqueries or joins and runs them on a cluster.
func ClusterSQL(sql string) string { return clusterSQL(sql) }
