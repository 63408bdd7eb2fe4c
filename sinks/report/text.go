package report

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

func fmtF(p *float64, format string) string {
	if p == nil {
		return "—"
	}
	return fmt.Sprintf(format, *p)
}

func evolverName(e string) string {
	if e == "" {
		return "base"
	}
	return e
}

// WriteText writes the terminal report to w. Every name in it comes from
// events, so control characters (terminal escape sequences, carriage
// returns) are written escaped (termSafe).
func (r *Report) WriteText(w io.Writer) error {
	buf := bufio.NewWriter(w)
	bw := &termSafe{w: buf}
	section := func(title string) {
		fmt.Fprintf(bw, "\n== %s ==\n", title)
	}
	table := func(header string, rows [][]string) {
		tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, header+"\t")
		for _, row := range rows {
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		}
		tw.Flush()
	}
	fmt.Fprintf(bw, "harnessflow report: campaign %s (%d cells, benchmarks %s)\n", r.Campaign, len(r.Cells), strings.Join(r.Benchmarks, ", "))

	for _, m := range r.Matrices {
		section("Pass rate (%), benchmark " + m.Benchmark + ": base and post-evolution per evolver")
		head := []string{"agent"}
		for _, e := range m.Evolvers {
			head = append(head, evolverName(e))
		}
		var rows [][]string
		for i, a := range m.Agents {
			row := []string{a}
			for j := range m.Evolvers {
				cell := fmtF(m.Pass[i][j], "%.1f")
				if m.Delta[i][j] != nil {
					cell += fmt.Sprintf(" (%+.1f)", *m.Delta[i][j])
				}
				row = append(row, cell)
			}
			rows = append(rows, row)
		}
		table(strings.Join(head, "\t"), rows)
	}

	section("Harness-updating gain Δupdate per evolver (pp, mean over anchor agents)")
	{
		var rows [][]string
		for _, u := range r.UpdateGain {
			rows = append(rows, []string{u.Benchmark, u.Evolver, fmtF(u.DeltaPP, "%+.1f"), fmt.Sprint(u.NAnchorAgents), fmt.Sprint(u.Seeds)})
		}
		table("benchmark\tevolver\tΔupdate\tanchors\tseeds", rows)
		for _, b := range r.Benchmarks {
			lo, hi, ok := spread(r.UpdateGain, b)
			if ok {
				fmt.Fprintf(bw, "%s: Δupdate spread (best − worst evolver) %.1f pp\n", b, hi-lo)
			}
		}
	}

	section("Harness-benefit gain Δbenefit per agent (pp, over anchor evolvers)")
	{
		var rows [][]string
		for _, b := range r.BenefitGain {
			rows = append(rows, []string{b.Benchmark, b.Agent, fmtF(b.DeltaPP, "%+.1f"), b.BestEvolver, fmtF(b.MeanDeltaPP, "%+.1f"), fmt.Sprint(b.CellsBelowBaseline)})
		}
		table("benchmark\tagent\tΔbenefit (max)\tbest evolver\tmean Δ\tcells below base", rows)
	}

	section("Skill activation: SLR, LPR, HFR")
	{
		var rows [][]string
		for _, a := range r.Activation {
			rows = append(rows, []string{a.Benchmark, a.Agent, fmt.Sprint(a.Attempts), fmtF(a.SLR, "%.2f"), fmtF(a.LPR, "%.1f"), fmtF(a.HFR, "%.2f"), fmtF(a.LoadSuccessRate, "%.2f")})
		}
		table("benchmark\tagent\tattempts\tSLR\tLPR %\tHFR\tload success", rows)
	}

	section("Adherence by phase, drift and decay")
	{
		var rows [][]string
		for _, a := range r.Adherence {
			row := []string{a.Benchmark, a.Agent}
			for _, p := range a.Phase {
				row = append(row, fmtF(p, "%.2f"))
			}
			row = append(row, fmtF(a.Drift, "%+.2f"), fmtF(a.Decay, "%.2f"))
			rows = append(rows, row)
		}
		table("benchmark\tagent\tloaded\tfirst\tmid\tpre-final\tfinal\tdrift\tdecay", rows)
	}

	section("Ten least stable pairs (round stddev of the lift, pp)")
	{
		var rows [][]string
		for _, s := range r.Unstable {
			rows = append(rows, []string{s.Benchmark, s.Agent, s.Evolver, fmt.Sprint(s.Rounds), fmtF(s.MeanLift, "%+.1f"), fmtF(s.StddevLift, "%.1f"),
				fmtF(s.CV, "%.2f"), fmt.Sprintf("%.2f", s.FlipRate), fmtF(s.StabilityScore, "%+.1f")})
		}
		table("benchmark\tagent\tevolver\trounds\tmean lift\tstddev\tCV\tflip rate\tstability", rows)
	}

	section("Labels")
	fmt.Fprintf(bw, "updates %d: positive %d, negative %d, neutral %d; effective-update rate %s; mean gain of positive updates %s pp\n",
		r.Updates, r.Positive, r.Negative, r.Neutral, fmtF(r.EffectiveUpdateRate, "%.2f"), fmtF(r.MeanGain, "%+.1f"))
	return buf.Flush()
}

// spread returns the min and max Δupdate over evolvers of benchmark b.
func spread(us []UpdateGain, b string) (lo, hi float64, ok bool) {
	for _, u := range us {
		if u.Benchmark != b || u.DeltaPP == nil {
			continue
		}
		if !ok {
			lo, hi, ok = *u.DeltaPP, *u.DeltaPP, true
			continue
		}
		lo, hi = min(lo, *u.DeltaPP), max(hi, *u.DeltaPP)
	}
	return lo, hi, ok
}

// termSafe writes what it is given with every control character but '\n'
// and '\t' (C0, DEL, C1: ESC starts a terminal's escape sequences) as a Go
// escape (\x1b, \u009b), so text from events cannot move the cursor, recolour
// or retitle the terminal. Each Write must hold whole runes (one formatted
// string, one tabwriter cell).
type termSafe struct{ w io.Writer }

func (t *termSafe) Write(p []byte) (int, error) {
	clean := true
	for _, c := range string(p) {
		if isTermControl(c) {
			clean = false
			break
		}
	}
	if clean {
		return t.w.Write(p)
	}
	var b strings.Builder
	for _, c := range string(p) {
		if isTermControl(c) {
			q := strconv.QuoteRune(c)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(c)
	}
	if _, err := io.WriteString(t.w, b.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}

func isTermControl(c rune) bool {
	return (c < 0x20 && c != '\n' && c != '\t') || (c >= 0x7f && c <= 0x9f)
}
