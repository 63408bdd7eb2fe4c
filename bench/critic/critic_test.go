package critic

import (
	"bytes"
	"strings"
	"testing"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/trainer"
	"github.com/harnessflow/harnessflow/trainer/eval"
)

// tinyConfig runs the whole path in seconds: 12 one-benchmark campaigns
// with two agents and two evolvers, a small hash table, 200 resamples.
func tinyConfig() Config {
	var seeds []int64
	for s := int64(1); s <= 12; s++ {
		seeds = append(seeds, s)
	}
	return Config{
		Seeds: seeds, Scale: 6, SimBatchSize: 2,
		Benchmarks: []string{"swe"}, Agents: []string{"qwen235b", "haiku45"}, Evolvers: []string{"opus46", "qwen32b"},
		HeldoutFraction: 0.4, SplitSeed: 1, Epochs: 8, BatchSize: 32,
		Model: trainer.ModelConfig{Buckets: 1 << 12, CatBuckets: 64, Dim: 16, Hidden: 16, Seed: 1},
		Eval:  eval.Config{Resamples: 200},
	}
}

// TestRunOnAndOff: both arms derive samples, hold out whole groups, lower
// the training loss, and report the model with the five baselines; the
// control's samples are the text-on samples with other update text.
func TestRunOnAndOff(t *testing.T) {
	ctx, cancel := testenv.Context(t)
	defer cancel()
	var out bytes.Buffer
	arms, err := Run(ctx, tinyConfig(), &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	if len(arms) != 2 || !arms[0].TextSignal || arms[1].TextSignal {
		t.Fatalf("arms %d, want on then off", len(arms))
	}
	for _, a := range arms {
		name := "text " + onOff(a.TextSignal)
		if len(a.Samples) == 0 || len(a.Train) == 0 || len(a.Heldout) == 0 {
			t.Fatalf("%s: %d samples, %d training, %d held out", name, len(a.Samples), len(a.Train), len(a.Heldout))
		}
		trainGroups := map[string]bool{}
		for _, s := range a.Train {
			trainGroups[eval.DefaultGroupKey.Of(s)] = true
		}
		for _, s := range a.Heldout {
			if g := eval.DefaultGroupKey.Of(s); trainGroups[g] {
				t.Fatalf("%s: held-out group %s is also in training", name, g)
			}
		}
		if !(a.LossAfter.Total < a.LossBefore.Total) {
			t.Errorf("%s: training loss %.4f before, %.4f after: want lower", name, a.LossBefore.Total, a.LossAfter.Total)
		}
		r := a.Report
		if r.Model.Name != "model" || r.Rows != len(a.Heldout) {
			t.Errorf("%s: model row %q, %d rows for %d held out", name, r.Model.Name, r.Rows, len(a.Heldout))
		}
		got := map[string]bool{}
		for _, b := range r.Baselines {
			got[b.Name] = true
		}
		for _, want := range []string{eval.BaselineMedian, eval.BaselineMajority, eval.BaselineCellMean, eval.BaselineEvidence, eval.BaselineContext} {
			if !got[want] {
				t.Errorf("%s: no %s baseline in the report", name, want)
			}
		}
		if len(r.Comparisons) == 0 || r.Verdict == "" {
			t.Errorf("%s: no comparisons or verdict", name)
		}
		switch c := a.Ceiling; {
		case !a.TextSignal && c != nil:
			t.Errorf("%s: a ceiling, but no text shows the content", name)
		case a.TextSignal && (c == nil || c.Content.Rows != len(a.Heldout) || c.Lift.Rows != len(a.Heldout)):
			t.Errorf("%s: ceiling %+v: want both oracles on the %d held-out rows", name, c, len(a.Heldout))
		case a.TextSignal && !(c.BetaLift > 0 && c.BetaContent > 0):
			t.Errorf("%s: ceiling β %.3f (content), %.3f (lift): the true lift must raise the measured effect", name, c.BetaContent, c.BetaLift)
		}
	}
	if !strings.Contains(out.String(), "ceiling: context regression with ") {
		t.Errorf("no ceiling line in the output")
	}
	if !strings.Contains(out.String(), "summary (text on)") || !strings.Contains(out.String(), "summary (text off)") {
		t.Errorf("no summary line per arm:\n%s", out.String())
	}
	sameButText(t, arms[0].Samples, arms[1].Samples)
}

// sameButText checks the simulator's control guarantee
// (producers/sim TestControlKeepsEffects) on the derived samples: as many,
// the same effects, labels, statistics and queries per (cell, cycle), and
// different update text for some.
func sameButText(t *testing.T, on, off []*schemas.LabeledSample) {
	t.Helper()
	if len(on) != len(off) {
		t.Fatalf("%d samples with the text signal, %d without", len(on), len(off))
	}
	type key struct {
		cell  string
		cycle int32
	}
	byKey := map[key]*schemas.LabeledSample{}
	for _, s := range off {
		byKey[key{s.CellID, s.Cycle}] = s
	}
	differ := 0
	for _, a := range on {
		b := byKey[key{a.CellID, a.Cycle}]
		if b == nil {
			t.Fatalf("sample of %s cycle %d has no control twin", a.CellID, a.Cycle)
		}
		if a.Effect != b.Effect || a.Label != b.Label || a.PValue != b.PValue || a.NBefore != b.NBefore ||
			a.NAfter != b.NAfter || a.Query != b.Query || a.ArtifactKind != b.ArtifactKind {
			t.Fatalf("%s cycle %d differs beyond its text: effect %v/%v label %s/%s p %v/%v",
				a.CellID, a.Cycle, a.Effect, b.Effect, a.Label, b.Label, a.PValue, b.PValue)
		}
		if a.Update != b.Update {
			differ++
		}
	}
	if differ == 0 {
		t.Fatal("the control's updates read the same as with the text signal")
	}
}

func TestConfigValidate(t *testing.T) {
	c := Config{Seeds: []int64{1, 1}, HeldoutFraction: 1.5, Epochs: -1}
	c.setDefaults()
	err := c.Validate()
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{"repeats", "held-out fraction", "epochs"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}
