package report

import (
	"bytes"
	"strings"
	"testing"
)

// TestTextReportEscapesTerminalControls: names from events that carry
// terminal escape sequences (retitle, clear screen, a C1 CSI) or a carriage
// return come out escaped in the terminal report; ordinary text (Δ, tabs
// between columns, newlines) is untouched.
func TestTextReportEscapesTerminalControls(t *testing.T) {
	r := &Report{Campaign: "c\x1b]0;pwned\x07", Benchmarks: []string{"swe\r"}}
	r.Cells = []CellScore{
		{CellID: "a", Benchmark: "swe\r", Agent: "evil\x1b[2J\u009b31m", PassRate: 50},
		{CellID: "b", Benchmark: "swe\r", Agent: "evil\x1b[2J\u009b31m", Evolver: "e\x7f", PassRate: 60},
	}
	r.buildMatrices()
	r.Critic = []CriticCurve{{Trainer: "t\x1b[2J", NoSignal: "x", Points: []CriticPoint{{ModelVersion: "v\u009b1", Verdict: "no\rsignal",
		Comparisons: []CriticComparison{{Metric: "rmse", Baseline: "b\x1b]0;x\x07"}}}}}}
	var out bytes.Buffer
	if err := r.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, c := range s {
		if (c < 0x20 && c != '\n' && c != '\t') || (c >= 0x7f && c <= 0x9f) {
			t.Fatalf("control character %U in the text report:\n%q", c, s)
		}
	}
	for _, want := range []string{`c\x1b]0;pwned\a`, `evil\x1b[2J\u009b31m`, `swe\r`, `e\x7f`, "Pass rate", `t\x1b[2J`, `b\x1b]0;x\a`} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
}

// TestSpreadNeedsTwoEvolvers: the Δupdate spread (best − worst evolver) is
// printed over two or more evolvers with a defined Δupdate, and said to be
// undefined over one (it used to print 0.0 pp, a figure nobody measured).
func TestSpreadNeedsTwoEvolvers(t *testing.T) {
	v := func(x float64) *float64 { return &x }
	for _, c := range []struct {
		gains []UpdateGain
		want  string
	}{
		{[]UpdateGain{{Benchmark: "swe", Evolver: "a", DeltaPP: v(2.5)}, {Benchmark: "swe", Evolver: "b", DeltaPP: nil}},
			"swe: Δupdate spread undefined (one evolver with a defined Δupdate; a spread needs two)"},
		{[]UpdateGain{{Benchmark: "swe", Evolver: "a", DeltaPP: v(2.5)}, {Benchmark: "swe", Evolver: "b", DeltaPP: v(-1)}},
			"swe: Δupdate spread (best − worst evolver) 3.5 pp over 2 evolvers"},
	} {
		r := &Report{Campaign: "spread", Benchmarks: []string{"swe"}, UpdateGain: c.gains}
		var b bytes.Buffer
		if err := r.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), c.want) || strings.Contains(b.String(), "spread (best − worst evolver) 0.0 pp") {
			t.Errorf("report says:\n%s\nwant a line %q", b.String(), c.want)
		}
	}
}
