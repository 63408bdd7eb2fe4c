package score

import (
	"math"
	"sort"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/harnessflow/harnessflow/schemas"
)

// PairedTTest is PairedTTestAt(diffs, 0.05): a two-sided one-sample t-test of
// mean(diffs) = 0 with a 95% confidence interval.
func PairedTTest(diffs []float64) (mean, ciLow, ciHigh, p float64) {
	return PairedTTestAt(diffs, 0.05)
}

// PairedTTestAt runs a two-sided one-sample t-test of mean(diffs) = 0 (the
// paired t-test on per-task differences) and returns the mean, the confidence
// interval at level 1−alpha (Student's t with n−1 degrees of freedom, from
// gonum's distuv.StudentsT) and the p-value.
//
// Degenerate inputs never yield NaN: with n = 0 it returns 0, [0, 0], p = 1;
// with n = 1 it returns the value, [value, value], p = 1; when every
// difference is equal (zero variance) it returns the mean, [mean, mean] and
// p = 0 if the mean is not 0, else p = 1.
func PairedTTestAt(diffs []float64, alpha float64) (mean, ciLow, ciHigh, p float64) {
	n := len(diffs)
	if n == 0 {
		return 0, 0, 0, 1
	}
	m, v, constant := meanVar(diffs)
	if n < 2 {
		return m, m, m, 1
	}
	se := math.Sqrt(v / float64(n))
	if constant || se == 0 {
		return m, m, m, degenerateP(m)
	}
	return tInterval(m, se, float64(n-1), alpha)
}

// WelchTTest is WelchTTestAt(a, b, 0.05).
func WelchTTest(a, b []float64) (diff, ciLow, ciHigh, p float64) {
	return WelchTTestAt(a, b, 0.05)
}

// WelchTTestAt runs Welch's two-sided unequal-variance t-test of
// mean(a) = mean(b) and returns diff = mean(a) − mean(b), its confidence
// interval at level 1−alpha and the p-value, with the Welch–Satterthwaite
// degrees of freedom and gonum's distuv.StudentsT.
//
// Degenerate inputs never yield NaN: if either sample is empty it returns 0,
// [0, 0], p = 1; if either has a single value it returns the difference of the
// means, [diff, diff], p = 1; when both samples have zero variance it returns
// diff, [diff, diff] and p = 0 if diff is not 0, else p = 1.
func WelchTTestAt(a, b []float64, alpha float64) (diff, ciLow, ciHigh, p float64) {
	if len(a) == 0 || len(b) == 0 {
		return 0, 0, 0, 1
	}
	ma, va, ca := meanVar(a)
	mb, vb, cb := meanVar(b)
	diff = ma - mb
	if len(a) < 2 || len(b) < 2 {
		return diff, diff, diff, 1
	}
	qa, qb := va/float64(len(a)), vb/float64(len(b))
	se2 := qa + qb
	if (ca && cb) || se2 == 0 {
		return diff, diff, diff, degenerateP(diff)
	}
	df := se2 * se2 / (qa*qa/float64(len(a)-1) + qb*qb/float64(len(b)-1))
	return tInterval(diff, math.Sqrt(se2), df, alpha)
}

func degenerateP(m float64) float64 {
	if m != 0 {
		return 0
	}
	return 1
}

// tInterval returns est, its (1−alpha) interval and the two-sided p-value of
// t = est/se with df degrees of freedom.
func tInterval(est, se, df, alpha float64) (float64, float64, float64, float64) {
	dist := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: df}
	t := est / se
	p := 2 * dist.Survival(math.Abs(t))
	if p > 1 {
		p = 1
	}
	q := dist.Quantile(1 - alpha/2)
	return est, est - q*se, est + q*se, p
}

// meanVar returns the mean and the sample variance (n−1) of xs, summed in the
// given order; constant reports that every value is identical (variance 0
// exactly, mean = the value, with no rounding noise).
func meanVar(xs []float64) (mean, variance float64, constant bool) {
	constant = true
	var s float64
	for _, x := range xs {
		s += x
		if x != xs[0] {
			constant = false
		}
	}
	if constant {
		return xs[0], 0, true
	}
	mean = s / float64(len(xs))
	if len(xs) < 2 {
		return mean, 0, false
	}
	var ss float64
	for _, x := range xs {
		d := x - mean
		ss += d * d
	}
	return mean, ss / float64(len(xs)-1), false
}

// Design says how an update's effect is measured (docs/design.md §4).
type Design int

const (
	// DesignLift (in-situ route): the values are per-task lifts against the
	// baseline cell, score(x|v) − score(x|baseline); the effect is the mean
	// lift under v' minus the mean lift under v.
	DesignLift Design = iota
	// DesignHeldOut (split routes): the values are held-out task scores; the
	// effect is the held-out pass rate under v' minus under v.
	DesignHeldOut
	// DesignUnpaired (production route, no baseline): the values are task
	// scores; the effect is an unpaired difference of pass rates, always Welch.
	DesignUnpaired
)

// Estimate is the measured effect of one update with its statistical evidence.
type Estimate struct {
	// Design is how the effect was measured.
	Design Design
	// Paired is true when a paired t-test on per-task differences was used
	// (the same tasks solved under both versions), false for Welch.
	Paired bool
	// Effect is the difference of means (after − before), clipped to [−1, 1].
	Effect float64
	// CILow, CIHigh bound Effect at level 1−alpha, clipped to [−1, 1].
	CILow, CIHigh float64
	// PValue is the two-sided p-value of the test.
	PValue float64
	// NBefore, NAfter are the task counts used on each side (equal when Paired).
	NBefore, NAfter int
}

// Effect measures an update from the per-task values observed under the old
// version (before: task_id → value) and under the new one (after).
//
// Which test (the "paired where outcomes pair" rule): for DesignLift and
// DesignHeldOut, when the tasks solved under both versions (the overlap O)
// are at least half of each sample (|O| ≥ 1, 2|O| ≥ |before|, 2|O| ≥ |after|),
// the effect is the mean of the per-task differences after(x) − before(x) over
// O with a paired t-test (NBefore = NAfter = |O|); otherwise, and always for
// DesignUnpaired, it is mean(after) − mean(before) with Welch's t-test on the
// two whole samples. The interval is at level 1−alpha. Values are summed in
// task_id order, so the result does not depend on map order. Effect and the
// interval are clipped into [−1, 1].
func Effect(before, after map[string]float64, d Design, alpha float64) Estimate {
	est := Estimate{Design: d}
	if d != DesignUnpaired {
		var overlap []string
		for id := range before {
			if _, ok := after[id]; ok {
				overlap = append(overlap, id)
			}
		}
		o := len(overlap)
		if o >= 1 && 2*o >= len(before) && 2*o >= len(after) {
			sort.Strings(overlap)
			diffs := make([]float64, o)
			for i, id := range overlap {
				diffs[i] = after[id] - before[id]
			}
			m, lo, hi, p := PairedTTestAt(diffs, alpha)
			est.Paired = true
			est.NBefore, est.NAfter = o, o
			est.Effect, est.CILow, est.CIHigh, est.PValue = clip(m), clip(lo), clip(hi), p
			return est
		}
	}
	a, b := sortedValues(after), sortedValues(before)
	diff, lo, hi, p := WelchTTestAt(a, b, alpha)
	est.NBefore, est.NAfter = len(b), len(a)
	est.Effect, est.CILow, est.CIHigh, est.PValue = clip(diff), clip(lo), clip(hi), p
	return est
}

func sortedValues(m map[string]float64) []float64 {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([]float64, len(ids))
	for i, id := range ids {
		out[i] = m[id]
	}
	return out
}

func clip(x float64) float64 {
	switch {
	case x < -1:
		return -1
	case x > 1:
		return 1
	}
	return x
}

// Label returns the label of an effect (docs/metrics.md): positive if
// effect ≥ ε and p < α, negative if effect ≤ −ε and p < α, neutral otherwise,
// including when n (the smaller of the two sample sizes) is below MinPairs.
// Zero fields of params take their defaults.
func Label(effect, pValue float64, n int, params Params) string {
	params.SetDefaults()
	if n < params.MinPairs || pValue >= params.Alpha {
		return schemas.LabelNeutral
	}
	switch {
	case effect >= params.Epsilon:
		return schemas.LabelPositive
	case effect <= -params.Epsilon:
		return schemas.LabelNegative
	}
	return schemas.LabelNeutral
}
