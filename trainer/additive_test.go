package trainer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/harnessflow/harnessflow/trainer/backend"
)

// The text part counts items, whatever the wording: list items and
// paragraphs per section, under each word of its heading.
func TestCountUpdateCountsItemsPerSection(t *testing.T) {
	t.Parallel()
	md := strings.Join([]string{
		"> Run the tests first.",
		"",
		"## Steps",
		"",
		"1. Find the bug.",
		"2) Write a test.",
		"3. Fix it.",
		"",
		"## Checks",
		"- [ ] The test passes.",
		"* [ ] Nothing else broke.",
		"",
		"## Background",
		"",
		"A long paragraph",
		"that spans two lines.",
		"",
		"Another paragraph.",
	}, "\n")
	c := countUpdate(md)
	got := map[string]int{}
	for _, s := range c.sections {
		got[strings.Join(s.heading, " ")] = s.items
	}
	want := map[string]int{"": 1, "steps": 3, "checks": 2, "background": 2}
	for h, n := range want {
		if got[h] != n {
			t.Errorf("section %q: %d items, want %d (all: %v)", h, got[h], n, got)
		}
	}
	if c.items != 8 || len(c.sections) != 4 || c.words["test"] != 2 || c.words["paragraph"] != 2 {
		t.Errorf("items %d, sections %d, count(test) %d, count(paragraph) %d; want 8, 4, 2, 2", c.items, len(c.sections), c.words["test"], c.words["paragraph"])
	}
}

// The additive structure's mean is the base plus a text part that is
// linear in the counts: an update with one more checklist item moves the
// forecast by that item's weight times the context's scale, the same for
// any text around it (what length-normalised n-grams cannot say).
func TestAdditiveTextIsLinearInCounts(t *testing.T) {
	t.Parallel()
	m, err := NewModel(backend.NewCPU(), ModelConfig{Buckets: 1 << 12, CatBuckets: 16, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	in := func(update string) *Input {
		return &Input{Update: update, Query: "task t: pass score=0.5", Kind: "skill", Evolver: "e", Agent: "a", Benchmark: "b"}
	}
	short, long := "## Checks\n- check A\n", "## Checks\n- check A\n- check B\n- check C\n- check D\n"
	one, two := short+"- check X\n", long+"- check X\n"
	p := m.Predict([]*Input{in(short), in(one), in(long), in(two)})
	d1, d2 := p[1].Mean-p[0].Mean, p[3].Mean-p[2].Mean
	if d1 == 0 || math.Abs(d1-d2) > 1e-6*math.Max(1, math.Abs(d1)) {
		t.Fatalf("adding the same item moves a short update by %v and a long one by %v: want equal and non-zero", d1, d2)
	}
}

// The within-round term, on known figures: only deviations from each
// round's mean count, so a shift shared by a round costs nothing.
func TestWithinRoundTermKnownAnswer(t *testing.T) {
	t.Parallel()
	means := []float64{0.1, 0.3, 0.0, 0.5}
	ys := []float64{0.0, 0.4, 1.0, 1.2}
	out := make([]float32, 4*nOut)
	ex := make([]Example, 4)
	for i := range ex {
		out[i*nOut] = float32(means[i])
		ex[i] = Example{Effect: ys[i], Round: []string{"r1", "r1", "r2", "r2"}[i]}
	}
	grad := make([]float32, 4*nOut)
	iv := 1.0 // log-variance 0 in every output
	want := 0.5 * iv * (0.01 + 0.01 + 0.0225 + 0.0225) / 4
	if got := withinRound(out, ex, grad, 1); math.Abs(got-want) > 1e-6 {
		t.Fatalf("loss %v, want %v", got, want)
	}
	for i, d := range []float64{0.1, -0.1, -0.15, 0.15} {
		if g := float64(grad[i*nOut]); math.Abs(g-iv*d/4) > 1e-5 {
			t.Errorf("row %d: gradient %v, want %v", i, g, iv*d/4)
		}
	}
	// A round's shared shift changes nothing; rows alone in their round
	// and a weight ≤ 0 add nothing.
	for i := 2; i < 4; i++ {
		out[i*nOut] += 0.7
	}
	if got := withinRound(out, ex, nil, 1); math.Abs(got-want) > 1e-6 {
		t.Errorf("after shifting round r2: loss %v, want %v", got, want)
	}
	ex[1].Round, ex[3].Round = "r3", "r4"
	if got := withinRound(out, ex, nil, 1); got != 0 {
		t.Errorf("no round of two: loss %v, want 0", got)
	}
	if got := withinRound(out, ex[:2], nil, -1); got != 0 {
		t.Errorf("weight −1: loss %v, want 0", got)
	}
}

// The text shrink: where the update text tells nothing about the effect,
// the critic learns to add nothing to its base (α near 0, predictions
// within a hair of the context regression); where the text sets the
// effect, it keeps its text part (α near 1). A restored model shrinks as
// the saved one; a checkpoint without the tensor restores whole (α = 1).
func TestTextShrinkAddsOnlyWhatTextEarns(t *testing.T) {
	t.Parallel()
	// 400 words, three per update: a word is seen a few dozen times, so a
	// text part can fit noise.
	words := make([]string, 400)
	for i := range words {
		words[i] = fmt.Sprintf("w%03dx", i)
	}
	gen := func(r *rand.Rand, signal bool, n int) []Example {
		ex := make([]Example, n)
		for i := range ex {
			var text strings.Builder
			y := 0.0
			text.WriteString("## Steps\n")
			for j := 0; j < 3; j++ {
				k := r.IntN(len(words))
				fmt.Fprintf(&text, "- %s first\n", words[k])
				if k%2 == 0 {
					y += 0.08
				} else {
					y -= 0.08
				}
			}
			cell := fmt.Sprintf("e%d", r.IntN(4))
			if !signal {
				y = 0.14 * r.NormFloat64()
			}
			y += 0.05*float64(cell[1]-'0') + 0.05*r.NormFloat64()
			ex[i] = Example{Input: Input{Update: text.String(), Query: "task t: pass score=0.5", Kind: "skill",
				Evolver: cell, Agent: "a", Benchmark: "b"}, Effect: y, Label: 1}
		}
		return ex
	}
	train := func(signal bool) *Model {
		m, err := NewModel(backend.NewCPU(), ModelConfig{Buckets: 1 << 12, CatBuckets: 16, Seed: 5})
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(1, 2))
		for step := 0; step < 300; step++ {
			if _, err := m.TrainStep(gen(r, signal, 32)); err != nil {
				t.Fatal(err)
			}
		}
		return m
	}
	noise, signal := train(false), train(true)
	if a := noise.TextShrink(); a > 0.5 {
		t.Errorf("text that carries no signal: α = %.3f, want ≤ 0.5", a)
	}
	if a := signal.TextShrink(); a < 0.7 {
		t.Errorf("text that sets the effect: α = %.3f, want ≥ 0.7", a)
	}
	ins := []*Input{}
	for _, ex := range gen(rand.New(rand.NewPCG(9, 9)), false, 16) {
		ins = append(ins, &ex.Input)
	}
	base, p := noise.BaseMeans(ins), noise.Predict(ins)
	for i := range ins {
		if d := math.Abs(p[i].Mean - base[i]); d > 0.01 {
			t.Errorf("input %d: prediction %.4f is %.4f from the base %.4f under noise text", i, p[i].Mean, d, base[i])
		}
	}
	// A restored model shrinks as the saved one.
	st := noise.State()
	again, err := NewModel(backend.NewCPU(), ModelConfig{Buckets: 1 << 12, CatBuckets: 16, Seed: 6})
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Restore(st); err != nil {
		t.Fatal(err)
	}
	if a, b := again.TextShrink(), noise.TextShrink(); a != b {
		t.Fatalf("restored α %v, saved %v", a, b)
	}
	// A checkpoint from before the tensor (and the averages after it): α = 1.
	old := st
	old.Params = nil
	for _, p := range st.Params {
		if p.Name != "shrink" && p.Name != "scale.avg" && p.Name != "text.avg" {
			old.Params = append(old.Params, p)
		}
	}
	if err := again.Restore(old); err != nil {
		t.Fatalf("restore without the shrink tensor: %v", err)
	}
	if a := again.TextShrink(); a != 1 {
		t.Fatalf("α %v after restoring a checkpoint without the shrink tensor, want 1", a)
	}
}
