//go:build linux

package chdb_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/harnessflow/harnessflow/internal/chdb"
	"github.com/harnessflow/harnessflow/internal/testenv"
)

const childEnv = "HF_CHDB_TEST_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		// A fresh process for what the shared session rules out: watching
		// Open's effect on the signal handlers, and Close then Open again.
		if err := openCloseChild(dir); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	testenv.Main(m)
}

var faultSignals = []syscall.Signal{
	syscall.SIGABRT, syscall.SIGSEGV, syscall.SIGILL, syscall.SIGBUS,
	syscall.SIGSYS, syscall.SIGFPE, syscall.SIGTSTP, syscall.SIGTRAP,
}

// sigactions reads the kernel's action for each of faultSignals.
func sigactions() [][8]uint64 {
	out := make([][8]uint64, len(faultSignals))
	for i, sig := range faultSignals {
		_, _, errno := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&out[i])), 8, 0, 0)
		if errno != 0 {
			panic(errno)
		}
	}
	return out
}

// nilPanic dereferences a nil pointer and returns what recover got.
func nilPanic() (r any) {
	defer func() { r = recover() }()
	var p *int
	return *p
}

func checkNilPanic() error {
	r := nilPanic()
	if re, ok := r.(runtime.Error); !ok || !strings.Contains(re.Error(), "nil pointer dereference") {
		return fmt.Errorf("nil dereference recovered %v (%T), want a runtime.Error", r, r)
	}
	return nil
}

func openCloseChild(dir string) error {
	ctx := context.Background()
	before := sigactions()
	d1, d2 := filepath.Join(dir, "one"), filepath.Join(dir, "two")
	s, err := chdb.Open(d1)
	if err != nil {
		return err
	}
	if after := sigactions(); !reflect.DeepEqual(before, after) {
		return fmt.Errorf("Open changed the fault signals' actions:\nbefore %x\nafter  %x", before, after)
	}
	if err := checkNilPanic(); err != nil {
		return err
	}
	for _, q := range []string{"CREATE DATABASE d", "CREATE TABLE d.t (x UInt8) ENGINE = MergeTree ORDER BY x", "INSERT INTO d.t VALUES (7)"} {
		if err := s.Exec(ctx, q); err != nil {
			return err
		}
	}
	if _, err := s.Run(ctx, "SELECT * FROM nope", ""); err == nil {
		return errors.New("bad query succeeded")
	}
	if after := sigactions(); !reflect.DeepEqual(before, after) {
		return fmt.Errorf("queries changed the fault signals' actions:\nbefore %x\nafter  %x", before, after)
	}
	if _, err := chdb.Open(d2); !errors.Is(err, chdb.ErrInUse) {
		return fmt.Errorf("second Open: %v, want ErrInUse", err)
	}
	if err := s.Close(); err != nil {
		return err
	}
	if err := s.Close(); err != nil {
		return fmt.Errorf("second Close: %v", err)
	}
	if err := s.Exec(ctx, "SELECT 1"); !errors.Is(err, chdb.ErrClosed) {
		return fmt.Errorf("Exec after Close: %v, want ErrClosed", err)
	}
	// Open again, on another data dir: d.t is not there.
	s, err = chdb.Open(d2)
	if err != nil {
		return fmt.Errorf("Open after Close: %w", err)
	}
	if _, err := s.Run(ctx, "SELECT * FROM d.t", ""); err == nil {
		return errors.New("d.t visible on another data dir")
	}
	if err := s.Close(); err != nil {
		return err
	}
	// And on the first one again: d.t is back.
	if s, err = chdb.Open(d1); err != nil {
		return fmt.Errorf("third Open: %w", err)
	}
	out, err := s.Run(ctx, "SELECT x FROM d.t", "")
	if err != nil || string(out) != "7\n" {
		return fmt.Errorf("d.t after reopening: %q, %v", out, err)
	}
	if after := sigactions(); !reflect.DeepEqual(before, after) {
		return fmt.Errorf("reopening changed the fault signals' actions:\nbefore %x\nafter  %x", before, after)
	}
	if err := checkNilPanic(); err != nil {
		return err
	}
	return s.Close()
}

// TestOpenCloseInChild runs openCloseChild in a fresh test process: Open
// keeps the Go runtime's signal handlers, a second Open is ErrInUse, and
// Close then Open works, on another data dir or the same one.
func TestOpenCloseInChild(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func TestVersion(t *testing.T) {
	ch := testenv.CurrentClickHouse(t)
	if !strings.HasPrefix(ch.Version, "26.") {
		t.Fatalf("version %q, want 26.x", ch.Version)
	}
	cols, rows, err := ch.QueryStrings(context.Background(), "SELECT version() AS v")
	if err != nil || !reflect.DeepEqual(cols, []string{"v"}) || len(rows) != 1 || rows[0][0] != ch.Version {
		t.Fatalf("SELECT version(): %q %q %v", cols, rows, err)
	}
}

func TestSignalHandlersAfterOpen(t *testing.T) {
	testenv.CurrentClickHouse(t) // the session is open
	if err := checkNilPanic(); err != nil {
		t.Fatal(err)
	}
}

func TestSecondOpenIsInUse(t *testing.T) {
	testenv.CurrentClickHouse(t)
	if s, err := chdb.Open(t.TempDir()); !errors.Is(err, chdb.ErrInUse) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open while open: %v, want ErrInUse", err)
	}
}

func TestRoundTrip(t *testing.T) {
	ch := testenv.CurrentClickHouse(t)
	ctx := context.Background()
	tricky := "tab\there, newline\nthere, back\\slash, 'quote', \"dq\", nul\x00, ünï, ?"
	for _, q := range []string{
		"CREATE TABLE t (id UInt32, s String, f Nullable(Float64), a Array(String)) ENGINE = MergeTree ORDER BY id",
		mustBind(t, "INSERT INTO t VALUES (1, ?, ?, ?), (2, ?, ?, ?)", tricky, 0.25, []string{"x", "y'z"}, "", nil, []string{}),
	} {
		if err := ch.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	cols, rows, err := ch.QueryStrings(ctx, "SELECT id, s, f, a FROM t ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	// An array's text is not escaped again for TSV, so its cell comes back
	// with one level of escapes undone: y\'z loses its backslash.
	want := [][]string{{"1", tricky, "0.25", `['x','y'z']`}, {"2", "", chdb.Null, "[]"}}
	if !reflect.DeepEqual(cols, []string{"id", "s", "f", "a"}) || !reflect.DeepEqual(rows, want) {
		t.Fatalf("got %q %q, want %q", cols, rows, want)
	}
	out, err := ch.Run(ctx, "SELECT count() AS n, sum(id) AS s FROM t", "JSONEachRow")
	if err != nil || string(out) != `{"n":2,"s":3}`+"\n" {
		t.Fatalf("JSONEachRow: %q, %v", out, err)
	}
	out, err = ch.Run(ctx, "SELECT id FROM t ORDER BY id", "")
	if err != nil || string(out) != "1\n2\n" {
		t.Fatalf("default format: %q, %v", out, err)
	}
	if out, err = ch.Run(ctx, "DROP TABLE t", ""); err != nil || len(out) != 0 {
		t.Fatalf("DROP TABLE: %q, %v", out, err)
	}
}

func mustBind(t *testing.T, q string, args ...any) string {
	t.Helper()
	s, err := chdb.Bind(q, args...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestQueryError(t *testing.T) {
	ch := testenv.CurrentClickHouse(t)
	ctx := context.Background()
	for _, tc := range []struct {
		q    string
		code int
		name string
	}{
		{"SELECT * FROM no_such_table", 60, "UNKNOWN_TABLE"},
		{"SELEC 1", 62, "SYNTAX_ERROR"},
	} {
		_, err := ch.Run(ctx, tc.q, "")
		var qe *chdb.QueryError
		if !errors.As(err, &qe) {
			t.Fatalf("%s: %v (%T), want a *QueryError", tc.q, err, err)
		}
		if qe.Code != tc.code || qe.Query != tc.q || !strings.Contains(qe.Message, tc.name) || strings.HasPrefix(qe.Message, "Code:") {
			t.Errorf("%s: %+v, want code %d and %s in the message", tc.q, qe, tc.code, tc.name)
		}
		if msg := err.Error(); !strings.Contains(msg, fmt.Sprint("code ", tc.code)) || !strings.Contains(msg, tc.name) || !strings.Contains(msg, tc.q) {
			t.Errorf("Error() = %q, want the code, the message and the query", msg)
		}
	}
	long := "SELECT * FROM no_such_table WHERE x = '" + strings.Repeat("y", 500) + "'"
	_, err := ch.Run(ctx, long, "")
	if err == nil {
		t.Fatal("no error")
	}
	_, head, ok := strings.Cut(err.Error(), " (query: ")
	if !ok || !strings.HasPrefix(head, "SELECT * FROM no_such_table WHERE") || !strings.HasSuffix(head, "...)") || len(head) > 130 {
		t.Fatalf("long query's error: %v; want the query cut to about 120 bytes", err)
	}
}

// A query that fails after writing part of its output must not pass that
// output to the next query (chDB does, unless Run cleans up).
func TestFailedQueryLeavesNoOutput(t *testing.T) {
	// On the Session itself: CHDB's methods run a USE before each statement,
	// which would take the stale output instead.
	s := testenv.CurrentClickHouse(t).Session
	ctx := context.Background()
	for _, q := range []string{
		"SELECT throwIf(1) AS boom",
		"SELECT number, throwIf(number = 50000) FROM numbers(100000)",
	} {
		if _, err := s.Run(ctx, q, "TabSeparatedWithNames"); err == nil {
			t.Fatalf("%s succeeded", q)
		}
		out, err := s.Run(ctx, "SELECT 42 AS x", "TabSeparatedWithNames")
		if err != nil || string(out) != "x\n42\n" {
			t.Fatalf("after %s: %q, %v; want \"x\\n42\\n\"", q, out, err)
		}
	}
}

func TestUsePersistsOnSession(t *testing.T) {
	ch := testenv.CurrentClickHouse(t)
	ctx := context.Background()
	s := ch.Session
	if err := s.Exec(ctx, "USE "+ch.Database); err != nil {
		t.Fatal(err)
	}
	out, err := s.Run(ctx, "SELECT currentDatabase()", "")
	if err != nil || string(out) != ch.Database+"\n" {
		t.Fatalf("currentDatabase() after USE %s: %q, %v", ch.Database, out, err)
	}
}

func TestContextDone(t *testing.T) {
	ch := testenv.CurrentClickHouse(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ch.Session.Exec(ctx, "CREATE TABLE "+ch.Database+".never (x UInt8) ENGINE = Memory"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Exec with a done context: %v", err)
	}
	_, rows, err := ch.QueryStrings(context.Background(), "SELECT name FROM system.tables WHERE database = currentDatabase()")
	if err != nil || len(rows) != 0 {
		t.Fatalf("tables: %q, %v; want none", rows, err)
	}
}

func TestCurrentClickHouseIsolated(t *testing.T) {
	a, b := testenv.CurrentClickHouse(t), testenv.CurrentClickHouse(t)
	if a.Database == b.Database {
		t.Fatalf("both got database %s", a.Database)
	}
	ctx := context.Background()
	for i, ch := range []*testenv.CHDB{a, b} {
		if err := ch.Exec(ctx, "CREATE TABLE t (x Int64) ENGINE = MergeTree ORDER BY x"); err != nil {
			t.Fatal(err)
		}
		if err := ch.Exec(ctx, fmt.Sprintf("INSERT INTO t SELECT number * %d FROM numbers(%d)", i+1, 10*(i+1))); err != nil {
			t.Fatal(err)
		}
	}
	// Interleaved and concurrent calls each see their own database.
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		ch, want := a, "10\t45\t"+a.Database
		if i%2 == 1 {
			ch, want = b, "20\t380\t"+b.Database
		}
		wg.Go(func() {
			_, rows, err := ch.QueryStrings(ctx, "SELECT count(), sum(x), currentDatabase() FROM t")
			if err != nil {
				errs <- err
				return
			}
			if got := strings.Join(rows[0], "\t"); got != want {
				errs <- fmt.Errorf("%s: got %q, want %q", ch.Database, got, want)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Each database is dropped at cleanup: check from a third test database.
	t.Run("dropped", func(t *testing.T) {
		var aDB, bDB string
		t.Run("inner", func(t *testing.T) {
			aDB = testenv.CurrentClickHouse(t).Database
			bDB = testenv.CurrentClickHouse(t).Database
		})
		_, rows, err := a.QueryStrings(ctx, mustBind(t, "SELECT name FROM system.databases WHERE name IN (?, ?)", aDB, bDB))
		if err != nil || len(rows) != 0 {
			t.Fatalf("databases of a finished test: %q, %v; want none", rows, err)
		}
	})
}

func TestQueryScan(t *testing.T) {
	ch := testenv.CurrentClickHouse(t)
	ctx := context.Background()
	tricky := "a'b\\c\td\ne ? ü"
	rows, err := ch.Query(ctx, `SELECT ? AS s, toInt64(?) AS i64, toInt32(?) AS i32, ? AS i, toUInt64(?) AS u64,
		toUInt32(?) AS u32, toUInt8(?) AS u8, toFloat64(?) AS f, ? AS b, true AS tb,
		CAST(NULL AS Nullable(Float64)) AS nf, toNullable(toFloat64(?)) AS pf,
		CAST(NULL AS Nullable(String)) AS ns, toNullable(?) AS ps,
		CAST(NULL AS Nullable(Int64)) AS ni, toNullable(toInt64(?)) AS pi, '?' AS q`,
		tricky, int64(math.MinInt64), int32(-7), 12, uint64(math.MaxUint64), uint32(math.MaxUint32), uint8(255), -2.5, true,
		math.Inf(-1), "x", -9)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	wantCols := []string{"s", "i64", "i32", "i", "u64", "u32", "u8", "f", "b", "tb", "nf", "pf", "ns", "ps", "ni", "pi", "q"}
	if got := rows.Columns(); !reflect.DeepEqual(got, wantCols) {
		t.Fatalf("Columns() = %q", got)
	}
	if !rows.Next() {
		t.Fatalf("no row: %v", rows.Err())
	}
	var (
		s      string
		i64    int64
		i32    int32
		i      int
		u64    uint64
		u32    uint32
		u8     uint8
		f      float64
		b, tb  bool
		nf, pf = new(float64), (*float64)(nil)
		ns, ps = new(string), (*string)(nil)
		ni, pi = new(int64), (*int64)(nil)
		q      string
	)
	if err := rows.Scan(&s, &i64, &i32, &i, &u64, &u32, &u8, &f, &b, &tb, &nf, &pf, &ns, &ps, &ni, &pi, &q); err != nil {
		t.Fatal(err)
	}
	if s != tricky || i64 != math.MinInt64 || i32 != -7 || i != 12 || u64 != math.MaxUint64 || u32 != math.MaxUint32 || u8 != 255 ||
		f != -2.5 || !b || !tb || q != "?" {
		t.Errorf("scanned %q %d %d %d %d %d %d %g %v %v %q", s, i64, i32, i, u64, u32, u8, f, b, tb, q)
	}
	if nf != nil || pf == nil || !math.IsInf(*pf, -1) || ns != nil || ps == nil || *ps != "x" || ni != nil || pi == nil || *pi != -9 {
		t.Errorf("scanned pointers %v %v %v %v %v %v", nf, pf, ns, ps, ni, pi)
	}
	if rows.Next() {
		t.Fatal("a second row")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	// NULL into a non-pointer destination names the column.
	rows, err = ch.Query(ctx, "SELECT 1 AS one, CAST(NULL AS Nullable(Float64)) AS missing")
	if err != nil {
		t.Fatal(err)
	}
	rows.Next()
	if err := rows.Scan(&i, &f); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("NULL into *float64: %v, want an error naming the column", err)
	}
	// nan, -nan and inf as ClickHouse writes them.
	rows, err = ch.Query(ctx, "SELECT nan, -nan, inf, -inf")
	if err != nil {
		t.Fatal(err)
	}
	rows.Next()
	var f1, f2, f3, f4 float64
	if err := rows.Scan(&f1, &f2, &f3, &f4); err != nil || !math.IsNaN(f1) || !math.IsNaN(f2) || !math.IsInf(f3, 1) || !math.IsInf(f4, -1) {
		t.Fatalf("nan/inf: %v %v %v %v, %v", f1, f2, f3, f4, err)
	}
	if _, err := ch.Query(ctx, "SELECT ?", 1, 2); err == nil {
		t.Fatal("Query with an extra arg succeeded")
	}
}
