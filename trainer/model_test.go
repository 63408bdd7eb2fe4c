package trainer

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/trainer/backend"
)

func tinyConfig(seed uint64) ModelConfig {
	return ModelConfig{Buckets: 64, CatBuckets: 8, Dim: 6, Hidden: 5, Seed: seed}
}

func TestGradientsMatchFiniteDifferences(t *testing.T) {
	t.Parallel()
	m, err := NewModel(backend.NewCPU(), tinyConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	batch := []Example{
		{Input: Input{Update: "retry the flaky step", Query: "tests fail", Kind: "skill", Evolver: "e1", Agent: "a1", Benchmark: "b"}, Effect: 0.3, Label: LabelPositive},
		{Input: Input{Update: "delete all tests", Kind: "prompt", Evolver: "e2", Agent: "a1", Benchmark: "b"}, Effect: -0.4, Label: LabelNegative},
		{Input: Input{Update: "rename a variable", Query: "lint", Kind: "memory", Evolver: "e1", Agent: "a2", Benchmark: "c"}, Effect: 0.01, Label: LabelNeutral},
		{Input: Input{Update: "cache results", Kind: "tool", Evolver: "e3", Agent: "a2", Benchmark: "c"}, Effect: 0.2, Label: LabelPositive},
	}
	// Two rounds of two: the within-round term's gradient is checked too.
	for i := range batch {
		batch[i].Round = []string{"r1", "r1", "r2", "r2"}[i]
	}
	r0 := rand.New(rand.NewPCG(3, 3))
	// A couple of steps first so that the moments and weights are not at init.
	for i := 0; i < 3; i++ {
		if _, err := m.TrainStep(batch); err != nil {
			t.Fatal(err)
		}
	}
	if m.add != nil {
		// The text part starts near 0, so the scale's gradient (∝ text)
		// would be too small to check: give the text rows sizeable values.
		tx := make([]float32, m.add.text.table.n)
		for i := range tx {
			tx[i] = float32(r0.Float64() - 0.5)
		}
		m.be.Upload(m.add.text.table.p, tx)
	}
	m.computeGrads(batch)
	const eps, atol, rtol = 3e-3, 1e-3, 0.05
	r := rand.New(rand.NewPCG(9, 9))
	for _, p := range m.params {
		if p.frozen { // fitted in closed form (basefit_test.go)
			continue
		}
		g := make([]float32, p.n)
		m.be.Download(g, p.g)
		w := make([]float32, p.n)
		m.be.Download(w, p.p)
		// Check the largest-gradient entries (they exercise the used rows of
		// the embedding) plus a few random ones.
		var cand []int
		best := 0
		for i := range g {
			if math.Abs(float64(g[i])) > math.Abs(float64(g[best])) {
				best = i
			}
		}
		cand = append(cand, best)
		for i := 0; i < 6; i++ {
			cand = append(cand, r.IntN(p.n))
		}
		if math.Abs(float64(g[best])) < 1e-4 {
			t.Fatalf("%s: gradient is all ~0 (max |g| = %g)", p.name, g[best])
		}
		for _, i := range cand {
			orig := w[i]
			w[i] = orig + eps
			m.be.Upload(p.p, w)
			lp := m.Loss(batch).Total
			w[i] = orig - eps
			m.be.Upload(p.p, w)
			lm := m.Loss(batch).Total
			w[i] = orig
			m.be.Upload(p.p, w)
			fd := (lp - lm) / (2 * eps)
			if d := math.Abs(fd - float64(g[i])); d > atol+rtol*math.Abs(fd) {
				t.Errorf("%s[%d]: analytic %g, finite difference %g", p.name, i, g[i], fd)
			}
		}
	}
}

func accuracy(m *Model, data []Example) (acc, mae float64) {
	ins := make([]*Input, len(data))
	for i := range data {
		ins[i] = &data[i].Input
	}
	for i, p := range m.Predict(ins) {
		if argmax(p.Probs) == data[i].Label {
			acc++
		}
		mae += math.Abs(p.Mean - data[i].Effect)
	}
	return acc / float64(len(data)), mae / float64(len(data))
}

func TestModelLearnsKnownFeature(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(42, 1))
	train, held := synth(r, 4800), synth(r, 400)
	m, err := NewModel(backend.NewCPU(), ModelConfig{Buckets: 1 << 12, CatBuckets: 16, Dim: 16, Hidden: 16, Seed: 3, LR: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	majority := 0.0
	var counts [3]float64
	for _, ex := range held {
		counts[ex.Label]++
	}
	for _, c := range counts {
		majority = math.Max(majority, c/float64(len(held)))
	}
	initial := m.Loss(held)
	acc0, _ := accuracy(m, held)
	const bs = 32
	var first, last float64
	steps := len(train) / bs
	for s := 0; s < steps; s++ {
		l, err := m.TrainStep(train[s*bs : (s+1)*bs])
		if err != nil {
			t.Fatal(err)
		}
		if s < 10 {
			first += l.Total / 10
		}
		if s >= steps-10 {
			last += l.Total / 10
		}
	}
	final := m.Loss(held)
	acc, mae := accuracy(m, held)
	t.Logf("train loss %.3f -> %.3f; held-out loss %.3f -> %.3f; acc %.3f -> %.3f (majority %.3f); MAE %.3f",
		first, last, initial.Total, final.Total, acc0, acc, majority, mae)
	if !(last < first-0.5) {
		t.Errorf("training loss did not fall clearly: first %.3f, last %.3f", first, last)
	}
	if !(final.Total < initial.Total-0.5) {
		t.Errorf("held-out loss did not fall clearly: %.3f -> %.3f", initial.Total, final.Total)
	}
	if acc < majority+0.3 {
		t.Errorf("held-out accuracy %.3f does not clearly beat the majority class %.3f", acc, majority)
	}
	if mae > 0.1 {
		t.Errorf("held-out effect MAE %.3f, want < 0.1", mae)
	}
}

func TestModelDeterministicAndStateRoundTrip(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 5))
	data := synth(r, 96)
	run := func() *Model {
		m, err := NewModel(backend.NewCPU(), tinyConfig(7))
		if err != nil {
			t.Fatal(err)
		}
		for s := 0; s < 3; s++ {
			if _, err := m.TrainStep(data[s*32 : (s+1)*32]); err != nil {
				t.Fatal(err)
			}
		}
		return m
	}
	a, b := run(), run()
	sa, sb := a.State(), b.State()
	for i := range sa.Params {
		for j := range sa.Params[i].P {
			if sa.Params[i].P[j] != sb.Params[i].P[j] {
				t.Fatalf("same seed, same data, different weights at %s[%d]", sa.Params[i].Name, j)
			}
		}
	}
	// Restore into a fresh model with another seed: it must continue exactly.
	c, _ := NewModel(backend.NewCPU(), tinyConfig(99))
	if err := c.Restore(sa); err != nil {
		t.Fatal(err)
	}
	la, _ := a.TrainStep(data[:32])
	lc, _ := c.TrainStep(data[:32])
	if la != lc {
		t.Fatalf("restored model diverges: %+v vs %+v", la, lc)
	}
	bad := tinyConfig(1)
	bad.Dim = 7
	d, _ := NewModel(backend.NewCPU(), bad)
	if err := d.Restore(sa); err == nil {
		t.Fatal("restoring into a different shape must fail")
	}
}

// TestStreamedCheckpointEqualsCopied: a checkpoint whose tensors stream from
// the live model (what the trainer writes) is byte-identical to one written
// from a full copy of the model's state, and loads back to the same model.
func TestStreamedCheckpointEqualsCopied(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	data := synth(r, 64)
	m, err := NewModel(backend.NewCPU(), tinyConfig(4))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.TrainStep(data[:32]); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	base := func() *Checkpoint {
		return &Checkpoint{Index: 1, ModelVersion: "t-v1", Step: 1, Topic: "hf.samples", Offsets: map[int32]int64{0: 32}, CreatedAt: at}
	}
	copied := base()
	copied.Models = []ModelState{m.State()}
	streamed := base()
	streamed.Models = []ModelState{m.Shape()}
	var buf []float32
	streamed.tensor = func(model, param, which int) []float32 { return m.Tensor(param, which, &buf) }
	save := func(ck *Checkpoint) ([]byte, *CheckpointStore) {
		s := &CheckpointStore{dir: t.TempDir(), keep: 3, log: zerolog.Nop()}
		path, err := s.Save(ck)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b, s
	}
	a, _ := save(copied)
	b, store := save(streamed)
	if !bytes.Equal(a, b) {
		t.Fatalf("streamed checkpoint differs from the copied one (%d vs %d bytes)", len(b), len(a))
	}
	back, _, err := store.LoadLatest()
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(back.Models[0].Params) != fmt.Sprint(copied.Models[0].Params) {
		t.Fatal("the streamed checkpoint loads back to other tensors")
	}
}

// TestCheckpointOfCPUModelCopiesNoTensor: on the CPU backend a streamed
// checkpoint reads the tensors in place. The trainer's peak memory was its
// resting heap plus one host copy of the largest tensor (the embedding table)
// whenever a checkpoint was being written; here writing one allocates less
// than a quarter of that table (8 MiB; the file's 1 MiB write buffer is
// the most of what it allocates), and Tensor aliases the weights (a training
// step shows through it).
func TestCheckpointOfCPUModelCopiesNoTensor(t *testing.T) {
	cfg := ModelConfig{Buckets: 1 << 18, CatBuckets: 8, Dim: 8, Hidden: 8, Seed: 3}
	m, err := NewModel(backend.NewCPU(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var buf []float32
	w := m.Tensor(0, 0, &buf)
	w0 := append([]float32(nil), w...)
	if _, err := m.TrainStep(synth(rand.New(rand.NewPCG(1, 2)), 32)); err != nil {
		t.Fatal(err)
	}
	if buf != nil {
		t.Fatalf("Tensor on the CPU backend grew the buffer to %d floats", cap(buf))
	}
	st := m.State()
	moved := 0
	for i, v := range w {
		if v != st.Params[0].P[i] {
			t.Fatalf("after a step, Tensor element %d = %v, State has %v", i, v, st.Params[0].P[i])
		}
		if v != w0[i] {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("a training step changed no element seen through Tensor")
	}
	tableBytes := uint64(len(w)) * 4
	s := &CheckpointStore{dir: t.TempDir(), keep: 2, log: zerolog.Nop()}
	least := uint64(math.MaxUint64)
	for try := int64(1); try <= 3; try++ {
		ck := &Checkpoint{Index: try, ModelVersion: fmt.Sprintf("t-v%d", try), Step: 1, Topic: "hf.samples",
			Offsets: map[int32]int64{0: 32}, CreatedAt: time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)}
		ck.Models = []ModelState{m.Shape()}
		ck.tensor = func(_, param, which int) []float32 { return m.Tensor(param, which, &buf) }
		runtime.GC()
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		if _, err := s.Save(ck); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&b)
		least = min(least, b.TotalAlloc-a.TotalAlloc)
	}
	if least > tableBytes/4 {
		t.Fatalf("writing a checkpoint allocated %d bytes, the embedding table is %d: a tensor was copied", least, tableBytes)
	}
	t.Logf("writing a checkpoint allocated %d bytes; the embedding table is %d", least, tableBytes)
}

// TestHostTensorBytes: the trainer reports its models' tensors (4 float32
// tensors per parameter: weights, gradients, two AdamW moments) as host
// memory on the CPU backend; the train command sizes its soft memory limit
// from it.
func TestHostTensorBytes(t *testing.T) {
	t.Parallel()
	mc := ModelConfig{Buckets: 64, CatBuckets: 8, Dim: 6, Hidden: 5}
	tr, err := New(Config{Brokers: []string{"127.0.0.1:1"}, ClickHouse: "127.0.0.1:1", Name: "mem", CheckpointDir: t.TempDir(),
		Listen: "off", Ensemble: 3, Model: mc}, WithLogger(zerolog.Nop()), WithBackend(backend.NewCPU()))
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewModel(backend.NewCPU(), mc)
	if err != nil {
		t.Fatal(err)
	}
	var floats int64
	for _, p := range m.State().Params {
		floats += int64(len(p.P) + len(p.M) + len(p.V) + len(p.P)) // the gradient is P's size
	}
	if m.TensorBytes() != 4*floats {
		t.Fatalf("TensorBytes %d, the state holds %d float32s", m.TensorBytes(), floats)
	}
	if got := tr.HostTensorBytes(); got != 3*m.TensorBytes() {
		t.Fatalf("HostTensorBytes %d, want 3 models x %d", got, m.TensorBytes())
	}
}

// TestPrecisionWeightsTheEffectTerm: equal precisions (or none) leave the
// loss as it was; unequal ones weigh each example's NLL by its precision
// over the batch's mean, and never the label's cross-entropy.
func TestPrecisionWeightsTheEffectTerm(t *testing.T) {
	t.Parallel()
	m, err := NewModel(backend.NewCPU(), smallModel())
	if err != nil {
		t.Fatal(err)
	}
	exs := synth(rand.New(rand.NewPCG(9, 10)), 2)
	a, b := exs[0], exs[1]
	la, lb := m.Loss([]Example{a}), m.Loss([]Example{b})
	plain := m.Loss([]Example{a, b})
	a.Precision, b.Precision = 5, 5
	if got := m.Loss([]Example{a, b}); got != plain {
		t.Fatalf("equal precisions: %+v, unweighted %+v", got, plain)
	}
	a.Precision, b.Precision = 2, 1 // weights 4/3 and 2/3
	got := m.Loss([]Example{a, b})
	if want := (4.0/3*la.NLL + 2.0/3*lb.NLL) / 2; math.Abs(got.NLL-want) > 1e-9 {
		t.Fatalf("weighted NLL %v, want %v", got.NLL, want)
	}
	if want := (la.CE + lb.CE) / 2; math.Abs(got.CE-want) > 1e-9 {
		t.Fatalf("CE %v, want the unweighted %v", got.CE, want)
	}
	b.Precision = 0 // unknown: the mean of the others
	if got := m.Loss([]Example{a, b}); math.Abs(got.NLL-plain.NLL) > 1e-12 {
		t.Fatalf("one known precision: %v, want the unweighted %v", got.NLL, plain.NLL)
	}

	s := &schemas.LabeledSample{Update: "u", Label: schemas.LabelPositive, Effect: 0.2, NBefore: 7, NAfter: 5}
	if ex := ExampleOf(s); ex.Precision != 5 || ex.Label != LabelPositive || ex.Effect != 0.2 {
		t.Fatalf("ExampleOf: %+v", ex)
	}
	tr := replayTrainer(t, nil, func(c *Config) { c.EffectWeighting = WeightNone })
	if ex := tr.exampleOf(s); ex.Precision != 0 {
		t.Fatalf("--effect-weighting none: precision %v", ex.Precision)
	}
	bad := Config{Brokers: []string{"b"}, ClickHouse: "c", CheckpointDir: "d", EffectWeighting: "variance"}
	bad.setDefaults()
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "--effect-weighting") {
		t.Fatalf("unknown weighting: %v", err)
	}
}
