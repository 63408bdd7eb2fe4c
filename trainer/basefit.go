package trainer

import (
	"math"
	"slices"
	"strings"

	"github.com/harnessflow/harnessflow/trainer/backend"
)

// baseFit is the additive critic's base: trainer/eval's context
// regression, effect = a_cell + b·x (x the evidence pass rate parsed from
// the query, EvidenceScore), an intercept per (evolver, agent, benchmark)
// cell and one slope b shared by every cell, least squares within cells —
// in closed form, from running sums of the samples trained on. So the base
// is exactly the strongest baseline a model can match without reading the
// update, from the first sample on, and the text part learns only what it
// leaves. A cell without evidence rows predicts its mean effect; an unseen
// cell, the pooled evidence regression (the pooled mean without evidence).
// A replayed example (Example.Replay) is not counted again.
//
// The sums live in a frozen parameter tensor ("base", baseRows × nStat ×
// 2 float32), so checkpoints carry them as any tensor. The host keeps them
// in float64 (the within-cell sums subtract nearly equal figures), each
// rounded to what a pair of float32 (hi, lo = the rest) holds, which is
// how the tensor stores it: a restored model has the same sums, bit for
// bit, and continues exactly as the one that was saved.
type baseFit struct {
	param *param
	sums  []float64
	// used are the cell rows with samples, ascending.
	used []int
	// wxx and wxy are the within-cell sums Σ_c (Sxx_c − Sx_c²/n_c) and
	// Σ_c (Sxy_c − Sx_c·Sy_c/n_c) over the used rows, in row order.
	wxx, wxy float64
}

// split32 is v as float32 hi + float32 lo; join32 its float64 sum.
func split32(v float64) (float32, float32) {
	hi := float32(v)
	return hi, float32(v - float64(hi))
}

func join32(hi, lo float32) float64 { return float64(hi) + float64(lo) }

// Per-row statistics: every row's count and effect sum, then the count and
// sums of the rows with an evidence figure.
const (
	statN = iota
	statY
	statNX
	statSX
	statSY
	statSXX
	statSXY
	nStat
)

// baseGlobalRow pools every sample (the fallback of an unseen cell); cell
// rows hash into [1, baseRows).
const baseGlobalRow = 0

func baseCellRow(in *Input) int {
	h := fnv1a(spaceBase, strings.ToLower(in.Evolver), strings.ToLower(in.Agent), strings.ToLower(in.Benchmark))
	return 1 + int(h%uint64(baseRows-1))
}

func evidenceOf(in *Input) (float64, bool) {
	x, ok := EvidenceScore(clipLines(in.Query, maxEvidenceBytes))
	if !ok || math.IsNaN(x) {
		return 0, false
	}
	return min(max(x, 0), 1), true
}

// within returns a row's within-cell (Sxx, Sxy) contribution.
func within(r []float64) (float64, float64) {
	if r[statNX] == 0 {
		return 0, 0
	}
	return r[statSXX] - r[statSX]*r[statSX]/r[statNX], r[statSXY] - r[statSX]*r[statSY]/r[statNX]
}

// observe adds the batch's fresh examples to the sums and uploads them.
func (b *baseFit) observe(be backend.Backend, batch []Example) {
	changed := false
	var fresh []int
	for i := range batch {
		ex := &batch[i]
		if ex.Replay || math.IsNaN(ex.Effect) {
			continue
		}
		changed = true
		x, ok := evidenceOf(&ex.Input)
		for _, row := range []int{baseGlobalRow, baseCellRow(&ex.Input)} {
			r := b.sums[row*nStat : (row+1)*nStat]
			if row != baseGlobalRow && r[statN] == 0 {
				fresh = append(fresh, row)
			}
			r[statN]++
			r[statY] += ex.Effect
			if ok {
				r[statNX]++
				r[statSX] += x
				r[statSY] += ex.Effect
				r[statSXX] += x * x
				r[statSXY] += x * ex.Effect
			}
			for j, v := range r {
				r[j] = join32(split32(v))
			}
		}
	}
	if !changed {
		return
	}
	if len(fresh) > 0 {
		b.used = append(b.used, fresh...)
		slices.Sort(b.used)
		b.used = slices.Compact(b.used)
	}
	b.within()
	f := make([]float32, 2*len(b.sums))
	for i, v := range b.sums {
		f[2*i], f[2*i+1] = split32(v)
	}
	be.Upload(b.param.p, f)
}

// within recomputes wxx and wxy over the used rows.
func (b *baseFit) within() {
	b.wxx, b.wxy = 0, 0
	for _, row := range b.used {
		xx, xy := within(b.sums[row*nStat : (row+1)*nStat])
		b.wxx += xx
		b.wxy += xy
	}
}

// restore reloads the sums from the tensor (after Model.Restore).
func (b *baseFit) restore(t []float32) {
	b.used = b.used[:0]
	for i := range b.sums {
		b.sums[i] = join32(t[2*i], t[2*i+1])
	}
	for row := 1; row < baseRows; row++ {
		if b.sums[row*nStat+statN] > 0 {
			b.used = append(b.used, row)
		}
	}
	b.within()
}

// slope is the shared within-cell slope; ok is false without within-cell
// spread of x.
func (b *baseFit) slope() (float64, bool) {
	g := b.sums[baseGlobalRow*nStat:]
	if g[statNX] < 2 || !(b.wxx > 1e-12*g[statNX]) {
		return 0, false
	}
	s := b.wxy / b.wxx
	return s, !math.IsNaN(s) && !math.IsInf(s, 0)
}

// predict is the context regression's forecast for in (0 before any
// sample).
func (b *baseFit) predict(in *Input) float64 {
	x, ok := evidenceOf(in)
	slope, fitted := b.slope()
	c := b.sums[baseCellRow(in)*nStat:][:nStat]
	switch {
	case c[statNX] > 0 && ok && fitted:
		return (c[statSY]-slope*c[statSX])/c[statNX] + slope*x
	case c[statN] > 0:
		return c[statY] / c[statN]
	}
	g := b.sums[baseGlobalRow*nStat:][:nStat]
	if g[statN] == 0 {
		return 0
	}
	if ok && g[statNX] >= 2 {
		n := g[statNX]
		sxx := g[statSXX] - g[statSX]*g[statSX]/n
		if sxx > 1e-12*n {
			pb := (g[statSXY] - g[statSX]*g[statSY]/n) / sxx
			return (g[statSY]-pb*g[statSX])/n + pb*x
		}
	}
	return g[statY] / g[statN]
}

// BaseMeans returns the additive critic's base forecast for each input: the
// context regression fitted on every fresh example trained on (nil for
// StructureMLP). The model's mean is it plus the text part.
func (m *Model) BaseMeans(ins []*Input) []float64 {
	if m.add == nil {
		return nil
	}
	out := make([]float64, len(ins))
	for i, in := range ins {
		out[i] = m.add.base.predict(in)
	}
	return out
}
