package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/trainer"
	"github.com/harnessflow/harnessflow/trainer/backend"
	"github.com/harnessflow/harnessflow/trainer/eval"
)

// criticEvalSamples are samples of 30 (campaign, seed) groups × 6 cells × 4
// rounds, effects depending on the evolver and the evidence score.
func criticEvalSamples() []*schemas.LabeledSample {
	r := rand.New(rand.NewPCG(5, 6))
	var out []*schemas.LabeledSample
	for c := 0; c < 3; c++ {
		for seed := 1; seed <= 10; seed++ {
			for _, ev := range []string{"ev-a", "ev-b", "ev-c"} {
				for _, ag := range []string{"ag-1", "ag-2"} {
					cell := fmt.Sprintf("camp%d/%s_x_%s_swe_s%d", c, ag, ev, seed)
					for k := 1; k <= 4; k++ {
						x := r.Float64()
						e := math.Max(-1, math.Min(1, map[string]float64{"ev-a": 0.1, "ev-b": -0.1}[ev]+0.2*(0.5-x)+r.NormFloat64()*0.05))
						label := "neutral"
						if e > 0.05 {
							label = "positive"
						} else if e < -0.05 {
							label = "negative"
						}
						out = append(out, &schemas.LabeledSample{
							SampleID: fmt.Sprintf("%s#%d", cell, k), CellID: cell, CampaignID: fmt.Sprintf("camp%d", c), Seed: int32(seed),
							Benchmark: "swe", AgentModel: ag, EvolverModel: ev, Cycle: int32(k), ArtifactKind: "skill",
							Query:  fmt.Sprintf("task t%d: fail score=%g", k, x),
							Update: fmt.Sprintf("### skill s (add)\n%s writes tests", ev), Effect: e, Label: label,
						})
					}
				}
			}
		}
	}
	return out
}

func TestCriticEval(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	samples := criticEvalSamples()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, s := range samples {
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
	}
	buf.WriteString(`{"sample_id":"bad","label":"meh","effect":0}` + "\n") // dropped as untrainable
	if err := os.WriteFile(filepath.Join(dir, "shard-00000.jsonl"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	// A tiny model, a few steps on every sample (so it is no honest model:
	// the command only has to score it).
	m, err := trainer.NewModel(backend.NewCPU(), trainer.ModelConfig{Buckets: 1 << 10, CatBuckets: 16, Dim: 8, Hidden: 8})
	if err != nil {
		t.Fatal(err)
	}
	var exs []trainer.Example
	for _, s := range samples {
		exs = append(exs, trainer.Example{Input: trainer.Input{Update: s.Update, Query: s.Query, Kind: s.ArtifactKind,
			Evolver: s.EvolverModel, Agent: s.AgentModel, Benchmark: s.Benchmark}, Effect: s.Effect, Label: trainer.LabelIndex(s.Label)})
	}
	for i := 0; i < 5; i++ {
		if _, err := m.TrainStep(exs); err != nil {
			t.Fatal(err)
		}
	}
	ckDir := filepath.Join(dir, "ck")
	store, err := trainer.NewCheckpointStore(ckDir, 3)
	if err != nil {
		t.Fatal(err)
	}
	ckPath, err := store.Save(&trainer.Checkpoint{Index: 7, ModelVersion: "tiny-v7", Topic: "hf.samples", Models: []trainer.ModelState{m.State()}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ck := range []string{ckDir, ckPath} {
		var out bytes.Buffer
		root := newRoot()
		root.SetOut(&out)
		root.SetArgs([]string{"critic-eval", "--samples", dir, "--checkpoint", ck, "--resamples", "100", "--group-heldout-fraction", "0.4", "--split-seed", "1"})
		if err := root.Execute(); err != nil {
			t.Fatalf("%s: %v\n%s", ck, err, out.String())
		}
		got := out.String()
		for _, want := range []string{"721 read, 1 dropped", "model tiny-v7", "median", "majority-label", "cell-mean",
			"evidence-regression", "(campaign+seed)", "100 group resamples", "verdict: "} {
			if !strings.Contains(got, want) {
				t.Errorf("%s: output lacks %q:\n%s", ck, want, got)
			}
		}
		if ck == ckPath {
			t.Logf("\n%s", got)
		}
	}
}

// TestCriticEvalTrainerSlice: --trainer-heldout-fraction keeps only the
// held-out rows of groups the trainer held out (its group split).
func TestCriticEvalTrainerSlice(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	samples := criticEvalSamples()
	for _, s := range samples {
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(dir, "s.jsonl")
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := trainer.NewModel(backend.NewCPU(), trainer.ModelConfig{Buckets: 1 << 8, CatBuckets: 8, Dim: 4, Hidden: 4})
	if err != nil {
		t.Fatal(err)
	}
	store, err := trainer.NewCheckpointStore(filepath.Join(dir, "ck"), 3)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := store.Save(&trainer.Checkpoint{Index: 1, ModelVersion: "t-v1", Models: []trainer.ModelState{m.State()}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	root := newRoot()
	root.SetOut(&out)
	root.SetArgs([]string{"critic-eval", "--samples", file, "--checkpoint", ck, "--resamples", "20",
		"--group-heldout-fraction", "0.4", "--split-seed", "1", "--trainer-heldout-fraction", "0.5"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	var read, dropped, train, held int
	if _, err := fmt.Sscanf(out.String(), "samples: %d read, %d dropped as untrainable, %d training rows (baselines), %d held-out rows",
		&read, &dropped, &train, &held); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if held == 0 || held >= 312 || read != 720 || train != 408 {
		t.Errorf("read %d, train %d, held %d: want 720, 408 and fewer than the 312 unfiltered held-out rows", read, train, held)
	}
	// Exactly the held-out rows whose group the trainer's split holds out.
	clean, _ := eval.Clean(samples)
	_, split, err := eval.Split(clean, eval.DefaultGroupKey, 0.4, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, s := range split {
		if trainer.IsHeldOutGroup(trainer.GroupOf(string(eval.DefaultGroupKey), s), 0.5) {
			want++
		}
	}
	if held != want {
		t.Errorf("%d held-out rows kept, want the %d in groups the trainer holds out", held, want)
	}
}

func TestCriticEvalFlags(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	root := newRoot()
	root.SetOut(&out)
	root.SetArgs([]string{"critic-eval", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--samples", "--checkpoint", "--group-key", "--group-heldout-fraction", "--bootstrap-seed", "--resamples", "--trainer-heldout-fraction", "no signal yet"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	for _, args := range [][]string{
		{"critic-eval"},
		{"critic-eval", "--samples", "x", "--checkpoint", "y", "--group-key", "round"},
		{"critic-eval", "--samples", "x", "--checkpoint", "y", "--resamples", "0"},
		{"critic-eval", "--samples", filepath.Join(t.TempDir(), "none.jsonl"), "--checkpoint", "y"},
	} {
		root := newRoot()
		root.SetOut(&bytes.Buffer{})
		root.SetErr(&bytes.Buffer{})
		root.SetArgs(args)
		err := root.Execute()
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 {
			t.Errorf("%v: err %v, want exit code 2", args, err)
		}
	}
}
