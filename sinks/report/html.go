package report

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// palette colours series in the line charts.
var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"}

const css = `body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}h3{font-size:15px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f4f4f4}td.l,th.l{text-align:left}.neg{color:#b00}.pos{color:#070}
.charts{display:flex;flex-wrap:wrap;gap:24px}svg{background:#fff}svg text{font-size:11px;fill:#333}`

// WriteHTML writes one self-contained HTML page (inline CSS and SVG, no
// scripts, fonts or external references) with the report's tables and
// charts: heatmaps of the pass-rate and gain matrices, per-round lines with
// stddev bands, and adherence by phase.
func (r *Report) WriteHTML(w io.Writer) error {
	bw := bufio.NewWriter(w)
	e := html.EscapeString
	fmt.Fprintf(bw, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>harnessflow report: %s</title><style>%s</style></head><body>\n", e(r.Campaign), css)
	fmt.Fprintf(bw, "<h1>harnessflow report: campaign %s</h1>\n<p>%d cells; benchmarks %s.</p>\n", e(r.Campaign), len(r.Cells), e(strings.Join(r.Benchmarks, ", ")))

	fmt.Fprintln(bw, "<h2>Cross-evaluation matrices</h2><div class=\"charts\">")
	for _, m := range r.Matrices {
		heatmap(bw, "Pass rate (%) — "+m.Benchmark, m, m.Pass, false)
		heatmap(bw, "Gain over baseline (pp) — "+m.Benchmark, m, m.Delta, true)
	}
	fmt.Fprintln(bw, "</div>")

	fmt.Fprintln(bw, "<h2>Per-round pass rate by evolver (mean ± stddev over cells)</h2><div class=\"charts\">")
	for _, b := range r.Benchmarks {
		roundChart(bw, r, b)
	}
	fmt.Fprintln(bw, "</div>")

	fmt.Fprintln(bw, "<h3>Round size and minimum detectable effect</h3>")
	if sizes := roundSizes(r.Rounds); len(sizes) > 0 {
		rows := [][]string{}
		for _, g := range sizes {
			rows = append(rows, []string{g.Benchmark, evolverName(g.Evolver), g.span(), fmt.Sprint(g.NTasks), fmtF(g.MDE, "%.1f")})
		}
		htmlTable(bw, []string{"benchmark", "evolver", "rounds", "n tasks", "MDE pp"}, rows)
		fmt.Fprintf(bw, "<p>%s</p>\n", e(mdeNote))
	} else {
		fmt.Fprintln(bw, "<p>No round metrics yet.</p>")
	}

	fmt.Fprintln(bw, "<h2>Adherence by phase</h2><div class=\"charts\">")
	for _, b := range r.Benchmarks {
		adherenceChart(bw, r, b)
	}
	fmt.Fprintln(bw, "</div>")

	fmt.Fprintln(bw, "<h2>Δupdate per evolver (pp)</h2>")
	var rows [][]string
	for _, u := range r.UpdateGain {
		rows = append(rows, []string{u.Benchmark, u.Evolver, fmtF(u.DeltaPP, "%+.1f"), fmt.Sprint(u.NAnchorAgents), fmt.Sprint(u.Seeds)})
	}
	htmlTable(bw, []string{"benchmark", "evolver", "Δupdate", "anchors", "seeds"}, rows)

	fmt.Fprintln(bw, "<h2>Δbenefit per agent (pp)</h2>")
	rows = nil
	for _, b := range r.BenefitGain {
		rows = append(rows, []string{b.Benchmark, b.Agent, fmtF(b.DeltaPP, "%+.1f"), b.BestEvolver, fmtF(b.MeanDeltaPP, "%+.1f"), fmt.Sprint(b.CellsBelowBaseline)})
	}
	htmlTable(bw, []string{"benchmark", "agent", "Δbenefit (max)", "best evolver", "mean Δ", "cells below base"}, rows)

	fmt.Fprintln(bw, "<h2>Skill activation</h2>")
	rows = nil
	for _, a := range r.Activation {
		rows = append(rows, []string{a.Benchmark, a.Agent, fmt.Sprint(a.Attempts), fmtF(a.SLR, "%.2f"), fmtF(a.LPR, "%.1f"), fmtF(a.HFR, "%.2f"), fmtF(a.LoadSuccessRate, "%.2f")})
	}
	htmlTable(bw, []string{"benchmark", "agent", "attempts", "SLR", "LPR %", "HFR", "load success"}, rows)

	fmt.Fprintln(bw, "<h2>Adherence drift and decay</h2>")
	rows = nil
	for _, a := range r.Adherence {
		row := []string{a.Benchmark, a.Agent}
		for _, p := range a.Phase {
			row = append(row, fmtF(p, "%.2f"))
		}
		rows = append(rows, append(row, fmtF(a.Drift, "%+.2f"), fmtF(a.Decay, "%.2f")))
	}
	htmlTable(bw, []string{"benchmark", "agent", "loaded", "first", "mid", "pre-final", "final", "drift", "decay"}, rows)

	fmt.Fprintln(bw, "<h2>Ten least stable pairs</h2>")
	rows = nil
	for _, s := range r.Unstable {
		rows = append(rows, []string{s.Benchmark, s.Agent, s.Evolver, fmt.Sprint(s.Rounds), fmtF(s.MeanLift, "%+.1f"), fmtF(s.StddevLift, "%.1f"),
			fmtF(s.CV, "%.2f"), fmt.Sprintf("%.2f", s.FlipRate), fmtF(s.StabilityScore, "%+.1f")})
	}
	htmlTable(bw, []string{"benchmark", "agent", "evolver", "rounds", "mean lift", "stddev", "CV", "flip rate", "stability"}, rows)

	fmt.Fprintf(bw, "<h2>Labels</h2>\n<p>updates %d: positive %d, negative %d, neutral %d; effective-update rate %s; mean gain of positive updates %s pp.</p>\n",
		r.Updates, r.Positive, r.Negative, r.Neutral, fmtF(r.EffectiveUpdateRate, "%.2f"), fmtF(r.MeanGain, "%+.1f"))
	writeCriticHTML(bw, r)
	fmt.Fprintln(bw, "</body></html>")
	return bw.Flush()
}

func htmlTable(w io.Writer, head []string, rows [][]string) {
	fmt.Fprint(w, "<table><tr>")
	for i, h := range head {
		cls := ""
		if i < 2 {
			cls = " class=\"l\""
		}
		fmt.Fprintf(w, "<th%s>%s</th>", cls, html.EscapeString(h))
	}
	fmt.Fprintln(w, "</tr>")
	for _, row := range rows {
		fmt.Fprint(w, "<tr>")
		for i, c := range row {
			cls := ""
			switch {
			case i < 2:
				cls = " class=\"l\""
			case strings.HasPrefix(c, "-") && len(c) > 1:
				cls = " class=\"neg\""
			}
			fmt.Fprintf(w, "<td%s>%s</td>", cls, html.EscapeString(c))
		}
		fmt.Fprintln(w, "</tr>")
	}
	fmt.Fprintln(w, "</table>")
}

// heatColor maps a value to a fill: pass rates white→blue over [0,100];
// gains red (negative) → white → green (positive) over ±maxAbs.
func heatColor(v float64, diverging bool, maxAbs float64) string {
	mix := func(t float64, r, g, b int) string {
		t = math.Max(0, math.Min(1, t))
		return fmt.Sprintf("rgb(%d,%d,%d)", int(255+(float64(r)-255)*t), int(255+(float64(g)-255)*t), int(255+(float64(b)-255)*t))
	}
	if !diverging {
		return mix(v/100, 31, 90, 180)
	}
	if maxAbs == 0 {
		maxAbs = 1
	}
	if v < 0 {
		return mix(-v/maxAbs, 200, 40, 40)
	}
	return mix(v/maxAbs, 40, 160, 60)
}

func heatmap(w io.Writer, title string, m Matrix, vals [][]*float64, diverging bool) {
	const cw, ch, left, top = 64, 24, 90, 50
	width := left + cw*len(m.Evolvers) + 10
	height := top + ch*len(m.Agents) + 10
	maxAbs := 0.0
	for _, row := range vals {
		for _, v := range row {
			if v != nil {
				maxAbs = math.Max(maxAbs, math.Abs(*v))
			}
		}
	}
	fmt.Fprintf(w, "<figure><figcaption>%s</figcaption><svg width=\"%d\" height=\"%d\" role=\"img\">\n", html.EscapeString(title), width, height)
	for j, e := range m.Evolvers {
		fmt.Fprintf(w, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", left+cw*j+cw/2, top-8, html.EscapeString(evolverName(e)))
	}
	for i, a := range m.Agents {
		y := top + ch*i
		fmt.Fprintf(w, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>\n", left-6, y+ch/2+4, html.EscapeString(a))
		for j := range m.Evolvers {
			x := left + cw*j
			v := vals[i][j]
			fill, label := "#eeeeee", "—"
			if v != nil {
				fill = heatColor(*v, diverging, maxAbs)
				label = fmt.Sprintf("%.1f", *v)
				if diverging {
					label = fmt.Sprintf("%+.1f", *v)
				}
			}
			fmt.Fprintf(w, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\" stroke=\"#fff\"/><text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
				x, y, cw, ch, fill, x+cw/2, y+ch/2+4, label)
		}
	}
	fmt.Fprintln(w, "</svg></figure>")
}

// chart frames a line chart: x over [x0,x1], y over [y0,y1].
type chart struct {
	w, h, left, right, top, bottom float64
	x0, x1, y0, y1                 float64
}

func (c chart) X(v float64) float64 {
	if c.x1 == c.x0 {
		return c.left + (c.w-c.left-c.right)/2
	}
	return c.left + (v-c.x0)/(c.x1-c.x0)*(c.w-c.left-c.right)
}
func (c chart) Y(v float64) float64 {
	return c.h - c.bottom - (v-c.y0)/(c.y1-c.y0)*(c.h-c.top-c.bottom)
}

func (c chart) axes(w io.Writer, title, xlabel string, yticks []float64, xticks []float64, xnames []string) {
	fmt.Fprintf(w, "<figure><figcaption>%s</figcaption><svg width=\"%.0f\" height=\"%.0f\" role=\"img\">\n", html.EscapeString(title), c.w, c.h)
	for _, t := range yticks {
		fmt.Fprintf(w, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/><text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
			c.left, c.w-c.right, c.Y(t), c.Y(t), c.left-4, c.Y(t)+4, t)
	}
	for i, t := range xticks {
		fmt.Fprintf(w, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", c.X(t), c.h-c.bottom+14, html.EscapeString(xnames[i]))
	}
	fmt.Fprintf(w, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/><line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n",
		c.left, c.w-c.right, c.h-c.bottom, c.h-c.bottom, c.left, c.left, c.top, c.h-c.bottom)
	fmt.Fprintf(w, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", (c.left+c.w-c.right)/2, c.h-4, html.EscapeString(xlabel))
}

func legend(w io.Writer, c chart, names []string) {
	for i, n := range names {
		y := c.top + float64(i)*14
		fmt.Fprintf(w, "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
			c.w-c.right+8, y, palette[i%len(palette)], c.w-c.right+22, y+9, html.EscapeString(n))
	}
}

func roundChart(w io.Writer, r *Report, bench string) {
	series := map[string][]RoundPoint{}
	var names []string
	x0, x1 := math.Inf(1), math.Inf(-1)
	for _, p := range r.Rounds {
		if p.Benchmark != bench {
			continue
		}
		name := evolverName(p.Evolver)
		if _, ok := series[name]; !ok {
			names = append(names, name)
		}
		series[name] = append(series[name], p)
		x0, x1 = math.Min(x0, float64(p.Cycle)), math.Max(x1, float64(p.Cycle))
	}
	if len(names) == 0 {
		fmt.Fprintf(w, "<p>%s: no round metrics yet.</p>\n", html.EscapeString(bench))
		return
	}
	c := chart{w: 520, h: 300, left: 44, right: 110, top: 16, bottom: 36, x0: x0, x1: x1, y0: 0, y1: 100}
	var xt []float64
	var xn []string
	for x := x0; x <= x1; x++ {
		xt = append(xt, x)
		xn = append(xn, fmt.Sprint(int(x)))
	}
	c.axes(w, "Pass rate per round — "+bench, "round", []float64{0, 25, 50, 75, 100}, xt, xn)
	for i, n := range names {
		col := palette[i%len(palette)]
		pts := series[n]
		// The stddev band: upper edge forward, lower edge back.
		var band []string
		for _, p := range pts {
			sd := 0.0
			if p.Stddev != nil {
				sd = *p.Stddev
			}
			band = append(band, fmt.Sprintf("%.1f,%.1f", c.X(float64(p.Cycle)), c.Y(math.Min(100, p.PassRate+sd))))
		}
		for k := len(pts) - 1; k >= 0; k-- {
			p := pts[k]
			sd := 0.0
			if p.Stddev != nil {
				sd = *p.Stddev
			}
			band = append(band, fmt.Sprintf("%.1f,%.1f", c.X(float64(p.Cycle)), c.Y(math.Max(0, p.PassRate-sd))))
		}
		fmt.Fprintf(w, "<polygon points=\"%s\" fill=\"%s\" fill-opacity=\"0.12\" stroke=\"none\"/>\n", strings.Join(band, " "), col)
		var line []string
		for _, p := range pts {
			line = append(line, fmt.Sprintf("%.1f,%.1f", c.X(float64(p.Cycle)), c.Y(p.PassRate)))
		}
		fmt.Fprintf(w, "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"/>\n", strings.Join(line, " "), col)
		for _, p := range pts {
			fmt.Fprintf(w, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n", c.X(float64(p.Cycle)), c.Y(p.PassRate), col)
		}
	}
	legend(w, c, names)
	fmt.Fprintln(w, "</svg></figure>")
}

func adherenceChart(w io.Writer, r *Report, bench string) {
	var rows []Adherence
	for _, a := range r.Adherence {
		if a.Benchmark == bench {
			rows = append(rows, a)
		}
	}
	if len(rows) == 0 {
		fmt.Fprintf(w, "<p>%s: no adherence judgments.</p>\n", html.EscapeString(bench))
		return
	}
	c := chart{w: 520, h: 300, left: 44, right: 110, top: 16, bottom: 36, x0: 0, x1: 4, y0: 0, y1: 1}
	c.axes(w, "Adherence by phase — "+bench, "phase", []float64{0, 0.25, 0.5, 0.75, 1}, []float64{0, 1, 2, 3, 4},
		[]string{"loaded", "first", "mid", "pre-final", "final"})
	var names []string
	for i, a := range rows {
		names = append(names, a.Agent)
		col := palette[i%len(palette)]
		var line []string
		for k, p := range a.Phase {
			if p != nil {
				line = append(line, fmt.Sprintf("%.1f,%.1f", c.X(float64(k)), c.Y(*p)))
			}
		}
		fmt.Fprintf(w, "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"/>\n", strings.Join(line, " "), col)
	}
	legend(w, c, names)
	fmt.Fprintln(w, "</svg></figure>")
}

// writeCriticHTML writes the critic's learning curves: per trainer, RMSE
// and ρ against samples trained (the model with its intervals beside the
// best baseline), a table of every evaluated checkpoint, and the verdict.
func writeCriticHTML(w io.Writer, r *Report) {
	e := html.EscapeString
	fmt.Fprintln(w, "<h2>Critic learning curve (critic_evals, every trainer in the database)</h2>")
	switch {
	case r.CriticNote != "":
		fmt.Fprintf(w, "<p>%s</p>\n", e(r.CriticNote))
		return
	case len(r.Critic) == 0:
		fmt.Fprintln(w, "<p>No checkpoint evaluated yet (critic_evals is empty).</p>")
		return
	}
	for _, c := range r.Critic {
		fmt.Fprintf(w, "<h3>Trainer %s</h3><div class=\"charts\">\n", e(c.Trainer))
		criticChart(w, c, "rmse", "Effect RMSE (lower is better) — "+c.Trainer)
		criticChart(w, c, "spearman", "Spearman ρ (higher is better) — "+c.Trainer)
		fmt.Fprintln(w, "</div>")
		var rows [][]string
		for _, p := range c.Points {
			row := []string{fmt.Sprint(p.SamplesTrained), p.ModelVersion, fmt.Sprint(p.Step), fmt.Sprintf("%d/%d", p.HeldoutRows, p.HeldoutGroups)}
			for _, m := range []string{"rmse", "spearman"} {
				row = append(row, criticCells(p.Comparison(m), true)...)
			}
			rows = append(rows, append(row, p.Verdict))
		}
		htmlTable(w, []string{"samples", "checkpoint", "step", "held-out rows/groups", "RMSE model", "best baseline", "Δ", "ρ model", "best baseline", "Δ", "verdict"}, rows)
		cls := "pos"
		if c.NoSignal != "" {
			cls = "neg"
		}
		fmt.Fprintf(w, "<p class=\"%s\"><b>%s</b></p>\n", cls, e(c.Verdict()))
	}
	fmt.Fprintf(w, "<p>%s</p>\n", e(criticNote))
}

// criticChart draws metric against samples trained: the model's value with
// its interval as whiskers, and the best baseline's value.
func criticChart(w io.Writer, c CriticCurve, metric, title string) {
	type pt struct {
		x           float64
		model, best CriticValue
	}
	var pts []pt
	x0, x1, y0, y1 := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	see := func(v float64) { y0, y1 = math.Min(y0, v), math.Max(y1, v) }
	for _, p := range c.Points {
		cm := p.Comparison(metric)
		if cm == nil {
			continue
		}
		x := float64(p.SamplesTrained)
		pts = append(pts, pt{x, cm.Model, cm.Best})
		x0, x1 = math.Min(x0, x), math.Max(x1, x)
		see(cm.Model.Value)
		see(cm.Best.Value)
		for _, b := range []*float64{cm.Model.Low, cm.Model.High} {
			if b != nil {
				see(*b)
			}
		}
	}
	if len(pts) == 0 {
		fmt.Fprintf(w, "<p>%s: no %s values.</p>\n", html.EscapeString(c.Trainer), html.EscapeString(metric))
		return
	}
	if y1-y0 < 1e-9 {
		y0, y1 = y0-0.5, y1+0.5
	}
	pad := (y1 - y0) * 0.05
	ch := chart{w: 520, h: 300, left: 54, right: 110, top: 16, bottom: 36, x0: x0, x1: x1, y0: y0 - pad, y1: y1 + pad}
	var yt []float64
	for i := 0; i <= 4; i++ {
		v := ch.y0 + float64(i)*(ch.y1-ch.y0)/4
		yt = append(yt, math.Round(v*1000)/1000)
	}
	var xt []float64
	var xn []string
	step := max(1, (len(pts)+4)/5)
	for i := 0; i < len(pts); i += step {
		xt = append(xt, pts[i].x)
		xn = append(xn, fmt.Sprint(int64(pts[i].x)))
	}
	ch.axes(w, title, "samples trained", yt, xt, xn)
	var model, best []string
	for _, p := range pts {
		model = append(model, fmt.Sprintf("%.1f,%.1f", ch.X(p.x), ch.Y(p.model.Value)))
		best = append(best, fmt.Sprintf("%.1f,%.1f", ch.X(p.x), ch.Y(p.best.Value)))
		if p.model.Low != nil && p.model.High != nil {
			fmt.Fprintf(w, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-opacity=\"0.5\"/>\n",
				ch.X(p.x), ch.X(p.x), ch.Y(*p.model.Low), ch.Y(*p.model.High), palette[0])
		}
	}
	fmt.Fprintf(w, "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\" stroke-dasharray=\"5,3\"/>\n", strings.Join(best, " "), palette[1])
	fmt.Fprintf(w, "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"/>\n", strings.Join(model, " "), palette[0])
	for _, p := range pts {
		fmt.Fprintf(w, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n", ch.X(p.x), ch.Y(p.model.Value), palette[0])
	}
	legend(w, ch, []string{"model (95% CI)", "best baseline"})
	fmt.Fprintln(w, "</svg></figure>")
}
