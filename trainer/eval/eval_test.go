package eval

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/trainer"
	"github.com/harnessflow/harnessflow/trainer/backend"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func labelOf(e float64) string {
	switch {
	case e > 0.05:
		return "positive"
	case e < -0.05:
		return "negative"
	}
	return "neutral"
}

// world builds samples shaped like the simulator's: campaigns × seeds ×
// cells (evolver, agent, benchmark) × rounds; a cell has a latent mean
// effect, a (campaign, seed) a shared offset, and each sample noise. The
// query carries the evidence lines processors/score prints.
func world(seed uint64, campaigns, seeds, rounds int) []*schemas.LabeledSample {
	r := rand.New(rand.NewPCG(seed, 1))
	var out []*schemas.LabeledSample
	evolvers := []string{"ev-a", "ev-b", "ev-c"}
	agents := []string{"ag-1", "ag-2"}
	for c := 0; c < campaigns; c++ {
		for s := 1; s <= seeds; s++ {
			off := r.NormFloat64() * 0.05
			for _, ev := range evolvers {
				for _, ag := range agents {
					cell := fmt.Sprintf("camp%d/%s_x_%s_swe_s%d", c, ag, ev, s)
					base := map[string]float64{"ev-a": 0.1, "ev-b": -0.05, "ev-c": 0}[ev]
					for k := 1; k <= rounds; k++ {
						before := r.Float64()
						e := math.Max(-1, math.Min(1, base+off+0.2*(0.5-before)+r.NormFloat64()*0.05))
						q := fmt.Sprintf("task t%d: pass score=%g\ninput: fix it\ntask t%d: fail score=%g\nevidence summary: Round %d: 1 of 2 tasks failed (t%d).",
							k, before, k+1, before, k, k+1)
						out = append(out, &schemas.LabeledSample{
							SampleID: fmt.Sprintf("%s#%d", cell, k), UpdateID: fmt.Sprintf("%s#u%d", cell, k),
							CellID: cell, CampaignID: fmt.Sprintf("camp%d", c), Seed: int32(s),
							Benchmark: "swe", AgentModel: ag, EvolverModel: ev, Cycle: int32(k),
							Query: q, Update: "### skill s (add)\nbody", ArtifactKind: "skill",
							Effect: e, Label: labelOf(e),
						})
					}
				}
			}
		}
	}
	return out
}

func TestSplitKeepsGroupsTogether(t *testing.T) {
	t.Parallel()
	samples := world(7, 40, 25, 1) // 1000 (campaign, seed) groups of 6 cells
	for _, key := range []GroupKey{ByCampaign, ByCampaignSeed, ByCell} {
		train, held, err := Split(samples, key, 0.2, 42)
		if err != nil {
			t.Fatal(err)
		}
		if len(train)+len(held) != len(samples) {
			t.Fatalf("%s: %d + %d != %d", key, len(train), len(held), len(samples))
		}
		side := map[string]bool{}
		for _, s := range held {
			side[key.Of(s)] = true
		}
		for _, s := range train {
			if side[key.Of(s)] {
				t.Errorf("%s: group %s straddles the split", key, key.Of(s))
			}
		}
		if key != ByCampaign { // 40 campaigns: too few to pin the fraction
			if f := float64(len(held)) / float64(len(samples)); !near(f, 0.2, 0.04) {
				t.Errorf("%s: held-out fraction %.3f, want about 0.2", key, f)
			}
		}
		// Deterministic for a seed, different for another.
		_, again, _ := Split(samples, key, 0.2, 42)
		if fmt.Sprint(ids(again)) != fmt.Sprint(ids(held)) {
			t.Errorf("%s: split not deterministic", key)
		}
		_, other, _ := Split(samples, key, 0.2, 43)
		if fmt.Sprint(ids(other)) == fmt.Sprint(ids(held)) {
			t.Errorf("%s: seed 43 gives the same split as 42", key)
		}
	}
	// Siblings of one round (the cells of one campaign+seed) stay together.
	_, held, _ := Split(samples, ByCampaignSeed, 0.2, 42)
	in := map[string]bool{}
	for _, s := range held {
		in[s.SampleID] = true
	}
	for _, s := range samples {
		sib := ByCampaignSeed.Of(s)
		for _, o := range samples[:12] {
			if ByCampaignSeed.Of(o) == sib && in[o.SampleID] != in[s.SampleID] {
				t.Fatalf("siblings %s and %s on different sides", s.SampleID, o.SampleID)
			}
		}
	}
	if _, _, err := Split(samples, "round", 0.2, 1); !errors.Is(err, ErrConfig) {
		t.Errorf("unknown key: %v", err)
	}
	if _, _, err := Split(samples, ByCell, 1.5, 1); !errors.Is(err, ErrConfig) {
		t.Errorf("fraction 1.5: %v", err)
	}
	if tr, he, _ := Split(samples, ByCell, 0, 1); len(he) != 0 || len(tr) != len(samples) {
		t.Errorf("fraction 0 holds out %d", len(he))
	}
}

func ids(ss []*schemas.LabeledSample) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.SampleID)
	}
	return out
}

func TestGroupKeyFallback(t *testing.T) {
	t.Parallel()
	s := &schemas.LabeledSample{SampleID: "x", CellID: "c", Seed: 3}
	for _, k := range []GroupKey{ByCampaign, ByCampaignSeed, ByCell} {
		if g := k.Of(s); g != "cell:c" {
			t.Errorf("%s of a sample without campaign: %q", k, g)
		}
	}
	if g := ByCell.Of(&schemas.LabeledSample{SampleID: "x"}); g != "sample:x" {
		t.Errorf("no cell: %q", g)
	}
	s.CampaignID = "p"
	if g := ByCampaignSeed.Of(s); g != "campaign:p/seed:3" {
		t.Errorf("campaign+seed: %q", g)
	}
	if k, err := ParseGroupKey(""); err != nil || k != ByCampaignSeed {
		t.Errorf("default key: %q %v", k, err)
	}
}

func TestMetricsKnownAnswers(t *testing.T) {
	t.Parallel()
	if got := RMSE([]float64{1, 2, 3}, []float64{1, 2, 5}); !near(got, math.Sqrt(4.0/3), 1e-12) {
		t.Errorf("RMSE = %v", got)
	}
	x := []float64{1, 2, 3, 4, 5}
	if got := Spearman(x, []float64{50, 40, 30, 20, 10}); !near(got, -1, 1e-12) {
		t.Errorf("Spearman reversed = %v", got)
	}
	// One swap of neighbours twice: Σd² = 4, ρ = 1 − 6·4/(5·24) = 0.8.
	if got := Spearman(x, []float64{2, 1, 4, 3, 5}); !near(got, 0.8, 1e-12) {
		t.Errorf("Spearman permutation = %v", got)
	}
	// Ties take the average rank: ranks (1.5, 1.5, 3) vs (1, 2, 3).
	if got := Spearman([]float64{7, 7, 9}, []float64{1, 2, 3}); !near(got, 1.5/math.Sqrt(3), 1e-12) {
		t.Errorf("Spearman ties = %v", got)
	}
	if got := Spearman([]float64{3, 3, 3}, []float64{1, 2, 3}); got != 0 {
		t.Errorf("Spearman of a constant = %v, want 0", got)
	}
	y := []float64{0, 0, 0, 0}
	mu := []float64{0, 0.5, 1.5, 3}
	sd := []float64{1, 1, 1, 1}
	if c1, c2 := Coverage(y, mu, sd, 1), Coverage(y, mu, sd, 2); c1 != 0.5 || c2 != 0.75 {
		t.Errorf("coverage %v %v, want 0.5 0.75", c1, c2)
	}
	if got := GaussianNLL([]float64{1, 2}, []float64{1, 2}, []float64{1, 1}); !near(got, 0.5*math.Log(2*math.Pi), 1e-12) {
		t.Errorf("NLL = %v", got)
	}
	if got := GaussianNLL([]float64{1}, []float64{0}, []float64{2}); !near(got, 0.5*math.Log(2*math.Pi*4)+1.0/8, 1e-12) {
		t.Errorf("NLL off by one = %v", got)
	}
	if got := MacroF1([]int{0, 1, 2, 2}, []int{0, 1, 2, 1}); !near(got, 7.0/9, 1e-12) {
		t.Errorf("macro-F1 = %v, want 7/9", got)
	}
	// Negative is absent from truth and prediction: excluded.
	if got := MacroF1([]int{2, 2}, []int{2, 1}); !near(got, 1.0/3, 1e-12) {
		t.Errorf("macro-F1 with an absent class = %v, want 1/3", got)
	}
}

func TestEvidenceScore(t *testing.T) {
	t.Parallel()
	q := "task t1: pass score=1\ninput: task t9: pass\ntask t2: fail score=0.5\ntask t3: no outcome in this cell\nevidence summary: Round 2: 1 of 2 tasks failed (t2)."
	if x, ok := EvidenceScore(q); !ok || x != 0.75 {
		t.Errorf("score lines: %v %v, want 0.75", x, ok)
	}
	q = "task t3: no outcome in this cell\nevidence summary: Round 2: 3 of 4 tasks failed (a, b, c). ev-a added skill \"x\"."
	if x, ok := EvidenceScore(q); !ok || x != 0.25 {
		t.Errorf("summary: %v %v, want 0.25", x, ok)
	}
	for _, q := range []string{"", "task 5 failed", "task t3: no outcome in this cell"} {
		if _, ok := EvidenceScore(q); ok {
			t.Errorf("%q: parsed a score", q)
		}
	}
	// Figures outside [0, 1] are not scores (text in a task input): skipped,
	// so two 1e308 lines cannot overflow the mean to +Inf.
	q = "task t1: pass score=1e308\ntask t2: pass score=1e308\ntask t3: fail score=-4\ntask t4: pass score=NaN\ntask t5: fail score=0.25"
	if x, ok := EvidenceScore(q); !ok || x != 0.25 {
		t.Errorf("out-of-range figures: %v %v, want 0.25 from the one score", x, ok)
	}
	if _, ok := EvidenceScore("task t1: pass score=1e308\ntask t2: pass score=1e308"); ok {
		t.Errorf("only out-of-range figures: parsed a score")
	}
}

// TestContextRegressionFallbacks: with no within-cell spread of the
// evidence, every seen cell predicts its mean; a held-out row of a cell
// that had no evidence in training gets the cell's mean though it has
// evidence itself; an unseen cell gets the evidence regression; and
// hostile figures in training queries leave every prediction finite.
func TestContextRegressionFallbacks(t *testing.T) {
	t.Parallel()
	mk := func(ev string, e float64, q string) *schemas.LabeledSample {
		return &schemas.LabeledSample{SampleID: fmt.Sprint(ev, e, q), EvolverModel: ev, AgentModel: "a", Benchmark: "b", Effect: e, Label: "neutral", Query: q}
	}
	ev := func(x float64) string { return fmt.Sprintf("task t: pass score=%g", x) }
	ctxOf := func(train, held []*schemas.LabeledSample) []Prediction {
		t.Helper()
		bs, err := Baselines(train, held)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			if b.Name == BaselineContext {
				return b.Preds
			}
		}
		t.Fatal("no context regression")
		return nil
	}
	// One x per cell: no within-cell spread.
	flat := []*schemas.LabeledSample{mk("e1", 0.1, ev(0.2)), mk("e1", 0.3, ev(0.2)), mk("e2", 0.5, ev(0.8)), mk("e2", 0.7, ev(0.8)),
		mk("e3", -0.2, "no evidence"), mk("e3", -0.4, "no evidence")}
	got := ctxOf(flat, []*schemas.LabeledSample{mk("e1", 0, ev(0.9)), mk("e2", 0, "no evidence"), mk("e3", 0, ev(0.5))})
	for i, want := range []float64{0.2, 0.6, -0.3} {
		if !near(got[i].Mean, want, 1e-12) {
			t.Errorf("row %d: %v, want the cell mean %v", i, got[i].Mean, want)
		}
	}
	hostile := append(flat, mk("e1", 0.2, "task x: pass score=1e308\ntask y: pass score=1e308"), mk("e2", 0.6, "task x: fail score=-1e308"))
	for i, p := range ctxOf(hostile, []*schemas.LabeledSample{mk("e1", 0, ev(0.3)), mk("e9", 0, ev(0.3))}) {
		if math.IsNaN(p.Mean) || math.IsInf(p.Mean, 0) || math.IsNaN(p.Std) {
			t.Errorf("row %d with hostile training figures: %+v", i, p)
		}
	}
}

func TestBaselinesKnownAnswers(t *testing.T) {
	t.Parallel()
	mk := func(ev string, e float64, label, q string) *schemas.LabeledSample {
		return &schemas.LabeledSample{SampleID: fmt.Sprint(ev, e), EvolverModel: ev, AgentModel: "a", Benchmark: "b", Effect: e, Label: label, Query: q}
	}
	ev := func(x float64) string { return fmt.Sprintf("task t: pass score=%g", x) }
	// Effects are exactly 0.5·x − 0.1.
	train := []*schemas.LabeledSample{
		mk("e1", 0.0, "neutral", ev(0.2)), mk("e1", 0.1, "positive", ev(0.4)),
		mk("e2", 0.3, "positive", ev(0.8)), mk("e2", 0.4, "positive", ev(1.0)),
	}
	held := []*schemas.LabeledSample{mk("e1", 0, "neutral", ev(0.6)), mk("e9", 0, "neutral", "no evidence")}
	bs, err := Baselines(train, held)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Predictions{}
	for _, b := range bs {
		byName[b.Name] = b
	}
	med := byName[BaselineMedian].Preds
	if med[0].Mean != 0.2 || med[1].Mean != 0.2 {
		t.Errorf("median %v", med)
	}
	// RMS deviation from 0.2 of (0, 0.1, 0.3, 0.4): sqrt((.04+.01+.01+.04)/4).
	if !near(med[0].Std, math.Sqrt(0.025), 1e-12) {
		t.Errorf("median std %v", med[0].Std)
	}
	if p := byName[BaselineMajority].Preds[1].Probs; p != onehot(trainer.LabelPositive) {
		t.Errorf("majority %v", p)
	}
	cm := byName[BaselineCellMean].Preds
	if !near(cm[0].Mean, 0.05, 1e-12) || cm[1].Mean != 0.2 {
		t.Errorf("cell mean %v, %v: want 0.05 and the median for the unseen cell", cm[0].Mean, cm[1].Mean)
	}
	// e1's labels tie neutral/positive: the lower index (neutral) wins.
	if cm[0].Probs != onehot(trainer.LabelNeutral) || cm[1].Probs != onehot(trainer.LabelPositive) {
		t.Errorf("cell labels %v %v", cm[0].Probs, cm[1].Probs)
	}
	er := byName[BaselineEvidence].Preds
	if !near(er[0].Mean, 0.2, 1e-12) || er[1].Mean != 0.2 || !near(er[0].Std, 0, 1e-12) {
		t.Errorf("evidence regression %v, want 0.5·0.6 − 0.1 = 0.2, the median without evidence, std 0", er)
	}
	cr := byName[BaselineContext].Preds
	if !near(cr[0].Mean, 0.2, 1e-12) || cr[1].Mean != 0.2 || !near(cr[0].Std, 0, 1e-12) {
		t.Errorf("context regression %v, want 0.2 (one slope fits both cells), the median without evidence, std 0", cr)
	}
	if _, err := Baselines(nil, held); !errors.Is(err, ErrNoRows) {
		t.Errorf("empty train: %v", err)
	}
}

// TestContextRegressionWithinCells plants cells whose levels differ while
// the evidence slope within each is −0.5: across cells the evidence
// correlates the other way, so the evidence regression alone gets the slope
// wrong and the context regression (a level per cell, one slope) does not.
func TestContextRegressionWithinCells(t *testing.T) {
	t.Parallel()
	mk := func(ev string, x, e float64) *schemas.LabeledSample {
		q := "no evidence"
		if !math.IsNaN(x) {
			q = fmt.Sprintf("task t: pass score=%g", x)
		}
		return &schemas.LabeledSample{SampleID: fmt.Sprint(ev, x, e), EvolverModel: ev, AgentModel: "a", Benchmark: "b", Effect: e, Label: "neutral", Query: q}
	}
	// e1: effect = 0 − 0.5·x; e2: effect = 0.3 − 0.5·x.
	train := []*schemas.LabeledSample{mk("e1", 0.2, -0.1), mk("e1", 0.4, -0.2), mk("e2", 0.8, -0.1), mk("e2", 1.0, -0.2)}
	held := []*schemas.LabeledSample{mk("e2", 0.6, 0), mk("e1", math.NaN(), 0), mk("e9", 0.5, 0)}
	bs, err := Baselines(train, held)
	if err != nil {
		t.Fatal(err)
	}
	var cr, er []Prediction
	for _, b := range bs {
		switch b.Name {
		case BaselineContext:
			cr = b.Preds
			if !b.Effect || b.Label {
				t.Errorf("context regression takes part in effect %v, label %v: want effect only", b.Effect, b.Label)
			}
		case BaselineEvidence:
			er = b.Preds
		}
	}
	// The pooled evidence regression: b = −0.02/0.4 = −0.05, a = −0.15 + 0.05·0.6 = −0.12.
	if !near(er[0].Mean, -0.12-0.05*0.6, 1e-12) {
		t.Fatalf("evidence regression %v", er)
	}
	want := []float64{0.3 - 0.5*0.6, -0.15, -0.12 - 0.05*0.5}
	for i, w := range want {
		if !near(cr[i].Mean, w, 1e-12) {
			t.Errorf("row %d: context regression %v, want %v (e2 at x 0.6; e1's mean without evidence; an unseen cell by the evidence regression)", i, cr[i].Mean, w)
		}
	}
	if !near(cr[0].Std, 0, 1e-12) {
		t.Errorf("std %v: the fit is exact", cr[0].Std)
	}
}

// truth returns a predictor that knows every held-out effect and label.
func truth(rows []*schemas.LabeledSample) Predictions {
	p := Predictions{Name: "truth", Effect: true, Label: true}
	for _, s := range rows {
		p.Preds = append(p.Preds, Prediction{Mean: s.Effect, Std: 0.01, Probs: onehot(trainer.LabelIndex(s.Label))})
	}
	return p
}

func splitWorld(t *testing.T) (train, held []*schemas.LabeledSample, bs []Predictions) {
	t.Helper()
	train, held, err := Split(world(3, 6, 10, 5), ByCampaignSeed, 0.3, 9)
	if err != nil {
		t.Fatal(err)
	}
	bs, err = Baselines(train, held)
	if err != nil {
		t.Fatal(err)
	}
	return train, held, bs
}

func TestTruthBeatsBaselines(t *testing.T) {
	t.Parallel()
	_, held, bs := splitWorld(t)
	rep, err := Evaluate(Config{Resamples: 300, Seed: 1}, held, truth(held), bs)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Groups < 10 {
		t.Fatalf("only %d held-out groups", rep.Groups)
	}
	if rep.Verdict != VerdictBeats {
		t.Errorf("verdict %q: %+v", rep.Verdict, rep.Comparisons)
	}
	if len(rep.Comparisons) != 5 {
		t.Fatalf("comparisons %+v", rep.Comparisons)
	}
	for _, c := range rep.Comparisons {
		if c.Verdict != VerdictBeats {
			t.Errorf("%s vs %s: %+v", c.Metric, c.Baseline, c)
		}
	}
	if rep.Model.RMSE.Point != 0 || rep.Model.Spearman.Point != 1 || rep.Model.MacroF1.Point != 1 || rep.Model.Pairs.Point != 1 {
		t.Errorf("truth's metrics %+v", rep.Model)
	}
	// The evidence regression finds the planted slope: it beats the median.
	var med, evr Row
	for _, b := range rep.Baselines {
		switch b.Name {
		case BaselineMedian:
			med = b
		case BaselineEvidence:
			evr = b
		}
	}
	if !(evr.RMSE.Point < med.RMSE.Point) || !(evr.Spearman.Point > 0.2) {
		t.Errorf("evidence regression %+v vs median %+v", evr.RMSE, med.RMSE)
	}
	if !math.IsNaN(med.MacroF1.Point) {
		t.Errorf("median baseline has a macro-F1: %+v", med.MacroF1)
	}
}

// The verdict is the use-matched one: a critic that orders the updates
// of each round right beats its baselines even when its levels are far
// off (it is used to rank, not to forecast), and one that forecasts the
// levels as well as the context regression but orders nothing within a
// round does not.
func TestVerdictRestsOnWithinRoundRanking(t *testing.T) {
	t.Parallel()
	_, held, bs := splitWorld(t)
	var ctx Predictions
	for _, b := range bs {
		if b.Name == BaselineContext {
			ctx = b
		}
	}
	ranker := Predictions{Name: "ranker", Effect: true, Preds: make([]Prediction, len(held))}
	for i, s := range held {
		// The truth, shifted by a large amount per round: every pooled
		// metric suffers, the order within each round is exact.
		shift := float64(s.Cycle%3) - 1 + 0.5*float64(s.Seed%2)
		ranker.Preds[i] = Prediction{Mean: s.Effect + shift, Std: 0.1}
	}
	rep, err := Evaluate(Config{Resamples: 300, Seed: 1}, held, ranker, bs)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verdict != VerdictBeats || rep.Model.Pairs.Point != 1 {
		t.Errorf("exact within-round order, off levels: verdict %q, pairwise %+v; comparisons %+v", rep.Verdict, rep.Model.Pairs, rep.Comparisons)
	}
	for _, c := range rep.Comparisons {
		if c.Metric == MetricRMSE && c.Verdict == VerdictBeats {
			t.Errorf("the shifted truth beats on RMSE: %+v", c)
		}
	}
	// Each round's rows forecast alike: the round's mean effect (a perfect
	// pooled forecast of every level, no order within a round at all).
	sum, n := map[string]float64{}, map[string]float64{}
	for _, s := range held {
		sum[RoundOf(s)] += s.Effect
		n[RoundOf(s)]++
	}
	flat := Predictions{Name: "flat", Effect: true, Preds: make([]Prediction, len(held))}
	for i, s := range held {
		flat.Preds[i] = Prediction{Mean: sum[RoundOf(s)] / n[RoundOf(s)], Std: 0.1}
	}
	if rep, err = Evaluate(Config{Resamples: 300, Seed: 1}, held, flat, []Predictions{ctx}); err != nil {
		t.Fatal(err)
	}
	if rep.Verdict == VerdictBeats || rep.Model.Pairs.Point != 0.5 {
		t.Errorf("no within-round order: verdict %q, pairwise %+v; comparisons %+v", rep.Verdict, rep.Model.Pairs, rep.Comparisons)
	}
}

func TestMedianPredictorNoSignal(t *testing.T) {
	t.Parallel()
	_, held, bs := splitWorld(t)
	m := bs[0] // median
	m.Name = "model"
	rep, err := Evaluate(Config{Resamples: 300, Seed: 1}, held, m, bs)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verdict != VerdictNoSignal {
		t.Errorf("verdict %q", rep.Verdict)
	}
	for _, c := range rep.Comparisons {
		if c.Verdict != VerdictNoSignal {
			t.Errorf("%s: %+v", c.Metric, c)
		}
	}
	// Against itself alone the difference is exactly 0 in every resample.
	rep, err = Evaluate(Config{Resamples: 50}, held, m, bs[:1])
	if err != nil {
		t.Fatal(err)
	}
	if d := rep.Comparisons[0].Diff; d != (Interval{}) || rep.Verdict != VerdictNoSignal {
		t.Errorf("median vs median: %+v %q", d, rep.Verdict)
	}
}

func TestBootstrapDeterministic(t *testing.T) {
	t.Parallel()
	_, held, bs := splitWorld(t)
	m := bs[2] // cell-mean as the "model"
	a, err := Evaluate(Config{Resamples: 200, Seed: 5}, held, m, bs)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Evaluate(Config{Resamples: 200, Seed: 5}, held, m, bs)
	c, _ := Evaluate(Config{Resamples: 200, Seed: 6}, held, m, bs)
	if fmt.Sprintf("%+v", a) != fmt.Sprintf("%+v", b) {
		t.Errorf("same seed, different reports:\n%+v\n%+v", a, b)
	}
	if fmt.Sprintf("%+v", a.Model) == fmt.Sprintf("%+v", c.Model) {
		t.Errorf("seed 6 gives the same intervals as seed 5")
	}
	if a.Model.RMSE.Point != c.Model.RMSE.Point {
		t.Errorf("point estimates depend on the seed")
	}
	if !(a.Model.RMSE.Lo <= a.Model.RMSE.Point && a.Model.RMSE.Point <= a.Model.RMSE.Hi) {
		t.Errorf("RMSE interval %+v does not hold its point", a.Model.RMSE)
	}
}

// TestGroupResamplingWidensCI: the same rows, whose errors are shared within
// groups of 50, get a wider RMSE interval when the bootstrap resamples the
// groups than when each row is its own group; and one group alone gets no
// verdict.
func TestGroupResamplingWidensCI(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(11, 2))
	var grouped, single []*schemas.LabeledSample
	var pred Predictions
	pred.Name, pred.Effect = "model", true
	for g := 0; g < 20; g++ {
		off := r.NormFloat64() * 0.3
		for k := 0; k < 50; k++ {
			e := r.Float64()*0.4 - 0.2
			s := schemas.LabeledSample{SampleID: fmt.Sprintf("g%d-%d", g, k), Effect: e, Label: labelOf(e)}
			s.CellID = fmt.Sprintf("g%d", g)
			grouped = append(grouped, &s)
			s2 := s
			s2.CellID = s.SampleID
			single = append(single, &s2)
			pred.Preds = append(pred.Preds, Prediction{Mean: e + off + r.NormFloat64()*0.01, Std: 0.1})
		}
	}
	cfg := Config{Key: ByCell, Resamples: 400, Seed: 3}
	rg, err := Evaluate(cfg, grouped, pred, nil)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Evaluate(cfg, single, pred, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rg.Groups != 20 || rs.Groups != 1000 {
		t.Fatalf("groups %d and %d", rg.Groups, rs.Groups)
	}
	wg, ws := rg.Model.RMSE.Hi-rg.Model.RMSE.Lo, rs.Model.RMSE.Hi-rs.Model.RMSE.Lo
	if !(wg > 2*ws) {
		t.Errorf("RMSE interval width %.4f with 20 groups, %.4f with 1000 singletons: want the grouped one > 2×", wg, ws)
	}
	// One huge group: every resample is the same rows; no verdict.
	one := make([]*schemas.LabeledSample, len(grouped))
	for i, s := range grouped {
		c := *s
		c.CellID = "all"
		one[i] = &c
	}
	tr := truth(one)
	base := Predictions{Name: "zero", Effect: true, Label: true, Preds: make([]Prediction, len(one))}
	for i := range base.Preds {
		base.Preds[i] = Prediction{Std: 0.1, Probs: onehot(trainer.LabelNeutral)}
	}
	r1, err := Evaluate(cfg, one, tr, []Predictions{base})
	if err != nil {
		t.Fatal(err)
	}
	if r1.Groups != 1 || r1.Verdict != VerdictNoSignal || r1.Note == "" {
		t.Errorf("one group: groups %d, verdict %q, note %q", r1.Groups, r1.Verdict, r1.Note)
	}
	if iv := r1.Model.RMSE; iv.Lo != iv.Hi {
		t.Errorf("one group: RMSE interval %+v, want zero width", iv)
	}
}

func TestEvaluateRejects(t *testing.T) {
	t.Parallel()
	rows := []*schemas.LabeledSample{{SampleID: "a", Label: "positive"}}
	m := Predictions{Name: "m", Effect: true, Preds: make([]Prediction, 2)}
	if _, err := Evaluate(Config{}, rows, m, nil); !errors.Is(err, ErrMismatch) {
		t.Errorf("length mismatch: %v", err)
	}
	if _, err := Evaluate(Config{}, nil, Predictions{}, nil); !errors.Is(err, ErrNoRows) {
		t.Errorf("no rows: %v", err)
	}
	err := (&Config{Key: "x", Resamples: -1, Level: 2, MinGroups: -1}).Validate()
	if err == nil || !errors.Is(err, ErrConfig) {
		t.Errorf("bad config: %v", err)
	}
	bad := []*schemas.LabeledSample{{SampleID: "a", Label: "meh"}}
	if _, err := Evaluate(Config{}, bad, Predictions{Name: "m", Effect: true, Preds: make([]Prediction, 1)}, nil); err == nil {
		t.Errorf("unknown label accepted")
	}
	ok, dropped := Clean([]*schemas.LabeledSample{
		{SampleID: "a", Label: "positive", Effect: 0.1}, {SampleID: "b", Label: "meh"},
		{SampleID: "c", Label: "neutral", Effect: math.NaN()}, {SampleID: "d", Label: "neutral", Effect: 2}, {Label: "neutral"},
	})
	if len(ok) != 1 || dropped != 4 {
		t.Errorf("Clean kept %d dropped %d", len(ok), dropped)
	}
}

func TestModelPredictions(t *testing.T) {
	t.Parallel()
	var ms []*trainer.Model
	for seed := uint64(0); seed < 2; seed++ {
		m, err := trainer.NewModel(backend.NewCPU(), trainer.ModelConfig{Buckets: 1 << 10, CatBuckets: 16, Dim: 8, Hidden: 8, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.TrainStep(trainer.SyntheticExamples(seed, 32)); err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	rows := world(1, 1, 1, 3)
	one := ModelPredictions(ms[:1], rows, 5)
	ins := make([]*trainer.Input, len(rows))
	for i, s := range rows {
		ins[i] = &trainer.Input{Update: s.Update, Query: s.Query, Kind: s.ArtifactKind, Evolver: s.EvolverModel, Agent: s.AgentModel, Benchmark: s.Benchmark}
	}
	want := ms[0].Predict(ins)
	for i := range want {
		if !near(one[i].Mean, want[i].Mean, 1e-9) || !near(one[i].Std, want[i].Std, 1e-9) || !near(one[i].Probs[2], want[i].Probs[2], 1e-9) {
			t.Fatalf("row %d: %+v, want %+v", i, one[i], want[i])
		}
	}
	two := ModelPredictions(ms, rows, 0)
	p1 := ms[1].Predict(ins)
	for i := range two {
		m := (want[i].Mean + p1[i].Mean) / 2
		if !near(two[i].Mean, m, 1e-9) || two[i].Std < math.Min(want[i].Std, p1[i].Std)-1e-12 {
			t.Fatalf("ensemble row %d: %+v", i, two[i])
		}
	}
}

func TestWriteTable(t *testing.T) {
	t.Parallel()
	_, held, bs := splitWorld(t)
	rep, err := Evaluate(Config{Resamples: 50}, held, truth(held), bs)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"truth", BaselineMedian, BaselineMajority, BaselineCellMean, BaselineEvidence, BaselineContext,
		"rmse", "spearman", "nll", "macro_f1", "verdict: " + VerdictBeats, "0.0000 [0.0000, 0.0000]"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	t.Logf("\n%s", out)
}

// TestGroupKeyIsPerProjectLikeTrainer: the groups of two projects' samples
// with equal campaign, seed, cell and sample ids differ; the default
// project's names are those without a project; every name is the one the
// trainer's split uses (trainer.GroupOf), so critic-eval reproduces it.
func TestGroupKeyIsPerProjectLikeTrainer(t *testing.T) {
	t.Parallel()
	for _, k := range []GroupKey{ByCampaign, ByCampaignSeed, ByCell} {
		seen := map[string]string{}
		for _, p := range []string{"projA", "projB", schemas.DefaultProject} {
			s := &schemas.LabeledSample{Envelope: schemas.Envelope{Project: p}, SampleID: "x", CellID: "c", CampaignID: "camp", Seed: 3}
			g := k.Of(s)
			if want := trainer.GroupOf(string(k), s); g != want {
				t.Errorf("%s, project %s: %q, the trainer's %q", k, p, g, want)
			}
			if q, dup := seen[g]; dup {
				t.Errorf("%s: projects %s and %s share the group %q", k, q, p, g)
			}
			seen[g] = p
		}
		def := &schemas.LabeledSample{Envelope: schemas.Envelope{Project: schemas.DefaultProject}, SampleID: "x", CellID: "c", CampaignID: "camp", Seed: 3}
		if g, want := k.Of(def), k.Of(&schemas.LabeledSample{SampleID: "x", CellID: "c", CampaignID: "camp", Seed: 3}); g != want {
			t.Errorf("%s: the default project's group %q, without a project %q", k, g, want)
		}
	}
}

// The ranking verdict compares with the context regression — what reading
// the update adds to what its context tells — even where another baseline
// orders a round's rows better (at 5-task rounds the evidence regression
// does); the other metrics still compare with the best baseline.
func TestPairwiseComparesWithTheContextRegression(t *testing.T) {
	t.Parallel()
	_, held, bs := splitWorld(t)
	oracle := Predictions{Name: "truth", Effect: true, Preds: make([]Prediction, len(held))}
	for i, s := range held {
		oracle.Preds[i] = Prediction{Mean: s.Effect, Std: 0.1}
	}
	rep, err := Evaluate(Config{Resamples: 200, Seed: 1}, held, oracle, append(slices.Clone(bs), oracle))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Comparisons {
		if c.Metric == MetricPairs && c.Baseline != BaselineContext {
			t.Errorf("pairwise compared with %q (it ranks best), want %q", c.Baseline, BaselineContext)
		}
		if c.Metric == MetricRMSE && c.Baseline != "truth" {
			t.Errorf("rmse compared with %q, want the best baseline (truth)", c.Baseline)
		}
	}
}
