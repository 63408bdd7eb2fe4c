package chddl

import (
	"strings"
	"testing"
)

func TestExpandFragments(t *testing.T) {
	got, err := expandFragments("SELECT * FROM\n(\n{cell_rates WHERE cell_id IN (SELECT c FROM {db}.x)}\n) AS l1 WHERE a = '{db}'")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "        WHERE cell_id IN (SELECT c FROM {db}.x)\n        GROUP BY cell_id, task_id") ||
		strings.Contains(got, "{where}") || strings.Contains(got, "{cell_rates") || !strings.HasSuffix(got, "WHERE a = '{db}'") {
		t.Fatalf("expanded:\n%s", got)
	}
	all, err := expandFragments("{cell_rates}")
	if err != nil || strings.Contains(all, "WHERE") || !strings.Contains(all, "100 * avg(t_first) AS r_pass_rate") {
		t.Fatalf("without a condition: %v\n%s", err, all)
	}
	for _, bad := range []string{"{cell_rates AND x}", "{cell_info WHERE x = 1}", "SELECT {cell_rates"} {
		if _, err := expandFragments(bad); err == nil {
			t.Errorf("%q expanded without an error", bad)
		}
	}
	if s, err := expandFragments("{db}.t {unknown}"); err != nil || s != "{db}.t {unknown}" {
		t.Fatalf("non-fragment braces changed: %q, %v", s, err)
	}
}

// TestOneCopyOfThePassRate: the pass-rate definition appears in no
// migration file's source, only in its fragment, and every use expands it.
func TestOneCopyOfThePassRate(t *testing.T) {
	const def = "100 * avg(t_first)"
	for _, f := range Files() {
		raw, err := sqlFS.ReadFile(f.Name)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), def) {
			t.Errorf("%s writes the pass rate itself instead of {cell_rates}", f.Name)
		}
		if strings.Contains(f.SQL, "{cell_") {
			t.Errorf("%s: a fragment reference survived expansion", f.Name)
		}
	}
	if !strings.Contains(recomputeSQL, def) || strings.Count(recomputeSQL, "{cells}") != 2 { // the rates and the version
		t.Fatalf("recompute statement:\n%s", recomputeSQL)
	}
}
