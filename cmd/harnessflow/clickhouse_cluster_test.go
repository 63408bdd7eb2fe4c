package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestClickHouseClusterCommand: `harnessflow clickhouse-cluster` prints a
// line per node of a 1-shard × 2-replica cluster whose nodes answer
// ON CLUSTER DDL, and starts a node killed with SIGKILL again on its port.
func TestClickHouseClusterCommand(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	root := newRoot()
	root.SetArgs([]string{"clickhouse-cluster", "--dir", t.TempDir(), "--shards", "1", "--replicas", "2", "--restart-after", "500ms"})
	root.SetOut(pw)
	root.SetErr(io.Discard)
	go func() { done <- root.ExecuteContext(ctx); pw.Close() }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("clickhouse-cluster: %v", err)
		}
	})
	type node struct {
		Shard, Replica int
		ClickHouse     string
		HTTP           string
		Pid            int
	}
	var nodes []node
	sc := bufio.NewScanner(pr)
	for len(nodes) < 2 && sc.Scan() {
		var n node
		if err := json.Unmarshal(sc.Bytes(), &n); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		nodes = append(nodes, n)
	}
	if len(nodes) != 2 {
		t.Fatalf("printed %d nodes (%v)", len(nodes), sc.Err())
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	query := func(n node, q string) (string, error) {
		resp, err := http.Post("http://"+n.HTTP+"/?query="+url.QueryEscape(q), "text/plain", nil)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return "", &httpError{resp.StatusCode, string(b)}
		}
		return strings.TrimSpace(string(b)), err
	}
	// On a loaded machine the first ON CLUSTER statement can lose its
	// connection while ZooKeeper (a JVM just started) is slow to answer:
	// the statement is idempotent, so it is repeated until it succeeds.
	create := "CREATE TABLE IF NOT EXISTS default.t ON CLUSTER hf (x UInt8) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/t', '{replica}') ORDER BY x"
	for until := time.Now().Add(90 * time.Second); ; {
		_, err := query(nodes[0], create)
		if err == nil {
			break
		}
		if time.Now().After(until) {
			t.Fatalf("create the replicated table: %v", err)
		}
		t.Logf("create the replicated table: %v; again", err)
		<-time.After(time.Second)
	}
	if _, err := query(nodes[0], "INSERT INTO default.t VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	// The second replica dies, is started again, and holds the row.
	if err := syscall.Kill(nodes[1].Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		got, err := query(nodes[1], "SELECT sum(x) FROM default.t")
		if err == nil && got == "7" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed replica was not back with the row: %q, %v", got, err)
		}
		time.Sleep(200 * time.Millisecond) // polling interval
	}
}

type httpError struct {
	code int
	body string
}

func (e *httpError) Error() string { return "HTTP " + http.StatusText(e.code) + ": " + e.body }
