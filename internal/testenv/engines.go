package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/infra/chddl"

	"github.com/harnessflow/harnessflow/internal/chdb"
)

// HTTPQuery runs query on the CH's server over its HTTP interface, with
// Database as the default database, and returns the output in format (e.g.
// "TSVWithNames"): the same text a current engine writes in that format, so
// results of both engines can be compared as text.
func (c *CH) HTTPQuery(ctx context.Context, query, format string) ([]byte, error) {
	q := strings.TrimRight(strings.TrimSpace(query), ";")
	if format != "" {
		q += "\nFORMAT " + format
	}
	u := "http://" + c.Server.HTTPAddr() + "/?database=" + url.QueryEscape(c.Database)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(q))
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("clickhouse %s: HTTP %d: %s", c.Server.Version(), resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// CopyTables copies every row of tables from the 18.16 database from to the
// chDB database to, as they are: rows that have not merged yet (redelivered
// duplicates) stay separate rows (optimize_on_insert is off for the copy).
// Each table is exported as TSVWithNamesAndTypes and read back with file():
// one fixture, replayed on both engines.
func CopyTables(t testing.TB, from *CH, to *CHDB, tables ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	for _, tb := range tables {
		q := chddl.QuoteIdent(tb)
		out, err := from.HTTPQuery(ctx, "SELECT * FROM "+q, "TSVWithNamesAndTypes")
		if err != nil {
			t.Fatalf("testenv: export %s: %v", tb, err)
		}
		path := filepath.Join(dir, tb+".tsv")
		if err := os.WriteFile(path, out, 0o600); err != nil {
			t.Fatal(err)
		}
		ins, err := chdb.Bind("INSERT INTO "+q+" SELECT * FROM file(?, 'TSVWithNamesAndTypes') SETTINGS optimize_on_insert = 0", path)
		if err != nil {
			t.Fatal(err)
		}
		if err := to.Exec(ctx, ins); err != nil {
			t.Fatalf("testenv: import %s into chDB: %v", tb, err)
		}
		a, b, err := QueryBoth(from, to, "SELECT count() FROM "+q)
		if err != nil || Diff("18.16", a, "chDB", b, true) != "" {
			t.Fatalf("testenv: %s: %v rows on 18.16, %v on chDB (%v)", tb, a.Rows, b.Rows, err)
		}
	}
}

// Result is a query's answer as text: column names and rows, NULL as
// chdb.Null.
type Result struct {
	Cols []string
	Rows [][]string
}

// QueryBoth runs query on both engines and returns their answers (18.16's
// first), as TSVWithNames text.
func QueryBoth(old *CH, cur *CHDB, query string) (Result, Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var a, b Result
	out, err := old.HTTPQuery(ctx, query, "TSVWithNames")
	if err != nil {
		return a, b, fmt.Errorf("on %s: %w", old.Server.Version(), err)
	}
	if a.Cols, a.Rows, err = chdb.ParseTSVWithNames(out); err != nil {
		return a, b, err
	}
	out, err = cur.Run(ctx, strings.TrimRight(strings.TrimSpace(query), ";"), "TSVWithNames")
	if err != nil {
		return a, b, fmt.Errorf("on %s: %w", cur.Version, err)
	}
	b.Cols, b.Rows, err = chdb.ParseTSVWithNames(out)
	return a, b, err
}

// Diff compares two answers, a from the engine or node named aName and b
// from bName (the names label the differences), and returns "" when they
// are the same: the same column names, the same number of rows, and cell by
// cell the same text or numbers within 1e-9 relative (1e-12 absolute near
// 0; NaN equals NaN). With ordered false the rows are compared as sets
// (sorted first, numbers rounded to 9 significant digits for the order);
// with ordered true, in order.
func Diff(aName string, a Result, bName string, b Result, ordered bool) string {
	// Pad the labels to one width so that the rows line up.
	w := max(len(aName), len(bName)) + 1
	la, lb := fmt.Sprintf("%-*s", w, aName+":"), fmt.Sprintf("%-*s", w, bName+":")
	if strings.Join(a.Cols, "|") != strings.Join(b.Cols, "|") {
		return fmt.Sprintf("columns differ:\n  %s %v\n  %s %v", la, a.Cols, lb, b.Cols)
	}
	ra, rb := a.Rows, b.Rows
	if !ordered {
		ra, rb = sortedRows(ra), sortedRows(rb)
	}
	var out []string
	for i := 0; i < max(len(ra), len(rb)); i++ {
		switch {
		case i >= len(ra):
			out = append(out, fmt.Sprintf("  only on %s %s", lb, strings.Join(rb[i], " | ")))
		case i >= len(rb):
			out = append(out, fmt.Sprintf("  only on %s %s", la, strings.Join(ra[i], " | ")))
		case !sameRow(ra[i], rb[i]):
			out = append(out, fmt.Sprintf("  row %d:\n    %s %s\n    %s %s", i+1, la, strings.Join(ra[i], " | "), lb, strings.Join(rb[i], " | ")))
		}
	}
	if len(ra) != len(rb) {
		out = append([]string{fmt.Sprintf("  %d rows on %s, %d on %s", len(ra), aName, len(rb), bName)}, out...)
	}
	return strings.Join(out, "\n")
}

func sameRow(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] && !sameNumber(a[i], b[i]) {
			return false
		}
	}
	return true
}

func sameNumber(a, b string) bool {
	x, err1 := strconv.ParseFloat(a, 64)
	y, err2 := strconv.ParseFloat(b, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	return Close(x, y)
}

// Close reports whether x and y agree to 1e-9 relative (1e-12 absolute near
// 0); NaN is close to NaN, an infinity only to itself.
func Close(x, y float64) bool {
	switch {
	case math.IsNaN(x) || math.IsNaN(y):
		return math.IsNaN(x) && math.IsNaN(y)
	case math.IsInf(x, 0) || math.IsInf(y, 0):
		return x == y
	}
	d := math.Abs(x - y)
	return d <= 1e-12 || d <= 1e-9*math.Max(math.Abs(x), math.Abs(y))
}

func sortedRows(rows [][]string) [][]string {
	key := func(r []string) string {
		k := make([]string, len(r))
		for i, c := range r {
			if f, err := strconv.ParseFloat(c, 64); err == nil {
				c = strconv.FormatFloat(f, 'g', 9, 64)
			}
			k[i] = c
		}
		return strings.Join(k, "\x1f")
	}
	out := append([][]string(nil), rows...)
	sort.SliceStable(out, func(i, j int) bool { return key(out[i]) < key(out[j]) })
	return out
}

// DiffJSON compares two values by their JSON form and returns "" when they
// are the same, numbers within Close; otherwise the paths that differ. For
// comparing what Go code built from each engine's answers (a report).
func DiffJSON(a, b any) string {
	var x, y any
	for _, p := range []struct {
		in  any
		out *any
	}{{a, &x}, {b, &y}} {
		raw, err := json.Marshal(p.in)
		if err != nil {
			return err.Error()
		}
		if err := json.Unmarshal(raw, p.out); err != nil {
			return err.Error()
		}
	}
	var out []string
	diffJSON("$", x, y, &out)
	return strings.Join(out, "\n")
}

func diffJSON(path string, x, y any, out *[]string) {
	switch xv := x.(type) {
	case map[string]any:
		yv, ok := y.(map[string]any)
		if !ok {
			*out = append(*out, fmt.Sprintf("%s: %v vs %v", path, x, y))
			return
		}
		keys := map[string]bool{}
		for k := range xv {
			keys[k] = true
		}
		for k := range yv {
			keys[k] = true
		}
		names := make([]string, 0, len(keys))
		for k := range keys {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			diffJSON(path+"."+k, xv[k], yv[k], out)
		}
	case []any:
		yv, ok := y.([]any)
		if !ok || len(xv) != len(yv) {
			*out = append(*out, fmt.Sprintf("%s: %d items vs %v", path, len(xv), y))
			return
		}
		for i := range xv {
			diffJSON(fmt.Sprintf("%s[%d]", path, i), xv[i], yv[i], out)
		}
	case float64:
		if yv, ok := y.(float64); !ok || !Close(xv, yv) {
			*out = append(*out, fmt.Sprintf("%s: %v vs %v", path, x, y))
		}
	default:
		if !reflect.DeepEqual(x, y) {
			*out = append(*out, fmt.Sprintf("%s: %v vs %v", path, x, y))
		}
	}
}
