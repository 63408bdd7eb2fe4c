package eval

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/trainer"
)

// Verdicts.
const (
	// VerdictBeats: the interval of the paired difference model − best
	// baseline excludes 0 in the model's favour.
	VerdictBeats = "beats baselines"
	// VerdictNoSignal: anything else (the interval holds 0, points the other
	// way, or there are too few groups to tell).
	VerdictNoSignal = "no signal yet"
)

// Metric names, as in Comparison.Metric.
const (
	MetricRMSE     = "rmse"
	MetricSpearman = "spearman"
	MetricNLL      = "nll"
	MetricMacroF1  = "macro_f1"
	// MetricPairs is the within-round pairwise accuracy (PairAccuracy).
	MetricPairs = "pairwise"
)

// Config sets up Evaluate. The zero value is valid.
type Config struct {
	// Key is the group the bootstrap resamples (use the key Split used).
	// Default: campaign+seed.
	Key GroupKey
	// Resamples is the number of bootstrap resamples B. Default: 1000.
	Resamples int
	// Level is the intervals' coverage (percentile intervals from the
	// (1−Level)/2 and (1+Level)/2 quantiles). Default: 0.95.
	Level float64
	// Seed seeds the bootstrap: the same Seed, rows and predictions give the
	// same report. Default: 0 (a valid seed).
	Seed uint64
	// MinGroups is the fewest held-out groups a verdict may rest on: with
	// fewer, every verdict is "no signal yet" (with one group every resample
	// is the same rows and every interval has zero width). Default: 10.
	MinGroups int
}

// DefaultConfig returns the configuration the evaluation fills in for the
// fields left zero.
func DefaultConfig() Config {
	var c Config
	c.setDefaults()
	return c
}

func (c *Config) setDefaults() {
	if c.Key == "" {
		c.Key = DefaultGroupKey
	}
	if c.Resamples == 0 {
		c.Resamples = 1000
	}
	if c.Level == 0 {
		c.Level = 0.95
	}
	if c.MinGroups == 0 {
		c.MinGroups = 10
	}
}

// Validate reports every invalid field.
func (c *Config) Validate() error {
	var errs []error
	if _, err := ParseGroupKey(string(c.Key)); err != nil {
		errs = append(errs, err)
	}
	if c.Resamples < 1 {
		errs = append(errs, fmt.Errorf("%w: resamples %d: want ≥ 1", ErrConfig, c.Resamples))
	}
	if !(c.Level > 0 && c.Level < 1) {
		errs = append(errs, fmt.Errorf("%w: level %v: want (0, 1)", ErrConfig, c.Level))
	}
	if c.MinGroups < 1 {
		errs = append(errs, fmt.Errorf("%w: min groups %d: want ≥ 1", ErrConfig, c.MinGroups))
	}
	return errors.Join(errs...)
}

// Interval is a point estimate on all held-out rows and its bootstrap
// percentile interval. NaN fields mean "does not apply".
type Interval struct {
	Point, Lo, Hi float64
}

// Row is one predictor's metrics on the held-out rows.
type Row struct {
	// Name is the predictor's name; Effect and Label say which metrics apply
	// (the others are NaN).
	Name          string
	Effect, Label bool
	// RMSE of the mean; Spearman ρ of mean vs effect; Cover1 and Cover2 the
	// fraction of effects within 1σ and 2σ of the mean; NLL the mean Gaussian
	// negative log-likelihood; MacroF1 of the argmax label; Pairs the
	// within-round pairwise accuracy of the mean (MetricPairs).
	RMSE, Spearman, Cover1, Cover2, NLL, MacroF1, Pairs Interval
}

// Comparison is the paired difference model − best baseline on one metric.
type Comparison struct {
	// Metric is rmse, spearman, nll or macro_f1.
	Metric string
	// Baseline is the best baseline by its point estimate on all held-out
	// rows (lowest RMSE or NLL, highest ρ or macro-F1; first listed on a
	// tie), fixed for every resample; for MetricPairs, the context
	// regression when it is among the baselines.
	Baseline string
	// Diff is model − baseline, computed on the same resampled rows.
	Diff Interval
	// Verdict is VerdictBeats when Diff's interval excludes 0 on the
	// model's side (Hi < 0 for rmse and nll, Lo > 0 for spearman and
	// macro_f1), VerdictNoSignal otherwise.
	Verdict string
}

// Report is the outcome of Evaluate.
type Report struct {
	// Rows and Groups count the held-out rows and their groups under Key.
	Rows, Groups int
	Key          GroupKey
	Resamples    int
	Level        float64
	Seed         uint64
	// Model and Baselines are the predictors' metrics.
	Model     Row
	Baselines []Row
	// Comparisons are the model's paired differences, for the metrics it
	// takes part in and some baseline does.
	Comparisons []Comparison
	// Verdict is the use-matched one: the critic is asked to rank the
	// candidate updates of one round, so it is VerdictBeats when the
	// within-round pairwise accuracy's comparison is (its interval above
	// the context regression's: what reading the update adds to what its
	// context tells; the best baseline's when the context regression is
	// not among them). Without a round of two rows (no pair to
	// rank), it falls back to every comparison's verdict being
	// VerdictBeats. Note says why when the groups were too few.
	Verdict string
	Note    string
}

// PairCounts counts the pairs of one round's candidates whose true
// figures differ (n) and, of those, the ones pred orders as truth does
// (right; a tie in pred counts one half): the within-round pairwise
// accuracy is right/n.
func PairCounts(pred, truth []float64) (right, n float64) {
	for i := range truth {
		for j := i + 1; j < len(truth); j++ {
			if truth[i] == truth[j] {
				continue
			}
			n++
			switch d := (pred[i] - pred[j]) * (truth[i] - truth[j]); {
			case d > 0:
				right++
			case d == 0:
				right += 0.5
			}
		}
	}
	return right, n
}

// RoundOf is a held-out row's round: the rows of one (project, campaign,
// seed, agent, benchmark, cycle), the updates of different evolvers
// written after the same round of the same tasks, which an evolver's
// critic is asked to choose among.
func RoundOf(s *schemas.LabeledSample) string { return trainer.RoundKey(s) }

// pairCounts counts the within-round pairs of a predictor (the pairwise
// accuracy, MetricPairs, is right/n): over
// the pairs of rows of one round (RoundOf) whose effects differ, the share
// it orders as their effects are, a tie in its means counting one half.
// Unlike a pooled metric it is blind to what every candidate of a round
// shares (the round's level and noise), which is all a ranking uses.
// rows are the row indices to count over.
func pairCounts(rows []int, round []int, y []float64, mean func(i int) float64) (right, n float64) {
	byRound := map[int][]int{}
	for _, i := range rows {
		byRound[round[i]] = append(byRound[round[i]], i)
	}
	pred, truth := []float64{}, []float64{}
	for _, rs := range byRound {
		pred, truth = pred[:0], truth[:0]
		for _, i := range rs {
			pred, truth = append(pred, mean(i)), append(truth, y[i])
		}
		r, k := PairCounts(pred, truth)
		right += r
		n += k
	}
	return right, n
}

// metric ids in the per-resample arrays.
const (
	mRMSE = iota
	mSpearman
	mCover1
	mCover2
	mNLL
	mF1
	mPairs
	nMetrics
)

// scorer computes every metric of every predictor on a set of row indices,
// reusing its buffers. Not safe for concurrent use.
type scorer struct {
	y      []float64
	labels []int
	preds  []Predictions
	// buffers
	ty, mu, sd []float64
	tl, pl     []int
}

func (s *scorer) score(idx []int, out [][nMetrics]float64) {
	s.ty, s.tl = s.ty[:0], s.tl[:0]
	for _, i := range idx {
		s.ty = append(s.ty, s.y[i])
		s.tl = append(s.tl, s.labels[i])
	}
	ry := ranks(s.ty)
	for p, pr := range s.preds {
		for m := range out[p] {
			out[p][m] = math.NaN()
		}
		if pr.Effect {
			s.mu, s.sd = s.mu[:0], s.sd[:0]
			for _, i := range idx {
				s.mu = append(s.mu, pr.Preds[i].Mean)
				s.sd = append(s.sd, pr.Preds[i].Std)
			}
			out[p][mRMSE] = RMSE(s.ty, s.mu)
			out[p][mSpearman] = pearson(ranks(s.mu), ry)
			out[p][mCover1] = Coverage(s.ty, s.mu, s.sd, 1)
			out[p][mCover2] = Coverage(s.ty, s.mu, s.sd, 2)
			out[p][mNLL] = GaussianNLL(s.ty, s.mu, s.sd)
		}
		if pr.Label {
			s.pl = s.pl[:0]
			for _, i := range idx {
				s.pl = append(s.pl, argmax3(pr.Preds[i].Probs))
			}
			out[p][mF1] = MacroF1(s.tl, s.pl)
		}
	}
}

// percentile is the q-quantile of sorted xs with linear interpolation
// between order statistics (R type 7).
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	h := q * float64(len(sorted)-1)
	lo := int(math.Floor(h))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (h-float64(lo))*(sorted[hi]-sorted[lo])
}

func interval(point float64, draws []float64, level float64) Interval {
	if math.IsNaN(point) {
		return Interval{math.NaN(), math.NaN(), math.NaN()}
	}
	s := append([]float64(nil), draws...)
	sort.Float64s(s)
	a := (1 - level) / 2
	return Interval{Point: point, Lo: percentile(s, a), Hi: percentile(s, 1-a)}
}

// Evaluate scores model and baselines on the held-out rows (each
// Predictions has one entry per row, in row order) and bootstraps every
// metric and the paired differences model − best baseline by resampling the
// rows' groups (cfg.Key) with replacement, cfg.Resamples times from
// cfg.Seed: a resample draws as many groups as there are, and takes every
// row of each drawn group. Rows must have a known label (see Clean).
func Evaluate(cfg Config, rows []*schemas.LabeledSample, model Predictions, baselines []Predictions) (*Report, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("evaluate: %w", ErrNoRows)
	}
	all := append([]Predictions{model}, baselines...)
	for _, p := range all {
		if len(p.Preds) != len(rows) {
			return nil, fmt.Errorf("%w: %s has %d predictions for %d rows", ErrMismatch, p.Name, len(p.Preds), len(rows))
		}
	}
	sc := &scorer{y: make([]float64, len(rows)), labels: make([]int, len(rows)), preds: all}
	groupOf := map[string]int{}
	var groups [][]int
	for i, s := range rows {
		c := trainer.LabelIndex(s.Label)
		if c < 0 {
			return nil, fmt.Errorf("%w: sample %s has label %q", ErrConfig, s.SampleID, s.Label)
		}
		sc.y[i], sc.labels[i] = s.Effect, c
		g := cfg.Key.Of(s)
		k, ok := groupOf[g]
		if !ok {
			k = len(groups)
			groupOf[g] = k
			groups = append(groups, nil)
		}
		groups[k] = append(groups[k], i)
	}

	idx := make([]int, len(rows))
	for i := range idx {
		idx[i] = i
	}
	point := make([][nMetrics]float64, len(all))
	sc.score(idx, point)

	// Within-round pairs: counted per group (a round lies in one group
	// under every group key that includes campaign and seed; a key that
	// splits rounds counts only the pairs within its groups), so that a
	// resample's figure is a sum over its drawn groups.
	roundID := map[string]int{}
	round := make([]int, len(rows))
	for i, s := range rows {
		k := RoundOf(s)
		id, ok := roundID[k]
		if !ok {
			id = len(roundID)
			roundID[k] = id
		}
		round[i] = id
	}
	type pc struct{ right, n float64 }
	pairs := make([][]pc, len(groups)) // [group][predictor]
	for g, gr := range groups {
		pairs[g] = make([]pc, len(all))
		for p, pr := range all {
			if pr.Effect {
				r, n := pairCounts(gr, round, sc.y, func(i int) float64 { return pr.Preds[i].Mean })
				pairs[g][p] = pc{r, n}
			}
		}
	}
	pairAcc := func(drawn []int, out [][nMetrics]float64) {
		for p, pr := range all {
			out[p][mPairs] = math.NaN()
			if !pr.Effect {
				continue
			}
			var r, n float64
			for _, g := range drawn {
				r += pairs[g][p].right
				n += pairs[g][p].n
			}
			if n > 0 {
				out[p][mPairs] = r / n
			}
		}
	}
	every := make([]int, len(groups))
	for g := range every {
		every[g] = g
	}
	pairAcc(every, point)

	// Best baselines by point estimate.
	type cmp struct {
		metric string
		m      int
		lower  bool // lower is better
		base   int  // index into all; -1 none
	}
	var cmps []cmp
	add := func(name string, m int, lower, effect bool) {
		if (effect && !model.Effect) || (!effect && !model.Label) {
			return
		}
		best := -1
		for j := 1; j < len(all); j++ {
			if (effect && !all[j].Effect) || (!effect && !all[j].Label) {
				continue
			}
			if m == mPairs && all[j].Name == BaselineContext {
				// The ranking verdict asks whether reading the update
				// adds to what its context tells: against the context
				// regression, whatever ranks best.
				best = j
				break
			}
			v := point[j][m]
			if best < 0 || (lower && v < point[best][m]) || (!lower && v > point[best][m]) {
				best = j
			}
		}
		if best >= 0 {
			cmps = append(cmps, cmp{name, m, lower, best})
		}
	}
	add(MetricRMSE, mRMSE, true, true)
	add(MetricSpearman, mSpearman, false, true)
	add(MetricNLL, mNLL, true, true)
	add(MetricMacroF1, mF1, false, false)
	add(MetricPairs, mPairs, false, true)

	// Bootstrap over groups.
	draws := make([][nMetrics][]float64, len(all))
	diffs := make([][]float64, len(cmps))
	r := rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15))
	cur := make([][nMetrics]float64, len(all))
	var bidx, drawn []int
	for b := 0; b < cfg.Resamples; b++ {
		bidx, drawn = bidx[:0], drawn[:0]
		for range groups {
			g := r.IntN(len(groups))
			drawn = append(drawn, g)
			bidx = append(bidx, groups[g]...)
		}
		sc.score(bidx, cur)
		pairAcc(drawn, cur)
		for p := range all {
			for m := 0; m < nMetrics; m++ {
				draws[p][m] = append(draws[p][m], cur[p][m])
			}
		}
		for k, c := range cmps {
			diffs[k] = append(diffs[k], cur[0][c.m]-cur[c.base][c.m])
		}
	}

	rowOf := func(p int) Row {
		iv := func(m int) Interval { return interval(point[p][m], draws[p][m], cfg.Level) }
		return Row{Name: all[p].Name, Effect: all[p].Effect, Label: all[p].Label,
			RMSE: iv(mRMSE), Spearman: iv(mSpearman), Cover1: iv(mCover1), Cover2: iv(mCover2),
			NLL: iv(mNLL), MacroF1: iv(mF1), Pairs: iv(mPairs)}
	}
	rep := &Report{Rows: len(rows), Groups: len(groups), Key: cfg.Key, Resamples: cfg.Resamples,
		Level: cfg.Level, Seed: cfg.Seed, Model: rowOf(0), Verdict: VerdictNoSignal}
	for p := 1; p < len(all); p++ {
		rep.Baselines = append(rep.Baselines, rowOf(p))
	}
	enough := len(groups) >= cfg.MinGroups
	if !enough {
		rep.Note = fmt.Sprintf("%d held-out groups (%s), fewer than %d: no verdict", len(groups), cfg.Key, cfg.MinGroups)
	}
	beatsAll := enough && len(cmps) > 0
	ranking := ""
	for k, c := range cmps {
		d := interval(point[0][c.m]-point[c.base][c.m], diffs[k], cfg.Level)
		v := VerdictNoSignal
		if enough && ((c.lower && d.Hi < 0) || (!c.lower && d.Lo > 0)) {
			v = VerdictBeats
		} else {
			beatsAll = false
		}
		if c.m == mPairs && !math.IsNaN(d.Point) {
			ranking = v
		}
		rep.Comparisons = append(rep.Comparisons, Comparison{Metric: c.metric, Baseline: all[c.base].Name, Diff: d, Verdict: v})
	}
	switch {
	case ranking != "":
		rep.Verdict = ranking
	case beatsAll:
		rep.Verdict = VerdictBeats
	}
	return rep, nil
}
