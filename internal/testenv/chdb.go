package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/infra/chddl"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/harnessflow/harnessflow/internal/chdb"
)

// CHDB is a fresh database on the test binary's shared chDB session, a
// current ClickHouse engine (26.7) running in-process.
//
// Its methods run statements with Database as the default database; they are
// safe for concurrent use (they run one at a time, for every CHDB of the test
// binary). Statements run straight on Session get whatever default database
// the last statement of any test left (a USE persists on the connection):
// name the database in them, or use the methods.
type CHDB struct {
	// Session is the test binary's one chDB session, shared by every test in
	// it; do not Close it.
	Session *chdb.Session
	// Database is a new, empty database made for this call (t_<random>).
	Database string
	// Version is the engine's version (SELECT version()), e.g. "26.7.2.1".
	Version string
}

var sharedCHDB struct {
	once    sync.Once
	s       *chdb.Session
	dir     string
	version string
	err     error
	// mu makes `USE db` and the statement after it one step.
	mu sync.Mutex
}

// sharedChdb opens the test binary's one chDB session on first use. Main
// closes it and removes its data dir.
func sharedChdb() (*chdb.Session, string, error) {
	sharedCHDB.once.Do(func() {
		if _, err := chdb.LibraryPath(); err != nil {
			sharedCHDB.err = err
			return
		}
		dir, err := os.MkdirTemp("", "hf-chdb-")
		if err != nil {
			sharedCHDB.err = err
			return
		}
		sharedCHDB.dir = dir
		s, err := chdb.Open(dir)
		if err != nil {
			sharedCHDB.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, err := s.Run(ctx, "SELECT version()", "TabSeparated")
		if err != nil {
			sharedCHDB.err = err
			return
		}
		sharedCHDB.s, sharedCHDB.version = s, strings.TrimSpace(string(out))
	})
	return sharedCHDB.s, sharedCHDB.version, sharedCHDB.err
}

// closeSharedChdb closes the shared chDB session, if one was opened, and
// removes its data dir (for Main).
func closeSharedChdb() {
	if sharedCHDB.s != nil {
		if err := sharedCHDB.s.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "testenv: close chDB:", err)
		}
	}
	if sharedCHDB.dir != "" {
		_ = os.RemoveAll(sharedCHDB.dir)
	}
}

// CurrentClickHouse returns a fresh database on chDB (ClickHouse 26.7 as an
// in-process library), for tests that need a current ClickHouse engine. The
// session is opened once per test binary, on a temporary data dir, and shared
// by every test in it. The database is dropped when the test ends, unless the
// test failed (it is kept, and its data dir named, for a look). If
// libchdb.so is not installed, the test fails with the install instructions;
// it never skips.
func CurrentClickHouse(t testing.TB) *CHDB {
	t.Helper()
	s, version, err := sharedChdb()
	if err != nil {
		t.Fatalf("testenv: chDB: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := "t_" + randomHex(6)
	if err := s.Exec(ctx, "CREATE DATABASE "+chddl.QuoteIdent(db)); err != nil {
		t.Fatalf("testenv: chDB: create database %s: %v", db, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: kept chDB database %s (data dir %s)", db, s.DataDir())
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		sharedCHDB.mu.Lock()
		defer sharedCHDB.mu.Unlock()
		if err := s.Exec(ctx, "DROP DATABASE IF EXISTS "+chddl.QuoteIdent(db)); err != nil {
			t.Logf("testenv: chDB: drop database %s: %v", db, err)
		}
		// Leave no later statement on Session a dropped default database.
		_ = s.Exec(ctx, "USE default")
	})
	return &CHDB{Session: s, Database: db, Version: version}
}

// Run runs one statement with c.Database as the default database and returns
// its raw output in the ClickHouse format named by format ("" means
// TabSeparated); see chdb.Session.Run. Safe for concurrent use.
func (c *CHDB) Run(ctx context.Context, query, format string) ([]byte, error) {
	var out []byte
	err := c.inDatabase(ctx, func() error {
		var err error
		out, err = c.Session.Run(ctx, query, format)
		return err
	})
	return out, err
}

// Exec runs one statement with c.Database as the default database and
// discards its output. Safe for concurrent use.
func (c *CHDB) Exec(ctx context.Context, query string) error {
	return c.inDatabase(ctx, func() error { return c.Session.Exec(ctx, query) })
}

// QueryStrings runs query with c.Database as the default database and
// returns its column names and rows as text (chdb.Null for NULL); see
// chdb.Session.QueryStrings. Safe for concurrent use.
func (c *CHDB) QueryStrings(ctx context.Context, query string) ([]string, [][]string, error) {
	var cols []string
	var rows [][]string
	err := c.inDatabase(ctx, func() error {
		var err error
		cols, rows, err = c.Session.QueryStrings(ctx, query)
		return err
	})
	return cols, rows, err
}

// Query binds args to query's ? placeholders, runs it with c.Database as the
// default database and returns its result as driver.Rows (so a CHDB serves as
// a report.Querier); see chdb.Session.Query. Safe for concurrent use.
func (c *CHDB) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	var rows driver.Rows
	err := c.inDatabase(ctx, func() error {
		var err error
		rows, err = c.Session.Query(ctx, query, args...)
		return err
	})
	return rows, err
}

// inDatabase runs f after `USE c.Database`, both under the lock every CHDB
// shares, so no other CHDB's USE comes between them.
func (c *CHDB) inDatabase(ctx context.Context, f func() error) error {
	sharedCHDB.mu.Lock()
	defer sharedCHDB.mu.Unlock()
	if err := c.Session.Exec(ctx, "USE "+chddl.QuoteIdent(c.Database)); err != nil {
		return err
	}
	return f()
}
