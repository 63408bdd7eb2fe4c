package chddl

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestClusterFormOfEveryStatement: every statement of every migration has a
// cluster form, ON CLUSTER; each table becomes a replicated local table and
// a Distributed one with the contract's name; the views read through GLOBAL
// IN and GLOBAL joins only.
func TestClusterFormOfEveryStatement(t *testing.T) {
	for _, d := range []Dialect{Legacy, Current} {
		tables := map[string]bool{}
		for _, f := range Files() {
			stmts, err := printedStatements(f, "hf db", "hf", d)
			if err != nil {
				t.Fatalf("%s (%s): %v", f.Name, d, err)
			}
			for _, s := range stmts {
				if !strings.Contains(s, " ON CLUSTER hf") {
					t.Errorf("%s: not ON CLUSTER: %.120s", f.Name, s)
				}
				if m := regexp.MustCompile("^CREATE TABLE IF NOT EXISTS `hf db`\\.(\\w+) ").FindStringSubmatch(s); m != nil {
					tables[m[1]] = true
					switch {
					case strings.HasSuffix(m[1], LocalSuffix):
						if !strings.Contains(s, "ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/hf db/"+m[1]+"', '{replica}', ") {
							t.Errorf("%s: local table %s: %.400s", f.Name, m[1], s)
						}
					default:
						want := "ENGINE = Distributed('hf', 'hf db', '" + m[1] + LocalSuffix + "', " + ShardKeys[m[1]] + ")"
						if !strings.HasSuffix(s, want) {
							t.Errorf("%s: Distributed table %s does not end in %s", f.Name, m[1], want)
						}
					}
				}
				if strings.Contains(s, "VIEW") {
					all := len(regexp.MustCompile(`\bIN\s*\(\s*SELECT`).FindAllString(s, -1))
					global := len(regexp.MustCompile(`\bGLOBAL\s+(?:NOT\s+)?IN\s*\(\s*SELECT`).FindAllString(s, -1))
					if all != global {
						t.Errorf("%s: %d of %d IN subqueries without GLOBAL", f.Name, all-global, all)
					}
					for _, m := range regexp.MustCompile(`(\w+)\s+(?:ANY|ALL)\s+(?:INNER|LEFT|RIGHT|FULL)\s+JOIN`).FindAllStringSubmatch(s, -1) {
						if m[1] != "GLOBAL" {
							t.Errorf("%s: a join without GLOBAL: %q", f.Name, m[0])
						}
					}
				}
			}
		}
		for name := range ShardKeys {
			if !tables[name] || !tables[name+LocalSuffix] {
				t.Errorf("%s: table %s or %s%s not created on the cluster", d, name, name, LocalSuffix)
			}
		}
	}
}

// TestShardKeysKeepDuplicatesTogether: a ReplacingMergeTree collapses rows
// with equal sort keys, and on a cluster only within a shard. Every column
// of a table's sharding key is in its sort key, so rows that collapse on
// one server (equal sort keys) go to one shard and collapse there too.
func TestShardKeysKeepDuplicatesTogether(t *testing.T) {
	orderBy := map[string]string{}
	for _, f := range Files() {
		for _, s := range f.Statements("db", Legacy) {
			s = printedStatement(f, s, "db", Legacy)
			if m := tableRE.FindStringSubmatch(s); m != nil {
				orderBy[m[2]] = m[6]
			}
		}
	}
	for table, key := range ShardKeys {
		ob, ok := orderBy[table]
		if !ok {
			t.Errorf("%s: no such table", table)
			continue
		}
		inner := strings.TrimSuffix(strings.TrimPrefix(key, "cityHash64("), ")")
		for _, col := range strings.Split(inner, ",") {
			col = strings.TrimSpace(col)
			if !regexp.MustCompile(`[(, ]` + col + `[,) ]|ORDER BY ` + col + `$`).MatchString(ob) {
				t.Errorf("%s: sharding column %s is not in its sort key (%s)", table, col, ob)
			}
		}
	}
}

// TestPrintClusterMatchesMigrateCluster: --print --cluster writes the
// statements MigrateCluster applies, and a bad cluster name is refused.
func TestPrintClusterMatchesMigrateCluster(t *testing.T) {
	var b bytes.Buffer
	if err := PrintCluster(&b, "harnessflow", "hf", Legacy); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, f := range Files() {
		stmts, err := fileStatements(f, "harnessflow", "hf", Legacy)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range stmts {
			if !strings.Contains(out, s+";\n") {
				t.Errorf("%s: PrintCluster lacks %.100q", f.Name, s)
			}
		}
	}
	if !strings.Contains(out, clusterLedger("harnessflow", "hf")+";\n") {
		t.Error("PrintCluster lacks the replicated ledger")
	}
	for _, bad := range []string{"", "h f", "hf;DROP", "{shard}"} {
		if err := PrintCluster(&b, "harnessflow", bad, Legacy); err == nil {
			t.Errorf("cluster name %q accepted", bad)
		}
	}
}

// TestClusterSQL: IN subqueries and joins become GLOBAL; literal IN lists,
// an existing GLOBAL and words that merely contain IN stay as they are.
func TestClusterSQL(t *testing.T) {
	for in, want := range map[string]string{
		"x IN (SELECT a FROM t)":                    "x GLOBAL IN (SELECT a FROM t)",
		"x NOT IN\n  (\n  SELECT a FROM t)":         "x GLOBAL NOT IN\n  (\n  SELECT a FROM t)",
		"x IN ('a', 'b')":                           "x IN ('a', 'b')",
		"a ALL INNER JOIN b":                        "a GLOBAL ALL INNER JOIN b",
		"x GLOBAL IN (SELECT 1)":                    "x GLOBAL IN (SELECT 1)",
		"a GLOBAL ALL LEFT JOIN b":                  "a GLOBAL ALL LEFT JOIN b",
		"a ANY LEFT\n JOIN b":                       "a GLOBAL ANY LEFT\n JOIN b",
		"SELECT min(x) FROM t WHERE JOINED = 1":     "SELECT min(x) FROM t WHERE JOINED = 1",
		"SELECT argMin(a, b) FROM t WHERE y IN (1)": "SELECT argMin(a, b) FROM t WHERE y IN (1)",
	} {
		if got := ClusterSQL(in); got != want {
			t.Errorf("ClusterSQL(%q) = %q, want %q", in, got, want)
		}
	}
}
