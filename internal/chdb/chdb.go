// Package chdb runs SQL on chDB, ClickHouse as an in-process library, for
// tests that need a current ClickHouse engine.
//
// The library (libchdb.so, ClickHouse 26.7) is loaded with purego, so no cgo
// toolchain is needed; it is installed by `bash infra/scripts/ensure-deps.sh
// --test`. chDB allows one connection per process: Open returns the process's
// only Session, and a second Open fails with ErrInUse until Close.
//
// Loading and connecting reset some of the process's signal handlers
// (SIGSEGV, SIGBUS, ...), which Go needs for its nil-pointer panics; Open
// saves them first and puts them back, so a Go program keeps its signal
// handling. The one window is the connect itself (about 0.1 s): a fault in
// another goroutine during it may kill the process instead of panicking.
//
// Known chDB behaviour that Session hides: when a query fails after it has
// written some output (a header, some rows), chDB hands that partial output to
// the next query on the connection; Run discards it.
package chdb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"unsafe"
)

// LibraryVersion is the version of the npm package @chdb/lib-linux-x64-gnu
// that the project pins (infra/scripts/ensure-deps.sh installs it); its
// engine reports version 26.7.2.1. A constant: safe for concurrent use.
const LibraryVersion = "26.7.3-stable.1"

// LibraryEnv names the environment variable that, when set, gives the path of
// libchdb.so to load instead of the default one (see LibraryPath). A
// constant: safe for concurrent use.
const LibraryEnv = "HF_CHDB_LIBRARY"

// ErrNoLibrary is wrapped by the error LibraryPath and Open return when
// libchdb.so is not installed. Test with errors.Is. Read-only: safe for
// concurrent use.
var ErrNoLibrary = errors.New("chdb: libchdb.so not found")

// ErrInUse is wrapped by the error Open returns while the process's one chDB
// connection is open. Test with errors.Is. Read-only: safe for concurrent
// use.
var ErrInUse = errors.New("chdb: the process's chDB connection is already open")

// ErrClosed is returned by a Session's methods after Close. Read-only: safe
// for concurrent use.
var ErrClosed = errors.New("chdb: session closed")

// LibraryPath returns the path of libchdb.so: $HF_CHDB_LIBRARY when that is
// set (the file must exist), else
// ${XDG_CACHE_HOME:-$HOME/.cache}/harnessflow/chdb/node_modules/@chdb/lib-linux-x64-gnu/libchdb.so,
// where ensure-deps.sh installs it. When the file is missing the error wraps
// ErrNoLibrary and says how to install it. It reads the environment and the
// file system only: safe for concurrent use.
func LibraryPath() (string, error) {
	if p := os.Getenv(LibraryEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%w: %s=%s: %w; set it to an installed libchdb.so, or unset it and run `bash infra/scripts/ensure-deps.sh --test`",
				ErrNoLibrary, LibraryEnv, p, err)
		}
		return p, nil
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("%w: no cache directory (%w); set %s to libchdb.so's path", ErrNoLibrary, err, LibraryEnv)
		}
		cache = filepath.Join(home, ".cache")
	}
	p := filepath.Join(cache, "harnessflow", "chdb", "node_modules", "@chdb", "lib-linux-x64-gnu", "libchdb.so")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w at %s: install chDB %s with `bash infra/scripts/ensure-deps.sh --test` (or set %s to an installed libchdb.so)",
			ErrNoLibrary, p, LibraryVersion, LibraryEnv)
	}
	return p, nil
}

// Session is the process's connection to chDB, made by Open. Its methods are
// safe for concurrent use: calls are serialized, one query at a time.
//
// The connection keeps state between calls like a clickhouse-client session
// does: a USE statement changes the default database of every later query,
// whoever runs it.
type Session struct {
	mu      sync.Mutex
	conn    unsafe.Pointer // chdb_connection *, from chdb_connect; nil once closed
	dataDir string
}

// open is the process's open Session, if any.
var open struct {
	mu sync.Mutex
	s  *Session
}

// Open loads libchdb.so (LibraryPath; once per process) and opens the
// process's one chDB connection on dataDir (made if missing; databases and
// tables live there). While a Session is open, Open returns an error wrapping
// ErrInUse; after its Close, Open may be called again. If the library is not
// installed the error wraps ErrNoLibrary. Safe for concurrent use.
func Open(dataDir string) (*Session, error) {
	if dataDir == "" {
		return nil, errors.New("chdb: Open needs a data directory")
	}
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, fmt.Errorf("chdb: data directory %s: %w", dataDir, err)
	}
	open.mu.Lock()
	defer open.mu.Unlock()
	if open.s != nil {
		return nil, fmt.Errorf("%w (on %s)", ErrInUse, open.s.dataDir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("chdb: data directory: %w", err)
	}
	l, err := loadLibrary()
	if err != nil {
		return nil, err
	}
	conn, err := l.connect([]string{"clickhouse", "--path=" + dir})
	if err != nil {
		return nil, err
	}
	s := &Session{conn: conn, dataDir: dir}
	open.s = s
	return s, nil
}

// DataDir returns the absolute data directory the Session was opened on.
// Safe for concurrent use.
func (s *Session) DataDir() string { return s.dataDir }

// Close closes the connection; later calls on s return ErrClosed, and Open
// may be called again. Closing a closed Session does nothing. Safe for
// concurrent use (it waits for a running query).
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return nil
	}
	lib.closeConn(s.conn)
	s.conn = nil
	open.mu.Lock()
	if open.s == s {
		open.s = nil
	}
	open.mu.Unlock()
	return nil
}

// Run runs one SQL statement and returns its raw output in the ClickHouse
// output format named by format ("" means "TabSeparated"); statements without
// output (DDL, INSERT) return an empty slice. A failed query returns a
// *QueryError.
//
// ctx is checked before the query starts (also after waiting for another
// caller's query); a query that has started runs to its end, as chDB cannot
// cancel it. Safe for concurrent use: calls run one at a time.
func (s *Session) Run(ctx context.Context, query, format string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if format == "" {
		format = "TabSeparated"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out, msg := lib.query(s.conn, query, format)
	if msg == "" {
		return out, nil
	}
	// chDB keeps the output a failed query had written so far and prepends
	// it to the next query's; run a query whose output is thrown away so that
	// the caller's next query starts clean.
	_, _ = lib.query(s.conn, "SELECT 1", "TabSeparated")
	return nil, newQueryError(query, msg)
}

// Exec runs one SQL statement and discards its output; see Run. Safe for
// concurrent use.
func (s *Session) Exec(ctx context.Context, query string) error {
	_, err := s.Run(ctx, query, "")
	return err
}

// QueryStrings runs query in the TabSeparatedWithNames format and returns its
// column names and rows, every cell as text (Null for NULL); see Run and
// ParseTSVWithNames. Safe for concurrent use.
func (s *Session) QueryStrings(ctx context.Context, query string) ([]string, [][]string, error) {
	out, err := s.Run(ctx, query, "TabSeparatedWithNames")
	if err != nil {
		return nil, nil, err
	}
	cols, rows, err := ParseTSVWithNames(out)
	if err != nil {
		return nil, nil, fmt.Errorf("chdb: query %s: %w", queryHead(query), err)
	}
	return cols, rows, nil
}

// QueryError is a query that chDB failed.
type QueryError struct {
	// Query is the statement as run.
	Query string
	// Code is the ClickHouse error code (60 UNKNOWN_TABLE, 62 SYNTAX_ERROR,
	// ...) read from the message's "Code: NNN." prefix; 0 when it has none.
	Code int
	// Message is chDB's error text less that prefix, e.g.
	// "DB::Exception: Unknown table ... (UNKNOWN_TABLE)".
	Message string
}

// Error returns the code, the message and the start of the query. Safe for
// concurrent use.
func (e *QueryError) Error() string {
	if e.Code != 0 {
		return fmt.Sprintf("chdb: code %d: %s (query: %s)", e.Code, e.Message, queryHead(e.Query))
	}
	return fmt.Sprintf("chdb: %s (query: %s)", e.Message, queryHead(e.Query))
}

func newQueryError(query, msg string) *QueryError {
	msg = strings.TrimSpace(msg)
	e := &QueryError{Query: query, Message: msg}
	rest := strings.TrimPrefix(msg, "Error: ")
	if num, ok := strings.CutPrefix(rest, "Code: "); ok {
		i := 0
		for i < len(num) && num[i] >= '0' && num[i] <= '9' {
			i++
		}
		if i > 0 && i < len(num) && num[i] == '.' {
			if code, err := strconv.Atoi(num[:i]); err == nil {
				e.Code = code
				e.Message = strings.TrimSpace(num[i+1:])
			}
		}
	}
	return e
}

// queryHead is the query's first 120 bytes on one line, for messages.
func queryHead(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > 120 {
		cut := 120
		for cut > 0 && q[cut]&0xC0 == 0x80 { // do not split a UTF-8 sequence
			cut--
		}
		q = q[:cut] + "..."
	}
	return q
}
