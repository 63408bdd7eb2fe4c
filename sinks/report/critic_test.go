package report

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// evals is one evaluation of a checkpoint as the trainer writes it to
// critic_evals: every (predictor, metric) value with its interval, one
// verdict, one evaluated_at.
type evals struct {
	trainer, version string
	samples          uint64
	rows, groups     uint32
	verdict          string
	at               time.Time
	// vals maps "predictor/metric" to value, low, high.
	vals map[string][3]float64
	// diffs maps "metric/baseline" to the paired difference, low, high:
	// the evaluation's critic_eval_diffs rows.
	diffs map[string][3]float64
}

func (e evals) insert(t *testing.T, conn driver.Conn) {
	t.Helper()
	var rows [][]any
	for pm, v := range e.vals {
		pred, metric, _ := strings.Cut(pm, "/")
		rows = append(rows, []any{e.trainer, e.version, "sha-" + e.version, e.samples / 10, e.samples, e.rows, e.groups,
			pred, metric, v[0], v[1], v[2], e.verdict, e.at})
	}
	insert(t, conn, "critic_evals", []string{"trainer", "model_version", "checkpoint_sha256", "step", "samples_trained",
		"heldout_rows", "heldout_groups", "predictor", "metric", "value", "ci_low", "ci_high", "verdict", "evaluated_at"}, rows)
	rows = nil
	for mb, d := range e.diffs {
		metric, baseline, _ := strings.Cut(mb, "/")
		rows = append(rows, []any{e.trainer, e.version, "sha-" + e.version, e.samples / 10, e.samples, e.rows, e.groups,
			metric, baseline, d[0], d[1], d[2], e.verdict, e.verdict, e.at})
	}
	insert(t, conn, "critic_eval_diffs", []string{"trainer", "model_version", "checkpoint_sha256", "step", "samples_trained",
		"heldout_rows", "heldout_groups", "metric", "baseline", "diff", "ci_low", "ci_high", "verdict", "checkpoint_verdict", "evaluated_at"}, rows)
}

// iv is a value with an interval ±0.01 around it.
func iv(v float64) [3]float64 { return [3]float64{v, v - 0.01, v + 0.01} }

// TestCriticLearningCurve: critic_evals rows of three trainers become one
// curve each, ordered by samples trained, with the model beside the best
// baseline per metric, and the newest checkpoint's verdict in words: "beats
// baselines" for t-good; "no signal yet" for t-flat naming the baselines it
// does not beat (median on RMSE, evidence-regression on ρ, majority-label
// on macro-F1), with a stale row
// of an older evaluation of the same checkpoint ignored; "no signal yet"
// for t-few, ahead on every metric but with too few held-out groups. The
// critic_eval_diffs rows give a comparison its paired interval when they
// are of the same evaluation and name the same best baseline; without the
// table (a schema from before 0006) the report shows the differences alone.
func TestCriticLearningCurve(t *testing.T) {
	conn, _, _ := fixture(t)
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	good := func(version string, samples uint64, verdict string) evals {
		rmse := map[string]float64{"g1": 0.20, "g2": 0.15, "g3": 0.12}[version]
		rho := map[string]float64{"g1": 0.10, "g2": 0.30, "g3": 0.45}[version]
		return evals{trainer: "t-good", version: version, samples: samples, rows: 240, groups: 12, verdict: verdict, at: t0.Add(time.Duration(samples) * time.Second),
			vals: map[string][3]float64{
				"model/rmse": iv(rmse), "model/spearman": iv(rho), "model/nll": iv(-1), "model/macro_f1": iv(0.6), "model/cover_1sigma": iv(0.68),
				"median/rmse": iv(0.18), "median/spearman": iv(0), "median/nll": iv(-0.5),
				"majority-label/macro_f1": iv(0.33),
				"cell-mean/rmse":          iv(0.17), "cell-mean/spearman": iv(0.2), "cell-mean/nll": iv(-0.6), "cell-mean/macro_f1": iv(0.4),
				"evidence-regression/rmse": iv(0.175), "evidence-regression/spearman": iv(0.19), "evidence-regression/nll": iv(-0.55),
			}}
	}
	// g3's paired intervals; g2's name a best baseline other than the
	// report's on ρ (median, not cell-mean: no interval shown there); g1
	// has none (written before 0006).
	g3 := good("g3", 300, VerdictBeats)
	g3.diffs = map[string][3]float64{"rmse/cell-mean": {-0.05, -0.07, -0.03}, "spearman/cell-mean": {0.25, 0.1, 0.4}}
	g2 := good("g2", 200, VerdictNoSignal)
	g2.diffs = map[string][3]float64{"rmse/cell-mean": {-0.02, -0.05, 0.01}, "spearman/median": {0.3, -0.01, 0.6}}
	// Written out of order, the newest twice (a redelivered write).
	for _, e := range []evals{g3, good("g1", 100, VerdictNoSignal), g2, g3} {
		e.insert(t, conn)
	}
	flat := func(version string, samples uint64, at time.Time) evals {
		return evals{trainer: "t-flat", version: version, samples: samples, rows: 378, groups: 14, verdict: VerdictNoSignal, at: at,
			vals: map[string][3]float64{
				"model/rmse": iv(0.184), "model/spearman": iv(0.19), "model/nll": iv(-0.7), "model/macro_f1": iv(0.33),
				"median/rmse": iv(0.178), "median/spearman": iv(0), "median/nll": iv(-0.5),
				"majority-label/macro_f1": iv(0.33),
				"cell-mean/rmse":          iv(0.181), "cell-mean/spearman": iv(0.1), "cell-mean/nll": iv(-0.4), "cell-mean/macro_f1": iv(0.3),
				"evidence-regression/rmse": iv(0.19), "evidence-regression/spearman": iv(0.19), "evidence-regression/nll": iv(-0.45),
			}}
	}
	flat("f1", 378, t0).insert(t, conn)
	// f2 was evaluated twice: the older evaluation had an evidence-regression
	// RMSE of 0.10 that the newer one did not write; it must not count.
	stale := flat("f2", 756, t0.Add(time.Hour))
	stale.vals = map[string][3]float64{"model/rmse": iv(0.5), "evidence-regression/rmse": iv(0.10)}
	// ... and a paired interval against median, which the newer evaluation
	// did not write: it must not be shown beside the newer values.
	stale.diffs = map[string][3]float64{"rmse/median": {0.006, -0.01, 0.02}}
	stale.insert(t, conn)
	newer := flat("f2", 756, t0.Add(2*time.Hour))
	delete(newer.vals, "evidence-regression/rmse")
	newer.insert(t, conn)
	evals{trainer: "t-few", version: "w1", samples: 50, rows: 40, groups: 4, verdict: VerdictNoSignal, at: t0,
		vals: map[string][3]float64{"model/rmse": iv(0.1), "model/spearman": iv(0.5), "median/rmse": iv(0.2), "median/spearman": iv(0)}}.insert(t, conn)

	r, err := Build(ctx, conn, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Critic) != 3 || r.Critic[0].Trainer != "t-few" || r.Critic[1].Trainer != "t-flat" || r.Critic[2].Trainer != "t-good" {
		t.Fatalf("curves %+v, want t-few, t-flat, t-good", r.Critic)
	}
	g := r.Critic[2]
	var got []string
	for _, p := range g.Points {
		rm, sp := p.Comparison("rmse"), p.Comparison("spearman")
		got = append(got, fmt.Sprintf("%s %d %d/%d %.2f-%s:%.3f %.2f-%s:%.2f %s", p.ModelVersion, p.SamplesTrained, p.HeldoutRows, p.HeldoutGroups,
			rm.Model.Value, rm.Baseline, rm.Best.Value, sp.Model.Value, sp.Baseline, sp.Best.Value, p.Verdict))
	}
	want := []string{
		"g1 100 240/12 0.20-cell-mean:0.170 0.10-cell-mean:0.20 no signal yet",
		"g2 200 240/12 0.15-cell-mean:0.170 0.30-cell-mean:0.20 no signal yet",
		"g3 300 240/12 0.12-cell-mean:0.170 0.45-cell-mean:0.20 beats baselines",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("t-good's curve:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if c := g.Points[2].Comparison("rmse"); !eq(&c.Diff, f64(-0.05)) || !c.Ahead || !eq(c.Model.Low, f64(0.11)) || !eq(c.Best.High, f64(0.18)) ||
		!eq(c.DiffLow, f64(-0.07)) || !eq(c.DiffHigh, f64(-0.03)) {
		t.Fatalf("g3's RMSE comparison %+v", c)
	}
	// The paired intervals: g3's both, g2's on RMSE only (its ρ row names
	// another baseline), none for g1 and for t-flat's f2 (its diff row is
	// of an older evaluation).
	for _, c := range []struct {
		curve, point int
		metric       string
		low, high    *float64
	}{
		{2, 2, "spearman", f64(0.1), f64(0.4)}, {2, 1, "rmse", f64(-0.05), f64(0.01)}, {2, 1, "spearman", nil, nil},
		{2, 0, "rmse", nil, nil}, {2, 0, "spearman", nil, nil}, {1, 1, "rmse", nil, nil}, {0, 0, "rmse", nil, nil},
	} {
		p := r.Critic[c.curve].Points[c.point]
		cm := p.Comparison(c.metric)
		if cm == nil {
			t.Fatalf("%s: no %s comparison", p.ModelVersion, c.metric)
		}
		if !eq(cm.DiffLow, c.low) || !eq(cm.DiffHigh, c.high) {
			t.Errorf("%s %s against %s: paired interval [%s, %s], want [%s, %s]", p.ModelVersion, c.metric, cm.Baseline,
				fmtF(cm.DiffLow, "%g"), fmtF(cm.DiffHigh, "%g"), fmtF(c.low, "%g"), fmtF(c.high, "%g"))
		}
	}
	if g.NoSignal != "" {
		t.Fatalf("t-good beats its baselines at g3, but the report says %q", g.NoSignal)
	}
	f := r.Critic[1]
	if len(f.Points) != 2 || f.Points[1].ModelVersion != "f2" {
		t.Fatalf("t-flat's points %+v", f.Points)
	}
	if c := f.Points[1].Comparison("rmse"); c.Baseline != "median" || !eq(&c.Model.Value, f64(0.184)) || c.Ahead {
		t.Fatalf("f2's RMSE comparison %+v: want the newest evaluation against median (the stale evidence-regression row ignored)", c)
	}
	// ρ ties at 0.19 and macro-F1 at 0.33: a tie is not ahead. NLL is.
	wantWhy := "the model does not beat median on rmse (model 0.1840, median 0.1780), nor evidence-regression on spearman (model 0.1900, evidence-regression 0.1900), " +
		"nor majority-label on macro_f1 (model 0.3300, majority-label 0.3300)"
	if f.NoSignal != wantWhy {
		t.Fatalf("t-flat's reason:\n got %q\nwant %q", f.NoSignal, wantWhy)
	}
	if w := r.Critic[0].NoSignal; !strings.Contains(w, "4 held-out groups are too few") || strings.Contains(w, "does not beat") {
		t.Fatalf("t-few's reason %q", w)
	}

	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	s := text.String()
	_, curve, _ := strings.Cut(s, "== Critic learning curve")
	for _, want := range []string{
		"newest checkpoint g3 (300 samples trained): beats baselines: ahead of cell-mean on rmse (Δ −0.0500), cell-mean on spearman (Δ +0.2500)",
		"newest checkpoint f2 (756 samples trained): no signal yet: " + wantWhy,
		"newest checkpoint w1 (50 samples trained): no signal yet: 4 held-out groups are too few",
		"paired 95% bootstrap interval of the difference in brackets",
	} {
		if !strings.Contains(curve, want) {
			t.Errorf("the learning curve section lacks %q:\n%s", want, curve)
		}
	}
	// The Δ columns (right-aligned): with the paired interval where stored.
	for _, re := range []string{
		`g3\s+0\.1200 \[0\.1100, 0\.1300\]\s+cell-mean 0\.1700\s+−0\.0500 \[−0\.0700, −0\.0300\]\s+0\.4500 \[0\.4400, 0\.4600\]\s+cell-mean 0\.2000\s+\+0\.2500 \[\+0\.1000, \+0\.4000\]\s+beats baselines`,
		`g2\s+0\.1500 \[0\.1400, 0\.1600\]\s+cell-mean 0\.1700\s+−0\.0200 \[−0\.0500, \+0\.0100\]\s+0\.3000 \[0\.2900, 0\.3100\]\s+cell-mean 0\.2000\s+\+0\.1000\s+no signal yet`,
		`g1\s+0\.2000 \[0\.1900, 0\.2100\]\s+cell-mean 0\.1700\s+\+0\.0300\s+0\.1000 \[0\.0900, 0\.1100\]\s+cell-mean 0\.2000\s+−0\.1000\s+no signal yet`,
	} {
		if !regexp.MustCompile(re).MatchString(curve) {
			t.Errorf("the learning curve section lacks %s:\n%s", re, curve)
		}
	}
	// One line per checkpoint, by samples trained.
	lines := regexp.MustCompile(`(?m)^\s*(\d+)\s+240/12\s+(g\d)\s`).FindAllStringSubmatch(curve, -1)
	if len(lines) != 3 || lines[0][2] != "g1" || lines[1][2] != "g2" || lines[2][2] != "g3" {
		t.Errorf("t-good's lines %v, want g1, g2, g3 in order:\n%s", lines, curve)
	}
	var page bytes.Buffer
	if err := r.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	h := page.String()
	if !strings.Contains(h, "Trainer t-good") || !strings.Contains(h, "Effect RMSE (lower is better) — t-flat") ||
		!strings.Contains(h, "no signal yet: the model does not beat median on rmse") || !strings.Contains(h, "<td>cell-mean 0.1700 [0.1600, 0.1800]</td>") || strings.Count(h, "<svg") != 2*2+1+2+3*2 {
		t.Fatalf("HTML learning curves missing: %d charts", strings.Count(h, "<svg"))
	}
	if !strings.Contains(h, "<td>−0.0500 [−0.0700, −0.0300]</td>") || !strings.Contains(h, "<td>+0.1000</td>") {
		t.Errorf("HTML lacks g3's paired interval or g2's bare ρ difference")
	}

	// A database from before migration 0006: the same curves, without
	// intervals.
	if err := conn.Exec(ctx, "DROP TABLE critic_eval_diffs"); err != nil {
		t.Fatal(err)
	}
	old, err := Build(ctx, conn, "", "")
	if err != nil {
		t.Fatalf("report without critic_eval_diffs: %v", err)
	}
	for _, cv := range old.Critic {
		for _, p := range cv.Points {
			for _, c := range p.Comparisons {
				if c.DiffLow != nil || c.DiffHigh != nil {
					t.Errorf("%s %s: paired interval [%v, %v] without critic_eval_diffs", p.ModelVersion, c.Metric, *c.DiffLow, *c.DiffHigh)
				}
			}
		}
	}
	if c := old.Critic[2].Points[2].Comparison("rmse"); old.CriticNote != "" || !eq(&c.Diff, f64(-0.05)) || old.Critic[2].NoSignal != "" || old.Critic[1].NoSignal != wantWhy {
		t.Fatalf("report without critic_eval_diffs: note %q, g3's RMSE %+v", old.CriticNote, c)
	}
	text.Reset()
	page.Reset()
	if err := old.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if err := old.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	if _, curve, _ := strings.Cut(text.String(), "== Critic learning curve"); !regexp.MustCompile(`g3\s+0\.1200 \[0\.1100, 0\.1300\]\s+cell-mean 0\.1700\s+−0\.0500\s+0\.4500`).MatchString(curve) || strings.Contains(curve, "−0.0500 [") {
		t.Errorf("text without critic_eval_diffs:\n%s", curve)
	}
	if h := page.String(); !strings.Contains(h, "<td>−0.0500</td>") || strings.Contains(h, "−0.0500 [") {
		t.Errorf("HTML without critic_eval_diffs shows an interval or lacks g3's difference")
	}
}

// TestCriticEvalsEmptyOrMissing: with no critic_evals rows the report says
// so in one line; without the table (a schema from before 0005) too, and
// the report is still built.
func TestCriticEvalsEmptyOrMissing(t *testing.T) {
	conn, _, _ := fixture(t)
	ctx := context.Background()
	for _, tc := range []struct{ name, drop, text, html string }{
		{"empty", "", "no checkpoint evaluated yet (critic_evals is empty)", "No checkpoint evaluated yet (critic_evals is empty)."},
		{"missing", "DROP TABLE critic_evals", CriticMissing, CriticMissing},
	} {
		if tc.drop != "" {
			if err := conn.Exec(ctx, tc.drop); err != nil {
				t.Fatal(err)
			}
		}
		r, err := Build(ctx, conn, "", "")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(r.Critic) != 0 {
			t.Fatalf("%s: curves %+v", tc.name, r.Critic)
		}
		var text, page bytes.Buffer
		if err := r.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		if err := r.WriteHTML(&page); err != nil {
			t.Fatal(err)
		}
		if _, sec, _ := strings.Cut(text.String(), "== Critic learning curve"); !strings.Contains(sec, tc.text) {
			t.Errorf("%s: text section %q lacks %q", tc.name, sec, tc.text)
		}
		if !strings.Contains(page.String(), tc.html) {
			t.Errorf("%s: HTML lacks %q", tc.name, tc.html)
		}
	}
}

// TestRoundMDE: each round carries the minimum detectable effect of a
// paired test at its n (the fewest tasks among its cells), 280/√n pp with
// the worst-case sd 1: 140 pp at the fixture's 4-task swe rounds, 70 pp for
// an mcp round whose cells have 25 and 16 tasks, 56 pp for one of 25.
func TestRoundMDE(t *testing.T) {
	conn, cfg, _ := fixture(t)
	ctx := context.Background()
	var rm [][]any
	for _, c := range []struct {
		agent string
		cycle int32
		n     int32
	}{{"opus46", 1, 25}, {"qwen235b", 1, 16}, {"opus46", 2, 25}} {
		cell := cfg.CellID("mcp", c.agent, "opus46")
		rm = append(rm, []any{fmt.Sprintf("rm-mcp-%s-%d", cell, c.cycle), int64(0), "default", cell, "rep", "mcp", c.agent, "opus46",
			int32(1), c.cycle, c.n, 50.0, 0.5, f64(3), uint64(1)})
	}
	insert(t, conn, "round_metrics", []string{"event_id", "event_time_ms", "project", "cell_id", "campaign_id", "benchmark", "agent_model", "evolver_model",
		"seed", "cycle", "n_tasks", "pass_rate", "mean_score", "lift_vs_baseline", "_version"}, rm)
	r, err := Build(ctx, conn, "", "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range r.Rounds {
		got = append(got, fmt.Sprintf("%s/%s/%d n=%d mde=%s", p.Benchmark, p.Evolver, p.Cycle, p.NTasks, fmtF(p.MDE, "%.6f")))
	}
	want := "mcp/opus46/1 n=16 mde=70.000000 mcp/opus46/2 n=25 mde=56.000000 " +
		"swe/opus46/1 n=4 mde=140.000000 swe/opus46/2 n=4 mde=140.000000 swe/opus46/3 n=4 mde=140.000000 " +
		"swe/qwen32b/1 n=4 mde=140.000000 swe/qwen32b/2 n=4 mde=140.000000 swe/qwen32b/3 n=4 mde=140.000000"
	if strings.Join(got, " ") != want {
		t.Fatalf("rounds:\n%s\nwant:\n%s", strings.Join(got, " "), want)
	}
	if MDE(0) != nil || !eq(MDE(100), f64(28)) {
		t.Fatalf("MDE(0) = %v, MDE(100) = %v", MDE(0), *MDE(100))
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	_, sec, _ := strings.Cut(text.String(), "== Rounds: size and minimum detectable effect")
	sec, _, _ = strings.Cut(sec, "\n== ")
	for _, re := range []string{`(?m)^\s*mcp\s+opus46\s+1\s+16\s+70\.0\s*$`, `(?m)^\s*mcp\s+opus46\s+2\s+25\s+56\.0\s*$`,
		`(?m)^\s*swe\s+qwen32b\s+1–3 \(3\)\s+4\s+140\.0\s*$`, `sd = 1, the worst case`} {
		if !regexp.MustCompile(re).MatchString(sec) {
			t.Errorf("round section lacks %s:\n%s", re, sec)
		}
	}
	var page bytes.Buffer
	if err := r.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), "<td>16</td><td>70.0</td>") {
		t.Errorf("HTML lacks the mcp round's MDE")
	}
}
