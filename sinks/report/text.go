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
			lo, hi, n := spread(r.UpdateGain, b)
			switch {
			case n >= 2:
				fmt.Fprintf(bw, "%s: Δupdate spread (best − worst evolver) %.1f pp over %d evolvers\n", b, hi-lo, n)
			case n == 1:
				fmt.Fprintf(bw, "%s: Δupdate spread undefined (one evolver with a defined Δupdate; a spread needs two)\n", b)
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

	section("Rounds: size and minimum detectable effect (MDE) of a round's paired test")
	{
		var rows [][]string
		for _, g := range roundSizes(r.Rounds) {
			rows = append(rows, []string{g.Benchmark, evolverName(g.Evolver), g.span(), fmt.Sprint(g.NTasks), fmtF(g.MDE, "%.1f")})
		}
		if len(rows) == 0 {
			fmt.Fprintln(bw, "no round metrics yet")
		} else {
			table("benchmark\tevolver\trounds\tn tasks\tMDE pp", rows)
			fmt.Fprintln(bw, mdeNote)
		}
	}

	section("Labels")
	fmt.Fprintf(bw, "updates %d: positive %d, negative %d, neutral %d; effective-update rate %s; mean gain of positive updates %s pp\n",
		r.Updates, r.Positive, r.Negative, r.Neutral, fmtF(r.EffectiveUpdateRate, "%.2f"), fmtF(r.MeanGain, "%+.1f"))

	section("Critic learning curve (critic_evals, every trainer in the database)")
	switch {
	case r.CriticNote != "":
		fmt.Fprintln(bw, r.CriticNote)
	case len(r.Critic) == 0:
		fmt.Fprintln(bw, "no checkpoint evaluated yet (critic_evals is empty)")
	}
	for _, c := range r.Critic {
		fmt.Fprintf(bw, "trainer %s, checkpoints evaluated: %d\n", c.Trainer, len(c.Points))
		pts := c.Points
		if len(pts) > textCriticPoints {
			fmt.Fprintf(bw, "(the %d earlier checkpoints are in the HTML report)\n", len(pts)-textCriticPoints)
			pts = pts[len(pts)-textCriticPoints:]
		}
		var rows [][]string
		for _, p := range pts {
			row := []string{fmt.Sprint(p.SamplesTrained), fmt.Sprintf("%d/%d", p.HeldoutRows, p.HeldoutGroups), p.ModelVersion}
			for _, m := range []string{"rmse", "spearman"} {
				row = append(row, criticCells(p.Comparison(m), false)...)
			}
			rows = append(rows, append(row, p.Verdict))
		}
		table("samples\theld-out rows/groups\tcheckpoint\tRMSE model\tbest baseline\tΔ\tρ model\tbest baseline\tΔ\tverdict", rows)
		fmt.Fprintln(bw, c.Verdict())
	}
	if len(r.Critic) > 0 {
		fmt.Fprintln(bw, criticNote)
	}
	return buf.Flush()
}

// textCriticPoints is the most checkpoints per trainer the terminal report
// lists (the newest); the HTML report lists them all.
const textCriticPoints = 20

// criticNote explains the learning curve's columns.
const criticNote = "RMSE of the predicted effect (lower is better) and Spearman ρ with the realised effect (higher is better) on the held-out groups, " +
	"95% bootstrap intervals in brackets (the baselines' in the HTML report); best baseline = the trivial baseline with the best value at that checkpoint; " +
	"Δ = model − best baseline, with the trainer's paired 95% bootstrap interval of the difference in brackets, which the verdict rests on " +
	"(critic_eval_diffs; no brackets where none is stored, e.g. evaluations written before migration 0006)."

// mdeNote says how the MDE is computed and which sd it assumes.
var mdeNote = fmt.Sprintf("MDE = the smallest mean lift a paired test of one cell's round (n tasks against the baseline's) detects at two-sided α 0.05 with power 0.8: "+
	"(%.2f + %.2f)·sd/√n, with sd = %g, the worst case for the difference of two scores in [0, 1] (round_metrics holds no per-task sd); "+
	"n = the fewest tasks among the round's cells. An MDE above 100 pp means no effect of a round can be detected.", zAlpha, zPower, MDESD)

// criticCells renders a comparison as model [ci], best baseline (with its
// [ci] when baselineCI), Δ (with its paired [ci] when stored).
func criticCells(c *CriticComparison, baselineCI bool) []string {
	if c == nil {
		return []string{"—", "—", "—"}
	}
	best := fmt.Sprintf("%s %.4f", c.Baseline, c.Best.Value)
	if baselineCI {
		best = c.Baseline + " " + c.Best.String()
	}
	return []string{c.Model.String(), best, diffCell(c)}
}

// diffCell renders c's difference with its sign, followed by its paired
// interval as "[low, high]" when one is stored: "−0.0500 [−0.0700, −0.0300]".
func diffCell(c *CriticComparison) string {
	if c.DiffLow == nil && c.DiffHigh == nil {
		return signed(c.Diff)
	}
	bound := func(p *float64) string {
		if p == nil {
			return "—"
		}
		return signed(*p)
	}
	return fmt.Sprintf("%s [%s, %s]", signed(c.Diff), bound(c.DiffLow), bound(c.DiffHigh))
}

// signed renders a difference with its sign, minus as U+2212: whether a
// negative Δ is good depends on the metric, so the HTML table does not
// colour it as a loss.
func signed(d float64) string {
	return strings.Replace(fmt.Sprintf("%+.4f", d), "-", "−", 1)
}

// String renders v as "value [low, high]".
func (v CriticValue) String() string {
	return fmt.Sprintf("%.4f [%s, %s]", v.Value, fmtF(v.Low, "%.4f"), fmtF(v.High, "%.4f"))
}

// Verdict is the curve's conclusion in words: the newest checkpoint's
// verdict, and with "no signal yet" the reason.
func (c *CriticCurve) Verdict() string {
	if len(c.Points) == 0 {
		return "no checkpoint evaluated yet"
	}
	p := c.Points[len(c.Points)-1]
	if c.NoSignal == "" {
		var ahead []string
		for _, m := range p.Comparisons {
			ahead = append(ahead, fmt.Sprintf("%s on %s (Δ %s)", m.Baseline, m.Metric, signed(m.Diff)))
		}
		return fmt.Sprintf("newest checkpoint %s (%d samples trained): %s: ahead of %s, every paired interval clear of 0",
			p.ModelVersion, p.SamplesTrained, VerdictBeats, strings.Join(ahead, ", "))
	}
	return fmt.Sprintf("newest checkpoint %s (%d samples trained): %s: %s", p.ModelVersion, p.SamplesTrained, VerdictNoSignal, c.NoSignal)
}

// RoundSize is the rounds of one evolver on one benchmark that share a
// round size n, with the MDE at n.
type RoundSize struct {
	Benchmark, Evolver string
	NTasks             int64
	// Rounds counts the rounds; First and Last are the lowest and highest.
	Rounds      int
	First, Last int64
	MDE         *float64
}

func (g RoundSize) span() string {
	if g.First == g.Last {
		return fmt.Sprintf("%d", g.First)
	}
	return fmt.Sprintf("%d–%d (%d)", g.First, g.Last, g.Rounds)
}

// roundSizes groups rounds by (benchmark, evolver, n), in the rounds' order.
func roundSizes(rounds []RoundPoint) []RoundSize {
	type key struct {
		b, e string
		n    int64
	}
	idx := map[key]int{}
	var out []RoundSize
	for _, p := range rounds {
		k := key{p.Benchmark, p.Evolver, p.NTasks}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, RoundSize{Benchmark: p.Benchmark, Evolver: p.Evolver, NTasks: p.NTasks, First: p.Cycle, Last: p.Cycle, MDE: p.MDE})
		}
		g := &out[i]
		g.Rounds++
		g.First, g.Last = min(g.First, p.Cycle), max(g.Last, p.Cycle)
	}
	return out
}

// spread returns the min and max Δupdate over the evolvers of benchmark b
// whose Δupdate is defined, and how many there are (a spread needs two).
func spread(us []UpdateGain, b string) (lo, hi float64, n int) {
	for _, u := range us {
		if u.Benchmark != b || u.DeltaPP == nil {
			continue
		}
		if n == 0 {
			lo, hi = *u.DeltaPP, *u.DeltaPP
		}
		lo, hi = min(lo, *u.DeltaPP), max(hi, *u.DeltaPP)
		n++
	}
	return lo, hi, n
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
