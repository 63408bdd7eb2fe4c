package main

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/testenv"
)

// TestMigratePrintCluster: the statements of `migrate --print --cluster hf`,
// applied by hand through one node of a live 2 × 2 cluster, leave the
// database as `migrate --cluster hf` would: run through another node,
// migrate then finds nothing to do, and every node has every table and view.
func TestMigratePrintCluster(t *testing.T) {
	t.Parallel()
	cl := testenv.ClickHouseCluster(t)
	var out bytes.Buffer
	root := newRoot()
	root.SetArgs([]string{"migrate", "--print", "--cluster", "hf", "--database", "printed db", "--server-version", "18.16"})
	root.SetOut(&out)
	root.SetErr(io.Discard)
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	exec := func(addr, q string) string {
		resp, err := http.Post("http://"+addr+"/", "text/plain", strings.NewReader(q))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%.200s: HTTP %d %s", q, resp.StatusCode, b)
		}
		return strings.TrimSpace(string(b))
	}
	n := 0
	for _, stmt := range strings.Split(out.String(), ";\n") {
		var lines []string
		for _, l := range strings.Split(stmt, "\n") {
			if !strings.HasPrefix(strings.TrimSpace(l), "--") {
				lines = append(lines, l)
			}
		}
		if q := strings.TrimSpace(strings.Join(lines, "\n")); q != "" {
			exec(cl.Node(1, 2).HTTPAddr(), q)
			n++
		}
	}
	ctx, cancel := testenv.Context(t)
	defer cancel()
	conn, err := chx.Open(ctx, cl.Node(2, 1).Addr(), "", chx.Cluster())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The ledger is replicated: the node asked may still be fetching it.
	files := strconv.Itoa(len(chddl.Files()))
	testenv.WaitFor(t, 30*time.Second, "the printed ledger's "+files+" rows on another node", func() (bool, string) {
		n := exec(cl.Node(2, 1).HTTPAddr(), "SELECT count() FROM `printed db`.schema_migrations")
		return n == files, n + " rows"
	})
	res, err := chddl.MigrateCluster(ctx, chx.Session(conn), "printed db", "hf")
	if err != nil || len(res.Applied) != 0 {
		t.Fatalf("migrate --cluster after the printed statements (%d applied): %+v, %v", n, res, err)
	}
	want := exec(cl.Node(1, 2).HTTPAddr(), "SELECT count() FROM system.tables WHERE database = 'printed db'")
	// Each table twice (local and Distributed), 8 views, the ledger.
	if n := strconv.Itoa(2*len(chddl.ShardKeys) + 8 + 1); want != n {
		t.Errorf("the printed statements created %s tables and views, want %s", want, n)
	}
	for _, nd := range cl.Nodes() {
		if got := exec(nd.HTTPAddr(), "SELECT count() FROM system.tables WHERE database = 'printed db'"); got != want {
			t.Errorf("node %s has %s tables and views, node s1r2 %s", nd.Name(), got, want)
		}
	}
}
