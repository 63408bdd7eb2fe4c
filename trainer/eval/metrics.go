package eval

import (
	"math"
	"sort"
)

// MinStd floors a predicted standard deviation in coverage and NLL, so a
// predictor claiming certainty gets a finite (and large) NLL.
const MinStd = 1e-6

// RMSE is sqrt(mean((y − mu)²)); NaN for no rows.
func RMSE(y, mu []float64) float64 {
	if len(y) == 0 {
		return math.NaN()
	}
	var s float64
	for i := range y {
		d := y[i] - mu[i]
		s += d * d
	}
	return math.Sqrt(s / float64(len(y)))
}

// ranks returns the 1-based ranks of xs, ties given their average rank.
func ranks(xs []float64) []float64 {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return xs[idx[a]] < xs[idx[b]] })
	r := make([]float64, len(xs))
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && xs[idx[j+1]] == xs[idx[i]] {
			j++
		}
		avg := float64(i+j)/2 + 1
		for k := i; k <= j; k++ {
			r[idx[k]] = avg
		}
		i = j + 1
	}
	return r
}

// pearson is the correlation of a and b; 0 when either has no spread.
func pearson(a, b []float64) float64 {
	n := float64(len(a))
	if len(a) < 2 {
		return 0
	}
	var ma, mb float64
	for i := range a {
		ma += a[i]
		mb += b[i]
	}
	ma /= n
	mb /= n
	var sab, saa, sbb float64
	for i := range a {
		da, db := a[i]-ma, b[i]-mb
		sab += da * db
		saa += da * da
		sbb += db * db
	}
	if saa == 0 || sbb == 0 {
		return 0
	}
	return sab / math.Sqrt(saa*sbb)
}

// Spearman is the rank correlation of x and y: the Pearson correlation of
// their ranks, ties given their average rank. It is 0 (not NaN) when either
// side is constant, e.g. for a constant predictor: such a predictor ranks
// nothing.
func Spearman(x, y []float64) float64 {
	return pearson(ranks(x), ranks(y))
}

// Coverage is the fraction of rows with |y − mu| ≤ k·max(sd, MinStd); NaN
// for no rows. A calibrated Gaussian forecast covers about 0.683 at k = 1 and
// 0.954 at k = 2.
func Coverage(y, mu, sd []float64, k float64) float64 {
	if len(y) == 0 {
		return math.NaN()
	}
	var c int
	for i := range y {
		if math.Abs(y[i]-mu[i]) <= k*math.Max(sd[i], MinStd) {
			c++
		}
	}
	return float64(c) / float64(len(y))
}

// GaussianNLL is the mean of 0.5·log(2π·s²) + (y − mu)²/(2·s²) with
// s = max(sd, MinStd); NaN for no rows. Lower is better.
func GaussianNLL(y, mu, sd []float64) float64 {
	if len(y) == 0 {
		return math.NaN()
	}
	var t float64
	for i := range y {
		s := math.Max(sd[i], MinStd)
		d := y[i] - mu[i]
		t += 0.5*math.Log(2*math.Pi*s*s) + d*d/(2*s*s)
	}
	return t / float64(len(y))
}

// MacroF1 is the mean over the three label classes of F1 = 2TP/(2TP+FP+FN),
// over the classes that occur in truth or in pred: a class absent from both
// is excluded (its F1 is 0/0), as in trainer.Summarize. NaN for no rows.
func MacroF1(truth, pred []int) float64 {
	if len(truth) == 0 {
		return math.NaN()
	}
	var tp, fp, fn [3]float64
	for i := range truth {
		if truth[i] == pred[i] {
			tp[truth[i]]++
		} else {
			fp[pred[i]]++
			fn[truth[i]]++
		}
	}
	var s float64
	var k int
	for c := 0; c < 3; c++ {
		if tp[c]+fp[c]+fn[c] == 0 {
			continue
		}
		s += 2 * tp[c] / (2*tp[c] + fp[c] + fn[c])
		k++
	}
	return s / float64(k)
}

// argmax3 is the index of the largest probability (ties to the lower index).
func argmax3(p [3]float64) int {
	best := 0
	for c := 1; c < 3; c++ {
		if p[c] > p[best] {
			best = c
		}
	}
	return best
}
