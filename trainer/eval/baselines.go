package eval

import (
	"math"
	"sort"

	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/trainer"
)

// Prediction is one predictor's forecast for one row.
type Prediction struct {
	// Mean is the predicted effect; Std its predicted standard deviation
	// (floored at MinStd by the metrics).
	Mean, Std float64
	// Probs are the label probabilities in trainer.LabelNames order
	// (negative, neutral, positive); the predicted label is their argmax
	// (ties to the lower index).
	Probs [3]float64
}

// Predictions are one predictor's forecasts for the held-out rows, in row
// order, and which metric families they take part in.
type Predictions struct {
	// Name names the predictor in reports.
	Name string
	// Preds has one entry per held-out row.
	Preds []Prediction
	// Effect: Mean and Std are a forecast of the effect (RMSE, Spearman,
	// coverage, NLL apply). Label: Probs are a forecast of the label
	// (macro-F1 applies). A baseline that predicts only one of them leaves
	// the other false and is not compared on it.
	Effect, Label bool
}

// Baseline names.
const (
	BaselineMedian   = "median"
	BaselineMajority = "majority-label"
	BaselineCellMean = "cell-mean"
	BaselineEvidence = "evidence-regression"
	BaselineContext  = "context-regression"
)

// onehot is the probability vector of class c.
func onehot(c int) [3]float64 {
	var p [3]float64
	p[c] = 1
	return p
}

// median of xs (mean of the two middle values for an even count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// rms is sqrt(mean of squares) of xs; 0 for none.
func rms(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x * x
	}
	return math.Sqrt(s / float64(len(xs)))
}

// majority returns the most frequent label class among samples (ties to the
// lower class index: negative, neutral, positive); neutral for none.
func majority(samples []*schemas.LabeledSample) int {
	var n [3]int
	for _, s := range samples {
		if c := trainer.LabelIndex(s.Label); c >= 0 {
			n[c]++
		}
	}
	if n[0]+n[1]+n[2] == 0 {
		return trainer.LabelNeutral
	}
	best := 0
	for c := 1; c < 3; c++ {
		if n[c] > n[best] {
			best = c
		}
	}
	return best
}

// cellKey is a sample's (evolver, agent, benchmark).
type cellKey struct{ evolver, agent, benchmark string }

func keyOf(s *schemas.LabeledSample) cellKey {
	return cellKey{s.EvolverModel, s.AgentModel, s.Benchmark}
}

// EvidenceScore parses the evidence figure of a labeled sample's query
// (trainer.EvidenceScore, which the model's context features read too).
func EvidenceScore(query string) (x float64, ok bool) { return trainer.EvidenceScore(query) }

// Baselines fits the trivial predictors on train and predicts for heldout:
//
//   - median: the training median effect for every row, std = the training
//     RMS deviation from it (a constant Gaussian; its NLL is the
//     "constant-Gaussian NLL"); effect only.
//   - majority-label: the training majority label (ties to negative, then
//     neutral) for every row; label only.
//   - cell-mean: the mean training effect of the row's (evolver, agent,
//     benchmark), std = the RMS training residual of all cells around their
//     means, and the cell's majority label; an (evolver, agent, benchmark)
//     unseen in training gets the training median and the global majority
//     label. Effect and label.
//   - evidence-regression: least squares effect = a + b·x on the training
//     rows whose query has an EvidenceScore x; a row without one (or every
//     row, when fewer than two training rows have one or their x are all
//     equal) gets the training median. std = the RMS training residual of the
//     rows it was fitted on (the median's when not fitted). Effect only.
//   - context-regression: the two together, effect = a_cell + b·x: an
//     intercept per (evolver, agent, benchmark) and one evidence slope b
//     shared by every cell (least squares within cells). It is everything a
//     model can learn from the context and the evidence's pass rate without
//     reading the update, so a model that beats it gains from something
//     else. A row of a training cell without an evidence score (or of a
//     cell without evidence in training, or when x has no within-cell
//     spread) gets its cell's mean; a cell unseen in training the evidence
//     regression (the median without either). std = the RMS training
//     residual of the rows it was fitted on (the cell mean's when not
//     fitted). Effect only.
//
// It returns ErrNoRows when train is empty.
func Baselines(train, heldout []*schemas.LabeledSample) ([]Predictions, error) {
	if len(train) == 0 {
		return nil, ErrNoRows
	}
	ys := make([]float64, len(train))
	for i, s := range train {
		ys[i] = s.Effect
	}
	med := median(ys)
	res := make([]float64, len(ys))
	for i, y := range ys {
		res[i] = y - med
	}
	medStd := rms(res)
	maj := majority(train)

	// Per-(evolver, agent, benchmark) means and majority labels.
	byCell := map[cellKey][]*schemas.LabeledSample{}
	for _, s := range train {
		byCell[keyOf(s)] = append(byCell[keyOf(s)], s)
	}
	cells := map[cellKey]cellFit{}
	var cellRes []float64
	for k, ss := range byCell {
		var m float64
		for _, s := range ss {
			m += s.Effect
		}
		m /= float64(len(ss))
		cells[k] = cellFit{mean: m, label: majority(ss)}
		for _, s := range ss {
			cellRes = append(cellRes, s.Effect-m)
		}
	}
	cellStd := rms(cellRes)

	// Evidence regression. Each query is parsed once: trainEv and heldEv
	// are the rows' evidence figures (ok false without one).
	trainEv, heldEv := evidenceOf(train), evidenceOf(heldout)
	var xs, rys []float64
	for i, s := range train {
		if e := trainEv[i]; e.ok {
			xs = append(xs, e.x)
			rys = append(rys, s.Effect)
		}
	}
	a, b, fitted := leastSquares(xs, rys)
	evStd := medStd
	if fitted {
		r := make([]float64, len(xs))
		for i := range xs {
			r[i] = rys[i] - (a + b*xs[i])
		}
		evStd = rms(r)
	}

	ctx := fitContext(train, trainEv, cells, cellStd)

	n := len(heldout)
	out := []Predictions{
		{Name: BaselineMedian, Preds: make([]Prediction, n), Effect: true},
		{Name: BaselineMajority, Preds: make([]Prediction, n), Label: true},
		{Name: BaselineCellMean, Preds: make([]Prediction, n), Effect: true, Label: true},
		{Name: BaselineEvidence, Preds: make([]Prediction, n), Effect: true},
		{Name: BaselineContext, Preds: make([]Prediction, n), Effect: true},
	}
	for i, s := range heldout {
		out[0].Preds[i] = Prediction{Mean: med, Std: medStd, Probs: onehot(maj)}
		out[1].Preds[i] = Prediction{Mean: med, Std: medStd, Probs: onehot(maj)}
		if c, ok := cells[keyOf(s)]; ok {
			out[2].Preds[i] = Prediction{Mean: c.mean, Std: cellStd, Probs: onehot(c.label)}
		} else {
			out[2].Preds[i] = Prediction{Mean: med, Std: cellStd, Probs: onehot(maj)}
		}
		p := Prediction{Mean: med, Std: evStd, Probs: onehot(maj)}
		if e := heldEv[i]; e.ok && fitted {
			p.Mean = a + b*e.x
		}
		out[3].Preds[i] = p
		out[4].Preds[i] = ctx.predict(s, heldEv[i], p, maj)
	}
	return out, nil
}

// cellFit is a cell's mean training effect and majority label.
type cellFit struct {
	mean  float64
	label int
}

// contextFit is the context regression: a per-cell intercept and a shared
// evidence slope.
type contextFit struct {
	// intercept[k] is cell k's a_cell; cells[k].mean its mean effect (the
	// cell-mean baseline's fit, for a row without evidence).
	intercept map[cellKey]float64
	cells     map[cellKey]cellFit
	slope     float64
	fitted    bool
	std       float64
}

// fitContext fits effect = a_cell + b·x on the training rows with an
// evidence score: b is the within-cell least-squares slope (each row's x
// and effect centred on its cell's means over those rows), a_cell = ȳ_c −
// b·x̄_c. It is not fitted when x has no finite within-cell spread: every
// seen cell then predicts its mean effect (slope 0), with cellStd, the
// cell-mean baseline's std.
func fitContext(train []*schemas.LabeledSample, ev []evidence, cells map[cellKey]cellFit, cellStd float64) contextFit {
	type acc struct{ n, sx, sy float64 }
	sums := map[cellKey]*acc{}
	type row struct {
		k    cellKey
		x, y float64
	}
	var rows []row
	for i, s := range train {
		if !ev[i].ok {
			continue
		}
		x := ev[i].x
		k := keyOf(s)
		a := sums[k]
		if a == nil {
			a = &acc{}
			sums[k] = a
		}
		a.n++
		a.sx += x
		a.sy += s.Effect
		rows = append(rows, row{k, x, s.Effect})
	}
	f := contextFit{intercept: map[cellKey]float64{}, cells: cells, std: cellStd}
	var sxx, sxy float64
	for _, r := range rows {
		a := sums[r.k]
		dx, dy := r.x-a.sx/a.n, r.y-a.sy/a.n
		sxx += dx * dx
		sxy += dx * dy
	}
	if len(rows) < 2 || !(sxx > 1e-12*float64(len(rows))) || math.IsNaN(sxy/sxx) || math.IsInf(sxy/sxx, 0) {
		// No within-cell spread: every cell predicts its mean (slope 0).
		return f
	}
	f.slope, f.fitted = sxy/sxx, true
	for k, a := range sums {
		f.intercept[k] = a.sy/a.n - f.slope*a.sx/a.n
	}
	res := make([]float64, len(rows))
	for i, r := range rows {
		res[i] = r.y - (f.intercept[r.k] + f.slope*r.x)
	}
	f.std = rms(res)
	return f
}

// predict is the context regression's forecast for s, whose evidence
// figure is e; ev is the evidence regression's forecast for s (the
// fallback for an unseen cell), maj the training majority label.
func (f contextFit) predict(s *schemas.LabeledSample, e evidence, ev Prediction, maj int) Prediction {
	p := Prediction{Mean: ev.Mean, Std: f.std, Probs: onehot(maj)}
	k := keyOf(s)
	if a, seen := f.intercept[k]; seen && e.ok && f.fitted {
		p.Mean = a + f.slope*e.x
	} else if c, seen := f.cells[k]; seen {
		p.Mean = c.mean
	}
	return p
}

// evidence is a row's EvidenceScore.
type evidence struct {
	x  float64
	ok bool
}

// evidenceOf parses each row's query once.
func evidenceOf(rows []*schemas.LabeledSample) []evidence {
	out := make([]evidence, len(rows))
	for i, s := range rows {
		out[i].x, out[i].ok = EvidenceScore(s.Query)
	}
	return out
}

// leastSquares fits y = a + b·x; ok is false with fewer than two points or no
// spread in x.
func leastSquares(xs, ys []float64) (a, b float64, ok bool) {
	n := float64(len(xs))
	if len(xs) < 2 {
		return 0, 0, false
	}
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= n
	my /= n
	var sxx, sxy float64
	for i := range xs {
		sxx += (xs[i] - mx) * (xs[i] - mx)
		sxy += (xs[i] - mx) * (ys[i] - my)
	}
	if !(sxx > 1e-12*n) { // NaN too
		return 0, 0, false
	}
	b = sxy / sxx
	if a = my - b*mx; math.IsNaN(a) || math.IsInf(a, 0) || math.IsNaN(b) || math.IsInf(b, 0) {
		return 0, 0, false
	}
	return a, b, true
}

// ModelPredictions scores rows with an ensemble of models (one model is an
// ensemble of one), in batches of batch rows (Default: 256 when ≤ 0), the
// way /v1/score combines members: Mean the mean of the members' means, Std
// the mixture's sqrt(mean variance + variance of means), Probs the mean
// probabilities. It is not safe to call concurrently with training the
// models.
func ModelPredictions(models []*trainer.Model, rows []*schemas.LabeledSample, batch int) []Prediction {
	if batch <= 0 {
		batch = 256
	}
	out := make([]Prediction, len(rows))
	if len(models) == 0 {
		return out
	}
	K := float64(len(models))
	for lo := 0; lo < len(rows); lo += batch {
		hi := min(lo+batch, len(rows))
		ins := make([]*trainer.Input, hi-lo)
		for i, s := range rows[lo:hi] {
			ins[i] = &trainer.Input{Update: s.Update, Query: s.Query, Kind: s.ArtifactKind,
				Evolver: s.EvolverModel, Agent: s.AgentModel, Benchmark: s.Benchmark}
		}
		sums := make([]struct{ mean, sq, v float64 }, len(ins))
		for _, m := range models {
			for i, p := range m.Predict(ins) {
				sums[i].mean += p.Mean / K
				sums[i].sq += p.Mean * p.Mean / K
				sums[i].v += p.Std * p.Std / K
				for c := range p.Probs {
					out[lo+i].Probs[c] += p.Probs[c] / K
				}
			}
		}
		for i, s := range sums {
			out[lo+i].Mean = s.mean
			out[lo+i].Std = math.Sqrt(s.v + math.Max(0, s.sq-s.mean*s.mean))
		}
	}
	return out
}
