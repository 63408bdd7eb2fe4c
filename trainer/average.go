package trainer

import (
	"slices"

	"github.com/harnessflow/harnessflow/trainer/backend"
)

// Polyak averaging of the additive critic's text part
// (ModelConfig.AverageDecay). With noisy labels a constant-rate optimizer
// leaves the last iterate wandering around the optimum: each step follows
// one batch's noise. Predictions therefore read an exponential moving
// average of the scale and text tables,
//
//	avg ← b_t·avg + (1 − b_t)·w,  b_t = Π_s min(β, (1 + s)/(10 + s)),
//
// over the steps s since the previous update: after every optimizer step t
// up to averageRamp (40), then after every fourth (averageEvery; the ramp
// lets the first steps count before β's horizon is full). Training, its losses and gradients, and the text
// shrink's out-of-sample sums use the iterate itself; only Predict reads
// the average. The averages are frozen tensors ("scale.avg", "text.avg",
// after "shrink"), so they travel in checkpoints and a restored model
// predicts as the saved one; a checkpoint written without them restores
// with the average at its weights.

// DefaultAverageDecay is ModelConfig.AverageDecay's default: a horizon of
// about 50 optimizer steps (bench/README.md, "The critic").
const DefaultAverageDecay = 0.98

// average holds the averaged tables.
type average struct {
	decay       float64
	scale, text *param
	// one is a 1-element buffer holding 1: the update is a rank-1 Gemm.
	one backend.Buffer
}

// newAverage allocates the averages of a's tables, starting at their
// initial weights.
func (m *Model) newAverage(a *additive, scaleInit, textInit []float32) {
	av := &average{decay: m.cfg.AverageDecay}
	av.scale = m.newParam("scale.avg", slices.Clone(scaleInit))
	av.text = m.newParam("text.avg", slices.Clone(textInit))
	av.scale.frozen, av.text.frozen = true, true
	av.one = m.be.Alloc(1)
	m.be.Upload(av.one, []float32{1})
	a.avg = av
}

// averageEvery is how many optimizer steps apart the averages are
// updated once past averageRamp. The pass over the text table costs 5 to
// 8 % of a step on the CPU (bench/README.md, "What the average costs a
// step"); every 4th step it costs a quarter of that, and the average of
// the iterates sampled every 4th step, at the decay of 4 steps, follows
// the same horizon.
const averageEvery = 4

// averageRamp is the last step after which the averages are updated every
// step (a multiple of averageEvery): while β_s ramps up the average moves
// most, and a model trained or checkpointed after its first steps predicts
// from them, not from its initial weights.
const averageRamp = 10 * averageEvery

// averageFactor is the weight the averages keep at step t: Π β_s over the
// steps s since the previous update, β_s = min(decay, (1 + s)/(10 + s)).
// ok is false at a step that does not update them.
func averageFactor(decay float64, t int) (b float64, ok bool) {
	from := t
	if t > averageRamp {
		if t%averageEvery != 0 {
			return 0, false
		}
		from = t - averageEvery + 1
	}
	b = 1
	for s := from; s <= t; s++ {
		b *= min(decay, float64(1+s)/float64(10+s))
	}
	return b, true
}

// update moves the averages towards the tables after optimizer step t (t
// counts from 1): every step up to averageRamp, every averageEvery steps
// after.
func (av *average) update(be backend.Backend, a *additive, t int) {
	b, ok := averageFactor(av.decay, t)
	if !ok {
		return
	}
	for _, pr := range [][2]*param{{av.scale, a.scale.table}, {av.text, a.text.table}} {
		avg, w := pr[0], pr[1]
		if l, ok := be.(backend.Lerper); ok {
			l.Lerp(avg.p, w.p, w.n, float32(b))
			continue
		}
		// avg (1×n) = (1−b)·one (1×1)·w (1×n) + b·avg
		be.Gemm(false, false, 1, w.n, 1, float32(1-b), av.one, w.p, float32(b), avg.p)
	}
}

// AverageDecay is the decay of the weights Predict reads (0: the last
// iterate).
func (m *Model) AverageDecay() float64 {
	if m.add == nil || m.add.avg == nil {
		return 0
	}
	return m.add.avg.decay
}

// matchAverage lines a checkpoint's tensors up with the model's averages:
// a checkpoint written without them (before they existed, or with
// averaging off) gets them at its tables' weights; one written with them,
// restored into a model without, drops them.
func (m *Model) matchAverage(ps []ParamState) []ParamState {
	has := len(ps) >= 2 && ps[len(ps)-2].Name == "scale.avg" && ps[len(ps)-1].Name == "text.avg"
	want := m.add != nil && m.add.avg != nil
	switch {
	case want && !has:
		var sc, tx *ParamState
		for i := range ps {
			switch ps[i].Name {
			case "scale":
				sc = &ps[i]
			case "text":
				tx = &ps[i]
			}
		}
		if sc == nil || tx == nil {
			return ps // not the additive structure's: Restore says so
		}
		zero := func(n int) []float32 { return make([]float32, n) }
		return append(slices.Clone(ps),
			ParamState{Name: "scale.avg", P: slices.Clone(sc.P), M: zero(len(sc.P)), V: zero(len(sc.P))},
			ParamState{Name: "text.avg", P: slices.Clone(tx.P), M: zero(len(tx.P)), V: zero(len(tx.P))})
	case has && !want:
		return ps[:len(ps)-2]
	}
	return ps
}
