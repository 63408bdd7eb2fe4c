package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/infra/chddl"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/harnessflow/harnessflow/internal/chserver"
	"github.com/harnessflow/harnessflow/internal/chx"
)

// CH is a fresh database on the test binary's shared clickhouse-server.
type CH struct {
	// Addr is the server's native-protocol address (127.0.0.1:port).
	Addr string
	// Database is a new, empty database made for this call (t_<random>).
	Database string
	// Conn is a connection whose default database is Database.
	Conn driver.Conn
	// Server is the shared server process; do not Stop or Kill it (use
	// StartClickHouse for a server of your own).
	Server *chserver.Server
}

var shared struct {
	once sync.Once
	srv  *chserver.Server
	dir  string
	err  error
}

// sharedServer starts the test binary's one clickhouse-server on first use.
// It lives until Main stops it, or dies with the test process (Pdeathsig).
func sharedServer() (*chserver.Server, error) {
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "hf-clickhouse-")
		if err != nil {
			shared.err = err
			return
		}
		shared.dir = dir
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		shared.srv, shared.err = chserver.Start(ctx, chserver.Config{DataDir: dir, StopTimeout: 15 * time.Second})
	})
	return shared.srv, shared.err
}

// ClickHouse returns a fresh database on a real clickhouse-server that is
// started once per test binary and shared by every test in it. The database is
// dropped when the test ends, unless the test failed (it is kept for a look;
// the server's data dir is a temporary directory). If no server binary is
// installed, the test fails with the install instructions; it never skips.
func ClickHouse(t testing.TB) *CH {
	t.Helper()
	srv, err := sharedServer()
	if err != nil {
		t.Fatalf("testenv: clickhouse-server: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin, err := chx.Open(ctx, srv.Addr(), "")
	if err != nil {
		t.Fatalf("testenv: connect to clickhouse %s: %v", srv.Addr(), err)
	}
	defer admin.Close()
	db := "t_" + randomHex(6)
	if err := admin.Exec(ctx, "CREATE DATABASE "+chddl.QuoteIdent(db)); err != nil {
		t.Fatalf("testenv: create database %s: %v", db, err)
	}
	conn, err := chx.Open(ctx, srv.Addr(), db)
	if err != nil {
		t.Fatalf("testenv: connect to clickhouse %s/%s: %v", srv.Addr(), db, err)
	}
	t.Cleanup(func() {
		conn.Close()
		if t.Failed() {
			t.Logf("testenv: kept clickhouse database %s on %s (data dir %s)", db, srv.Addr(), srv.DataDir())
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := chx.Open(ctx, srv.Addr(), ""); err == nil {
			_ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+chddl.QuoteIdent(db))
			c.Close()
		}
	})
	return &CH{Addr: srv.Addr(), Database: db, Conn: conn, Server: srv}
}

// StartClickHouse starts a clickhouse-server of the test's own on dataDir
// (t.TempDir() when empty), for tests that stop, kill or restart it. It is
// stopped when the test ends. Restart it with
// chserver.Start(ctx, srv.Config()): same data dir, same ports.
func StartClickHouse(t testing.TB, dataDir string) *chserver.Server {
	t.Helper()
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv, err := chserver.Start(ctx, chserver.Config{DataDir: dataDir, StopTimeout: 15 * time.Second})
	if err != nil {
		t.Fatalf("testenv: clickhouse-server: %v", err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	return srv
}

// Main runs the package's tests and then stops the shared clickhouse-server
// and removes its data dir, and closes the shared chDB session
// (CurrentClickHouse) and removes its. Use it from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// Without it the server still dies with the test process (Linux Pdeathsig),
// but its temporary data dir is left behind.
func Main(m *testing.M) {
	code := m.Run()
	if shared.srv != nil {
		if err := shared.srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "testenv: stop clickhouse-server:", err)
		}
	}
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
	closeSharedChdb()
	os.Exit(code)
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
