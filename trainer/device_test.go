package trainer

import (
	"math"
	"math/rand/v2"
	"net/http/httptest"
	"testing"

	"github.com/rs/zerolog"

	"github.com/harnessflow/harnessflow/trainer/backend"
)

// The model on the GPU (issue 27, item 6): these tests and the benchmark run
// on a machine with an NVIDIA GPU (trainer/gpu_check.sh runs them there in
// one call) and skip elsewhere; a machine with a GPU whose backend does not
// open fails them.

// openGPU opens the CUDA backend for a test, or skips without a GPU.
func openGPU(tb testing.TB) backend.Backend {
	tb.Helper()
	if backend.OpenCUDA == nil {
		tb.Fatal("backend.OpenCUDA is nil: the CUDA backend is not registered")
	}
	be, err := backend.OpenCUDA()
	if err != nil {
		if !backend.NVIDIAPresent() {
			tb.Skipf("no NVIDIA GPU on this machine: %v", err)
		}
		tb.Fatalf("an NVIDIA GPU is present but the CUDA backend does not open: %v", err)
	}
	tb.Cleanup(func() {
		if err := be.Close(); err != nil {
			tb.Errorf("close cuda backend: %v", err)
		}
	})
	return be
}

// closeTo reports |a − b| ≤ tol·(1 + |a|).
func closeTo(a, b, tol float64) bool { return math.Abs(a-b) <= tol*(1+math.Abs(a)) }

func predsClose(t *testing.T, what string, a, b []Prediction, tol float64) {
	t.Helper()
	for i := range a {
		if !closeTo(a[i].Mean, b[i].Mean, tol) || !closeTo(a[i].Std, b[i].Std, tol) {
			t.Fatalf("%s: input %d: mean %v std %v vs mean %v std %v (tolerance %g)", what, i, a[i].Mean, a[i].Std, b[i].Mean, b[i].Std, tol)
		}
		for k := range a[i].Probs {
			if !closeTo(a[i].Probs[k], b[i].Probs[k], tol) {
				t.Fatalf("%s: input %d: probs %v vs %v", what, i, a[i].Probs, b[i].Probs)
			}
		}
	}
}

// TestModelCUDAParityWithCPU: trainer.Model (features, crosses, embedding
// bag, MLP, losses, AdamW) takes the same training steps on the GPU as on the
// CPU up to float rounding, and a checkpoint written from the GPU model
// restores on the CPU and on the GPU with the same predictions.
func TestModelCUDAParityWithCPU(t *testing.T) {
	t.Parallel()
	gpu := openGPU(t)
	cfg := smallModel()
	cfg.Seed, cfg.Crosses = 3, true
	mc, err := NewModel(backend.NewCPU(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	mg, err := NewModel(gpu, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 8))
	exs := synth(r, 10*64)
	for s := 0; s < 10; s++ {
		b := exs[s*64 : (s+1)*64]
		lc, err := mc.TrainStep(b)
		if err != nil {
			t.Fatal(err)
		}
		lg, err := mg.TrainStep(b)
		if err != nil {
			t.Fatal(err)
		}
		if !closeTo(lc.Total, lg.Total, 1e-3) || !closeTo(lc.NLL, lg.NLL, 1e-3) || !closeTo(lc.CE, lg.CE, 1e-3) {
			t.Fatalf("step %d: CPU losses %+v, GPU %+v", s+1, lc, lg)
		}
	}
	ins := make([]*Input, 64)
	for i := range ins {
		ins[i] = &exs[i].Input
	}
	onGPU := mg.Predict(ins)
	predsClose(t, "after 10 steps, CPU vs GPU", mc.Predict(ins), onGPU, 2e-3)

	store, err := NewCheckpointStore(t.TempDir(), 2)
	if err != nil {
		t.Fatal(err)
	}
	path, err := store.Save(&Checkpoint{Index: 1, ModelVersion: "gpu-v1", Topic: "t", Models: []ModelState{mg.State()}})
	if err != nil {
		t.Fatal(err)
	}
	ck, err := ReadCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, be := range []backend.Backend{backend.NewCPU(), gpu} {
		m, err := NewModel(be, ck.Models[0].Config)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Restore(ck.Models[0]); err != nil {
			t.Fatal(err)
		}
		predsClose(t, "checkpoint restored on "+be.Name(), onGPU, m.Predict(ins), 1e-4)
	}
}

// TestScoreOnDevice: /v1/score of a trainer on the GPU answers from its
// published checkpoint, as the same checkpoint scores on the CPU.
func TestScoreOnDevice(t *testing.T) {
	t.Parallel()
	gpu := openGPU(t)
	tr, err := New(Config{Brokers: []string{"127.0.0.1:1"}, ClickHouse: "127.0.0.1:1", CheckpointDir: t.TempDir(),
		Listen: "off", Device: "cuda", Model: smallModel()}, WithLogger(zerolog.Nop()), WithBackend(gpu))
	if err != nil {
		t.Fatal(err)
	}
	ck := publishCheckpoint(t, tr)
	srv := httptest.NewServer(tr.Handler())
	defer srv.Close()
	s := scoreAt(t, srv.Client(), srv.URL, "")
	if s.ModelVersion != ck.ModelVersion {
		t.Fatalf("model_version %q, want %q", s.ModelVersion, ck.ModelVersion)
	}
	read, err := ReadCheckpoint(ck.Path())
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewModel(backend.NewCPU(), read.Models[0].Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Restore(read.Models[0]); err != nil {
		t.Fatal(err)
	}
	in := servingInput
	want := m.Predict([]*Input{&in})[0]
	if !closeTo(want.Mean, s.Effect, 1e-4) || !closeTo(want.Std, s.Std, 1e-4) {
		t.Fatalf("GPU /v1/score effect %v std %v, the checkpoint on the CPU %v %v", s.Effect, s.Std, want.Mean, want.Std)
	}
}

// BenchmarkTrainStepDevices measures training steps of the trainer's
// default model (batch 256 of synthetic examples) on the CPU and, where
// there is one, on the GPU, side by side in one process: compare the
// samples/s of the two sub-benchmarks of the same run.
func BenchmarkTrainStepDevices(b *testing.B) {
	exs := synth(rand.New(rand.NewPCG(1, 2)), 256*8)
	run := func(b *testing.B, be backend.Backend) {
		cfg := ModelConfig{}
		cfg.setDefaults()
		m, err := NewModel(be, cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			lo := (i % 8) * 256
			if _, err := m.TrainStep(exs[lo : lo+256]); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(256*b.N)/b.Elapsed().Seconds(), "samples/s")
	}
	b.Run("cpu", func(b *testing.B) { run(b, backend.NewCPU()) })
	b.Run("cuda", func(b *testing.B) { run(b, openGPU(b)) })
}
