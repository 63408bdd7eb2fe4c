package trainer

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/harnessflow/harnessflow/trainer/backend"
)

// averageExamples is a batch of updates whose effect is set by their
// words, with label noise.
func averageExamples(r *rand.Rand, n int) []Example {
	ex := make([]Example, n)
	for i := range ex {
		k := r.IntN(8)
		y := 0.05*float64(k%3) + 0.1*r.NormFloat64()
		ex[i] = Example{Input: Input{Update: "## Steps\n- check " + string(rune('a'+k)) + " twice\n", Query: "task t: pass score=0.5",
			Kind: "skill", Evolver: "e", Agent: "a", Benchmark: "b"}, Effect: y, Label: 1, Round: string(rune('A' + i/4))}
	}
	return ex
}

// The averages follow avg ← b_t·avg + (1 − b_t)·w after every step up to
// averageRamp, then every fourth (b_t the product of the β_s since the
// previous update), and Predict reads them: the host's own average of the downloaded iterates
// gives the same tables and, through a model restored with them as its
// weights and no average, the same predictions.
func TestAverageIsTheMovingAverageOfTheIterates(t *testing.T) {
	t.Parallel()
	cfg := ModelConfig{Buckets: 1 << 10, CatBuckets: 16, Seed: 3, AverageDecay: 0.9}
	m, err := NewModel(backend.NewCPU(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if m.AverageDecay() != 0.9 {
		t.Fatalf("AverageDecay %v, want 0.9", m.AverageDecay())
	}
	download := func(p *param) []float64 {
		f := make([]float32, p.n)
		m.be.Download(f, p.p)
		out := make([]float64, p.n)
		for i, v := range f {
			out[i] = float64(v)
		}
		return out
	}
	wantS, wantT := download(m.add.scale.table), download(m.add.text.table)
	r := rand.New(rand.NewPCG(1, 1))
	for step := 1; step <= averageRamp+22; step++ { // past the ramp, ending between two updates
		if _, err := m.TrainStep(averageExamples(r, 32)); err != nil {
			t.Fatal(err)
		}
		from := step
		if step > averageRamp {
			if step%averageEvery != 0 {
				continue
			}
			from = step - averageEvery + 1
		}
		b := 1.0
		for s := from; s <= step; s++ {
			b *= math.Min(0.9, float64(1+s)/float64(10+s))
		}
		for _, pr := range []struct {
			want []float64
			w    *param
		}{{wantS, m.add.scale.table}, {wantT, m.add.text.table}} {
			for i, v := range download(pr.w) {
				pr.want[i] = b*pr.want[i] + (1-b)*v
			}
		}
	}
	for _, pr := range []struct {
		name string
		want []float64
		got  *param
	}{{"scale", wantS, m.add.avg.scale}, {"text", wantT, m.add.avg.text}} {
		var worst float64
		for i, v := range download(pr.got) {
			worst = math.Max(worst, math.Abs(v-pr.want[i]))
		}
		if worst > 1e-5 {
			t.Errorf("%s average is %.2g off the host's moving average of the iterates", pr.name, worst)
		}
	}
	// The averages differ from the last iterate, and Predict reads them.
	var moved float64
	last, avg := download(m.add.text.table), download(m.add.avg.text)
	for i := range last {
		moved = math.Max(moved, math.Abs(last[i]-avg[i]))
	}
	if moved < 1e-4 {
		t.Fatalf("the text average is within %.2g of the last iterate: nothing to tell apart", moved)
	}
	st := m.State()
	flat := st
	flat.Params = nil
	for _, p := range st.Params {
		switch p.Name {
		case "scale.avg", "text.avg":
			continue
		case "scale", "text":
			for _, a := range st.Params {
				if a.Name == p.Name+".avg" {
					p.P = a.P
				}
			}
		}
		flat.Params = append(flat.Params, p)
	}
	off := cfg
	off.AverageDecay = -1
	plain, err := NewModel(backend.NewCPU(), off)
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Restore(flat); err != nil {
		t.Fatal(err)
	}
	ins := []*Input{}
	for _, ex := range averageExamples(rand.New(rand.NewPCG(7, 7)), 16) {
		ins = append(ins, &ex.Input)
	}
	got, want := m.Predict(ins), plain.Predict(ins)
	for i := range ins {
		if math.Abs(got[i].Mean-want[i].Mean) > 1e-6 {
			t.Errorf("input %d: Predict %.6f, the averaged tables as weights give %.6f", i, got[i].Mean, want[i].Mean)
		}
	}
}

// A checkpoint travels with its averages (a restored model predicts as
// the saved one); one written without them restores with the averages at
// its weights, and one with them restores into a model without averaging.
func TestAverageRestores(t *testing.T) {
	t.Parallel()
	cfg := ModelConfig{Buckets: 1 << 10, CatBuckets: 16, Seed: 3}
	m, err := NewModel(backend.NewCPU(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if m.AverageDecay() != DefaultAverageDecay {
		t.Fatalf("default AverageDecay %v, want %v", m.AverageDecay(), DefaultAverageDecay)
	}
	r := rand.New(rand.NewPCG(2, 2))
	for step := 0; step < 30; step++ {
		if _, err := m.TrainStep(averageExamples(r, 32)); err != nil {
			t.Fatal(err)
		}
	}
	ins := []*Input{}
	for _, ex := range averageExamples(rand.New(rand.NewPCG(7, 7)), 16) {
		ins = append(ins, &ex.Input)
	}
	saved := m.Predict(ins)
	st := m.State()
	fresh := func(c ModelConfig) *Model {
		c.Seed = 99
		x, err := NewModel(backend.NewCPU(), c)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	again := fresh(cfg)
	if err := again.Restore(st); err != nil {
		t.Fatal(err)
	}
	for i, p := range again.Predict(ins) {
		if p.Mean != saved[i].Mean {
			t.Fatalf("input %d: restored model predicts %v, saved %v", i, p.Mean, saved[i].Mean)
		}
	}
	// Without the averages: they start at the weights, so the model
	// predicts as one without averaging.
	old := st
	old.Params = old.Params[:len(old.Params)-2]
	if err := again.Restore(old); err != nil {
		t.Fatalf("restore without the averages: %v", err)
	}
	offCfg := cfg
	offCfg.AverageDecay = -1
	off := fresh(offCfg)
	if err := off.Restore(st); err != nil {
		t.Fatalf("restore with the averages into a model without: %v", err)
	}
	if off.AverageDecay() != 0 {
		t.Fatalf("AverageDecay %v with averaging off, want 0", off.AverageDecay())
	}
	a, b := again.Predict(ins), off.Predict(ins)
	for i := range ins {
		if a[i].Mean != b[i].Mean {
			t.Fatalf("input %d: averages restored at the weights predict %v, the weights alone %v", i, a[i].Mean, b[i].Mean)
		}
	}
	for _, bad := range []ModelConfig{{AverageDecay: 1}, {WeightDecay: -1}} {
		if _, err := NewModel(backend.NewCPU(), bad); err == nil {
			t.Fatalf("%+v accepted", bad)
		}
	}
}

// BenchmarkTrainStepAverage is BenchmarkTrainStep with the moving average
// off and on (the default), in one process: what the average costs a step.
func BenchmarkTrainStepAverage(b *testing.B) {
	for _, c := range []struct {
		name  string
		decay float64
	}{{"off", -1}, {"on", DefaultAverageDecay}} {
		b.Run(c.name, func(b *testing.B) { benchTrainSteps(b, ModelConfig{AverageDecay: c.decay}) })
	}
}
