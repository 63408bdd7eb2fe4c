package eval

import (
	"math"
	"testing"

	"github.com/harnessflow/harnessflow/trainer"
	"github.com/harnessflow/harnessflow/trainer/backend"
)

// The additive critic's base is the context regression baseline, fitted in
// closed form from the rows it trains on: on the same rows it forecasts
// what Baselines' context-regression does, for seen cells with and without
// evidence and for unseen cells with evidence, and replayed rows (later
// epochs) do not move it.
func TestAdditiveBaseIsTheContextRegression(t *testing.T) {
	t.Parallel()
	train, held, bs := splitWorld(t)
	// An unseen cell with evidence (the pooled evidence regression) and a
	// seen cell without (its mean effect).
	u := *held[0]
	u.EvolverModel, u.SampleID = "ev-unseen", "unseen"
	ne := *held[1]
	ne.Query, ne.SampleID = "no evidence here", "no-evidence"
	held = append(held, &u, &ne)
	var err error
	if bs, err = Baselines(train, held); err != nil {
		t.Fatal(err)
	}
	var ctx []Prediction
	for _, b := range bs {
		if b.Name == BaselineContext {
			ctx = b.Preds
		}
	}
	m, err := trainer.NewModel(backend.NewCPU(), trainer.ModelConfig{Buckets: 1 << 10, CatBuckets: 16, Dim: 8, Hidden: 8, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	exs := make([]trainer.Example, len(train))
	for i, s := range train {
		exs[i] = trainer.ExampleOf(s)
	}
	ins := make([]*trainer.Input, len(held))
	for i, s := range held {
		ex := trainer.ExampleOf(s)
		ins[i] = &ex.Input
	}
	check := func(when string) {
		t.Helper()
		got := m.BaseMeans(ins)
		for i := range held {
			if math.Abs(got[i]-ctx[i].Mean) > 1e-9 {
				t.Fatalf("%s: row %d (%s): base %v, context regression %v", when, i, held[i].SampleID, got[i], ctx[i].Mean)
			}
		}
	}
	// The second pass replays a third of the rows (counting them twice
	// would move the fit).
	for pass, rows := range [][]trainer.Example{exs, exs[:len(exs)/3]} {
		for lo := 0; lo < len(rows); lo += 64 {
			if _, err := m.TrainStep(rows[lo:min(lo+64, len(rows))]); err != nil {
				t.Fatal(err)
			}
		}
		check(map[int]string{0: "after one epoch", 1: "after replaying a third"}[pass])
		for i := range exs {
			exs[i].Replay = true
		}
	}
	// A restored model forecasts the same (the sums travel in the state).
	r, err := trainer.NewModel(backend.NewCPU(), m.Config())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Restore(m.State()); err != nil {
		t.Fatal(err)
	}
	a, b := m.BaseMeans(ins), r.BaseMeans(ins)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("row %d: restored base %v, saved %v", i, b[i], a[i])
		}
	}
}
