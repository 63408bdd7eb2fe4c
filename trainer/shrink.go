package trainer

import (
	"math"

	"github.com/harnessflow/harnessflow/trainer/backend"
)

// textShrink is how much of its text part the additive critic adds to the
// base when it predicts: mean = base + α · text. Once the text part's
// out-of-sample help is established — z = Σ w·r·text / √Σ (w·r·text)² ≥
// shrinkZ, r = y − base — α is 1: the text part whole. Until then α is the
// weighted least-squares coefficient of the text part on what the base
// leaves,
//
//	α = clamp(Σ w·r·text / Σ w·text², 0, 1),
//
// so text whose help is not shown moves a forecast only as far as it has
// earned. Every sum is measured prequentially: each fresh example (not a replay) is scored by
// the text part before the model takes a step on it, and by the base
// before its sums count it, so every term is out of sample. The sums decay
// with a half-life of shrinkHalfLife fresh examples, so α follows the text
// part as it learns. w is the example's precision weight (1 without one).
//
// Where the update text carries nothing the base does not (the simulator's
// control arm, a benchmark whose updates do not matter), α goes to 0 and
// the critic answers the context regression — it adds to its baseline
// what it has earned out of sample and no more. Training is unaffected:
// the losses and gradients use the whole text part.
//
// The three sums travel in checkpoints in a frozen tensor ("shrink", three
// float32 pairs, hi + lo), so a restored model predicts as the saved one.
// A checkpoint written before the tensor existed restores with empty sums
// (α = 1: the text part whole, as that model predicted).
type textShrink struct {
	param         *param
	srt, stt, szz float64
}

// shrinkHalfLife is the sums' half-life in fresh examples; shrinkZ the
// z-score past which the text part counts whole.
const (
	shrinkHalfLife = 4096
	shrinkZ        = 3
)

var shrinkDecay = math.Exp2(-1.0 / shrinkHalfLife)

// alpha is the text part's weight in predictions.
func (s *textShrink) alpha() float64 {
	if !(s.stt > 0) {
		return 1
	}
	if s.szz > 0 && s.srt/math.Sqrt(s.szz) >= shrinkZ {
		return 1
	}
	a := s.srt / s.stt
	if math.IsNaN(a) {
		return 1
	}
	return min(max(a, 0), 1)
}

// observe adds the fresh examples of a batch: resid[i] = y − base before
// the batch, text[i] the text part before the step; fresh[i] false skips i.
func (s *textShrink) observe(be backend.Backend, batch []Example, fresh []bool, resid, text []float64) {
	changed := false
	for i := range batch {
		if !fresh[i] {
			continue
		}
		w := batch[i].Precision
		if !(w > 0) || math.IsInf(w, 0) {
			w = 1
		}
		s.srt = s.srt*shrinkDecay + w*resid[i]*text[i]
		s.stt = s.stt*shrinkDecay + w*text[i]*text[i]
		z := w * resid[i] * text[i]
		s.szz = s.szz*shrinkDecay + z*z
		changed = true
	}
	if !changed {
		return
	}
	s.srt, s.stt, s.szz = join32(split32(s.srt)), join32(split32(s.stt)), join32(split32(s.szz))
	f := make([]float32, 6)
	f[0], f[1] = split32(s.srt)
	f[2], f[3] = split32(s.stt)
	f[4], f[5] = split32(s.szz)
	be.Upload(s.param.p, f)
}

// restore reloads the sums from the tensor (after Model.Restore).
func (s *textShrink) restore(t []float32) {
	s.srt, s.stt, s.szz = join32(t[0], t[1]), join32(t[2], t[3]), join32(t[4], t[5])
}

// TextShrink is the additive critic's text weight α (1 for StructureMLP).
func (m *Model) TextShrink() float64 {
	if m.add == nil {
		return 1
	}
	return m.add.shrink.alpha()
}

// shrinkObs is what textShrink needs from before a training step.
type shrinkObs struct {
	fresh []bool
	resid []float64
}

// shrinkBefore records, for each fresh example of batch, what the base
// leaves of its effect before the base counts it.
func (a *additive) shrinkBefore(batch []Example) shrinkObs {
	o := shrinkObs{fresh: make([]bool, len(batch)), resid: make([]float64, len(batch))}
	for i := range batch {
		ex := &batch[i]
		if ex.Replay || math.IsNaN(ex.Effect) || math.IsInf(ex.Effect, 0) {
			continue
		}
		o.fresh[i], o.resid[i] = true, ex.Effect-a.base.predict(&ex.Input)
	}
	return o
}

// shrinkAfter adds the batch's fresh examples to the shrink's sums, with
// the text part of the forward pass computeGrads ran before the step.
func (a *additive) shrinkAfter(be backend.Backend, batch []Example, o shrinkObs) {
	text := make([]float64, len(batch))
	for i := range batch {
		if o.fresh[i] {
			text[i] = a.textPart(i)
		}
	}
	a.shrink.observe(be, batch, o.fresh, o.resid, text)
}
