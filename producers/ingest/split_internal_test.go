package ingest

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

func TestSplitItemsShapes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, body string
		n          int
		errHas     string
	}{
		{"object", `{"a":1}`, 1, ""},
		{"array", ` [{"a":1}, {"a":2}] `, 2, ""},
		{"ndjson", "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n", 3, ""},
		{"empty", "  ", 0, "empty body"},
		{"empty array", "[]", 0, "empty array"},
		{"junk after the array", `[{"a":1}] {"a":2}`, 0, "more after the array"},
		{"array among objects", "{\"a\":1}\n[{\"a\":2}]", 0, "an array among several values"},
		{"truncated array", `[{"a":1}, {"a":`, 0, "malformed JSON array"},
		{"truncated object", `{"a":`, 0, "malformed JSON"},
	} {
		items, ierr := splitItems([]byte(c.body), 10)
		switch {
		case c.errHas != "" && (ierr == nil || !strings.Contains(ierr.Error, c.errHas)):
			t.Errorf("%s: error %+v, want one saying %q", c.name, ierr, c.errHas)
		case c.errHas == "" && (ierr != nil || len(items) != c.n):
			t.Errorf("%s: %d items, error %+v; want %d items", c.name, len(items), ierr, c.n)
		}
	}
}

// TestSplitItemsStopsPastTheCap: a body of many tiny items is split only up
// to the cap plus one (enough for the caller's 413), in both shapes; a
// maximal body of "{}" used to become millions of items (hundreds of MiB)
// before the cap was checked.
func TestSplitItemsStopsPastTheCap(t *testing.T) {
	const limit = 1000
	n := 4 << 20 / 3 // "{}," x n: a 4 MiB body
	arr := append(append([]byte("["), bytes.Repeat([]byte("{},"), n)...), "{}]"...)
	nd := bytes.Repeat([]byte("{}\n"), n)
	for name, body := range map[string][]byte{"array": arr, "ndjson": nd} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		items, ierr := splitItems(body, limit)
		runtime.ReadMemStats(&after)
		if ierr != nil || len(items) != limit+1 {
			t.Fatalf("%s: %d items (%+v), want the cap plus one (%d)", name, len(items), ierr, limit+1)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
			t.Errorf("%s: splitting a %d MiB body allocated %d MiB", name, len(body)>>20, alloc>>20)
		}
	}
}

// FuzzSplitItems: any body splits without a panic into at most the cap plus
// one items, each of them one well-formed JSON value, or is refused with an
// error naming an item index within the body's items.
func FuzzSplitItems(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[{"a":1},{"b":[2]}]`, "{}\n{}\n", "[]", `[{}] {}`, "{\"a\":1}\n[{}]", `[{"a":`, "\"x\"", "[1,2,3]", " \n "} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		const limit = 5
		items, ierr := splitItems(body, limit)
		if ierr != nil {
			if items != nil || ierr.Index < 0 || ierr.Error == "" {
				t.Fatalf("error %+v with %d items", ierr, len(items))
			}
			return
		}
		if len(items) == 0 || len(items) > limit+1 {
			t.Fatalf("%d items, want 1 to %d", len(items), limit+1)
		}
		for i, it := range items {
			if !json.Valid(it) {
				t.Fatalf("item %d is not valid JSON: %q", i, it)
			}
		}
	})
}
