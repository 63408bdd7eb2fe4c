package trainer

import (
	"fmt"
	"math/rand/v2"
)

// SyntheticExamples returns n deterministic examples (from seed) whose effect
// and label depend on a known marker token in the update text; benchmarks and
// tests use them.
func SyntheticExamples(seed uint64, n int) []Example {
	return synth(rand.New(rand.NewPCG(seed, seed^0x5bd1e995)), n)
}

// synth generates a stream whose effect and label depend on a known marker
// token in the update text: "memoize" helps, "skiptests" hurts, neither is
// neutral (the majority class, 40%).
func synth(r *rand.Rand, n int) []Example {
	filler := []string{"update", "the", "prompt", "to", "check", "output", "before", "answer", "and", "plan", "steps", "carefully", "read", "files"}
	out := make([]Example, n)
	for i := range out {
		var words []string
		for j := 0; j < 8+r.IntN(8); j++ {
			words = append(words, filler[r.IntN(len(filler))])
		}
		ex := Example{Label: LabelNeutral, Effect: r.NormFloat64() * 0.02}
		switch u := r.Float64(); {
		case u < 0.3:
			words[r.IntN(len(words))] = "memoize"
			ex.Label, ex.Effect = LabelPositive, 0.3+r.NormFloat64()*0.05
		case u < 0.6:
			words[r.IntN(len(words))] = "skiptests"
			ex.Label, ex.Effect = LabelNegative, -0.3+r.NormFloat64()*0.05
		}
		text := ""
		for _, w := range words {
			text += w + " "
		}
		ex.Input = Input{Update: text, Query: fmt.Sprintf("task %d failed", r.IntN(50)), Kind: []string{"skill", "prompt", "memory"}[r.IntN(3)],
			Evolver: fmt.Sprintf("evolver-%d", r.IntN(3)), Agent: fmt.Sprintf("agent-%d", r.IntN(3)), Benchmark: "swe"}
		out[i] = ex
	}
	return out
}
