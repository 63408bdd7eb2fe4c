package chdb_test

import (
	"bytes"
	"errors"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/harnessflow/harnessflow/internal/chdb"
)

// encodeTSV writes cells in ClickHouse's TabSeparatedWithNames form, the way
// ClickHouse escapes them.
func encodeTSV(cols []string, rows [][]string) []byte {
	esc := strings.NewReplacer(`\`, `\\`, "\t", `\t`, "\n", `\n`, "\r", `\r`, "\x00", `\0`, "\b", `\b`, "\f", `\f`, "'", `\'`)
	var b bytes.Buffer
	line := func(cells []string) {
		for i, c := range cells {
			if i > 0 {
				b.WriteByte('\t')
			}
			if c == chdb.Null {
				b.WriteString(`\N`)
			} else {
				b.WriteString(esc.Replace(c))
			}
		}
		b.WriteByte('\n')
	}
	if cols != nil {
		line(cols)
	}
	for _, r := range rows {
		line(r)
	}
	return b.Bytes()
}

func TestParseTSVWithNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		cols []string
		rows [][]string
	}{
		{"empty", "", nil, nil},
		{"header only", "a\tb\n", []string{"a", "b"}, nil},
		{"no final newline", "a\n1", []string{"a"}, [][]string{{"1"}}},
		{"one empty cell", "s\n\n", []string{"s"}, [][]string{{""}}},
		{"escapes", "a\\tb\tc\n" + `x\ty\n\r\\\'\0\b\f` + "\t" + `\N` + "\n",
			[]string{"a\tb", "c"}, [][]string{{"x\ty\n\r\\'\x00\b\f", chdb.Null}}},
		{"null only when whole cell", `s` + "\n" + `\\N` + "\n", []string{"s"}, [][]string{{`\N`}}},
		{"lenient escapes", "s\n" + `\a\v\x41\q\x4` + "\n", []string{"s"}, [][]string{{"\a\vAqx4"}}},
		// A clickhouse-server 18.16 HTTP answer to
		// SELECT 1 AS n, 'a\tb' AS s, NULL AS z FORMAT TabSeparatedWithNames.
		{"clickhouse 18.16 http", "n\ts\tz\n1\ta\\tb\t\\N\n", []string{"n", "s", "z"}, [][]string{{"1", "a\tb", chdb.Null}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cols, rows, err := chdb.ParseTSVWithNames([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cols, tc.cols) || !reflect.DeepEqual(rows, tc.rows) {
				t.Fatalf("got %q %q, want %q %q", cols, rows, tc.cols, tc.rows)
			}
		})
	}
	for _, bad := range []string{"a\tb\n1\n", "a\n1\t2\n", "a\nx\\\n"} {
		if cols, rows, err := chdb.ParseTSVWithNames([]byte(bad)); err == nil {
			t.Errorf("ParseTSVWithNames(%q) = %q %q, want an error", bad, cols, rows)
		}
	}
}

func FuzzParseTSVWithNames(f *testing.F) {
	f.Add([]byte(""))
	f.Add([]byte("a\tb\n1\t\\N\n"))
	f.Add([]byte("s\n\\t\\n\\\\\\'\\0\\x41\\q\n"))
	f.Add([]byte("n\ts\tz\n1\ta\\tb\t\\N\n2\t\t\n"))
	f.Add([]byte("\n\n\n"))
	f.Add([]byte("a\\"))
	f.Fuzz(func(t *testing.T, in []byte) {
		cols, rows, err := chdb.ParseTSVWithNames(in)
		if err != nil {
			return
		}
		for _, r := range rows {
			if len(r) != len(cols) {
				t.Fatalf("row %q has %d cells, header %d", r, len(r), len(cols))
			}
		}
		enc := encodeTSV(cols, rows)
		cols2, rows2, err := chdb.ParseTSVWithNames(enc)
		if err != nil {
			t.Fatalf("re-encoded %q: %v", enc, err)
		}
		if !reflect.DeepEqual(cols, cols2) || !reflect.DeepEqual(rows, rows2) {
			t.Fatalf("round trip of %q via %q: got %q %q, want %q %q", in, enc, cols2, rows2, cols, rows)
		}
	})
}

type label string

func TestBind(t *testing.T) {
	s, i := "it's a \\ test", -3
	var nilp *int
	for _, tc := range []struct {
		q    string
		args []any
		want string
	}{
		{"SELECT 1", nil, "SELECT 1"},
		{"SELECT ?, ?", []any{"a'b\\c", 42}, `SELECT 'a\'b\\c', 42`},
		{"SELECT ? -- ?\n, '?', \"?\", `?`, /* ? /* ? */ ? */ ?", []any{1, 2},
			"SELECT 1 -- ?\n, '?', \"?\", `?`, /* ? /* ? */ ? */ 2"},
		{"SELECT '\\'?', 'it''s ?', ?", []any{true}, "SELECT '\\'?', 'it''s ?', 1"},
		{"SELECT $$ ? $$, $x$ ? $x$, ? # ?\n", []any{false}, "SELECT $$ ? $$, $x$ ? $x$, 0 # ?\n"},
		{"SELECT ?,?,?,?,?,?", []any{int8(-1), uint8(2), int32(3), uint64(math.MaxUint64), uint16(5), int64(math.MinInt64)},
			"SELECT -1,2,3,18446744073709551615,5,-9223372036854775808"},
		{"SELECT ?,?,?,?,?", []any{0.1, math.NaN(), math.Inf(1), math.Inf(-1), float32(0.5)}, "SELECT 0.1,nan,inf,-inf,0.5"},
		{"SELECT ?, ?, ?", []any{nil, nilp, &i}, "SELECT NULL, NULL, -3"},
		{"SELECT ?, ?, ?", []any{[]string{"a", "b'"}, []string{}, []int64{1, -2}}, `SELECT ['a','b\''], [], [1,-2]`},
		{"SELECT ?, ?", []any{label("x"), &s}, `SELECT 'x', 'it\'s a \\ test'`},
		{"SELECT 1-?", []any{-5}, "SELECT 1- -5"},
		{"SELECT ?", []any{"a\x00b"}, `SELECT 'a\0b'`},
	} {
		got, err := chdb.Bind(tc.q, tc.args...)
		if err != nil {
			t.Errorf("Bind(%q, %v): %v", tc.q, tc.args, err)
			continue
		}
		if got != tc.want {
			t.Errorf("Bind(%q, %v) = %q, want %q", tc.q, tc.args, got, tc.want)
		}
	}
	for _, tc := range []struct {
		q    string
		args []any
	}{
		{"SELECT ?", nil},
		{"SELECT ?", []any{1, 2}},
		{"SELECT '?'", []any{1}},
		{"SELECT ?", []any{struct{}{}}},
		{"SELECT ?", []any{map[string]int{}}},
	} {
		if got, err := chdb.Bind(tc.q, tc.args...); err == nil {
			t.Errorf("Bind(%q, %v) = %q, want an error", tc.q, tc.args, got)
		}
	}
}

func TestRowsScanErrors(t *testing.T) {
	rows := chdb.NewRows([]string{"x", "y"}, [][]string{{chdb.Null, "abc"}})
	var f float64
	var s string
	if err := rows.Scan(&f, &s); err == nil {
		t.Fatal("Scan before Next succeeded")
	}
	if !rows.Next() {
		t.Fatal("no row")
	}
	err := rows.Scan(&f, &s)
	if err == nil || !strings.Contains(err.Error(), "(x)") || !strings.Contains(err.Error(), "NULL") {
		t.Fatalf("NULL into *float64: %v, want an error naming column x", err)
	}
	var n int64
	if err := rows.Scan(new(*float64), &n); err == nil || !strings.Contains(err.Error(), "(y)") {
		t.Fatalf("abc into *int64: %v, want an error naming column y", err)
	}
	if err := rows.Scan(&f); err == nil {
		t.Fatal("Scan with too few destinations succeeded")
	}
	if err := rows.ScanStruct(&struct{}{}); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Fatalf("ScanStruct: %v", err)
	}
	if err := rows.Totals(&f); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Fatalf("Totals: %v", err)
	}
	if rows.ColumnTypes() != nil {
		t.Fatal("ColumnTypes not nil")
	}
	if rows.Next() || rows.Err() != nil || rows.Close() != nil {
		t.Fatal("rows not at their end")
	}
}

func TestLibraryPath(t *testing.T) {
	t.Setenv(chdb.LibraryEnv, "/nonexistent/libchdb.so")
	if _, err := chdb.LibraryPath(); !errors.Is(err, chdb.ErrNoLibrary) {
		t.Fatalf("missing %s: %v, want ErrNoLibrary", chdb.LibraryEnv, err)
	}
	t.Setenv(chdb.LibraryEnv, "")
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	_, err := chdb.LibraryPath()
	if !errors.Is(err, chdb.ErrNoLibrary) || !strings.Contains(err.Error(), "bash infra/scripts/ensure-deps.sh --test") {
		t.Fatalf("missing library: %v, want ErrNoLibrary with the install command", err)
	}
	want := cache + "/harnessflow/chdb/node_modules/@chdb/lib-linux-x64-gnu/libchdb.so"
	if err := os.MkdirAll(want[:strings.LastIndexByte(want, '/')], 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(want, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := chdb.LibraryPath(); err != nil || got != want {
		t.Fatalf("LibraryPath() = %q, %v; want %q", got, err, want)
	}
	t.Setenv(chdb.LibraryEnv, want)
	if got, err := chdb.LibraryPath(); err != nil || got != want {
		t.Fatalf("LibraryPath() with %s = %q, %v; want %q", chdb.LibraryEnv, got, err, want)
	}
}

// The install script pins the same chDB as the package.
func TestEnsureDepsPinsLibraryVersion(t *testing.T) {
	b, err := os.ReadFile("../../infra/scripts/ensure-deps.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("chdb_version="+chdb.LibraryVersion+"\n")) {
		t.Fatalf("infra/scripts/ensure-deps.sh does not pin chdb_version=%s", chdb.LibraryVersion)
	}
}
