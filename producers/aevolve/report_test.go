package aevolve

import (
	"strings"
	"testing"
)

// TestShownEscapesWhatIsNotPrintable: printable names are left alone (the
// report stays readable); control characters, escape codes, bidirectional
// overrides and invalid UTF-8 are quoted.
func TestShownEscapesWhatIsNotPrintable(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"camp/sonnet46_x_none_mcp_s1/summary.csv": "camp/sonnet46_x_none_mcp_s1/summary.csv",
		"tâche 1 (été)":                           "tâche 1 (été)",
		"a\x1b[31mb":                              `"a\x1b[31mb"`,
		"two\nlines":                              `"two\nlines"`,
		"tab\there":                               `"tab\there"`,
		"rtl\u202etxt.csv":                        `"rtl\u202etxt.csv"`,
		"bad\xffutf8":                             `"bad\xffutf8"`,
		"":                                        "",
	} {
		if got := shown(in); got != want {
			t.Errorf("shown(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestSummaryTextEscapesNames: the summary the import command prints
// names cells escaped.
func TestSummaryTextEscapesNames(t *testing.T) {
	t.Parallel()
	s := Summary{Campaign: "c\x1b]0;x\x07", Events: 3, Refused: 1,
		Cells: []CellReport{{CellID: "a\x1b[31m_x_none_mcp_s1", Benchmark: "mcp", Agent: "a\x1b[31m", Seed: 1, Attempts: 2}}}
	var b strings.Builder
	if err := s.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.ContainsAny(out, "\x1b\x07") {
		t.Fatalf("summary prints control characters raw:\n%s", out)
	}
	for _, want := range []string{`"a\x1b[31m_x_none_mcp_s1": mcp agent "a\x1b[31m" () evolver none () seed 1: 0 tasks, 2 attempts`,
		`campaign "c\x1b]0;x\a": produced 3 events from 1 cells`, "refused 1 unsafe"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}
