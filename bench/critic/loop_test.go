package critic

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers/sim"
	"github.com/harnessflow/harnessflow/trainer"
	"github.com/harnessflow/harnessflow/trainer/eval"
)

func tinyLoopConfig() LoopConfig {
	var seeds []int64
	for s := int64(1); s <= 24; s++ {
		seeds = append(seeds, s)
	}
	return LoopConfig{
		Config: Config{
			Seeds: seeds, Scale: 10, SimBatchSize: 5,
			Benchmarks: []string{"swe", "mcp"}, Agents: []string{"qwen235b", "haiku45"}, Evolvers: []string{"opus46", "qwen32b"},
			HeldoutFraction: 0.3, SplitSeed: 1, Epochs: 2, BatchSize: 32,
			Model: trainer.ModelConfig{Buckets: 1 << 12, CatBuckets: 64, Dim: 8, Hidden: 8, Seed: 1},
			Eval:  eval.Config{Resamples: 200},
		},
		K: 4, Stages: 2,
	}
}

// TestRunLoop: both arms measure the loop after each stage on every
// held-out cell; the figures add up (picked − random is the gain with one
// round per cell), the oracle is the same in both arms (the control keeps
// the effects) and above the critic's gain, and the output names the goal.
func TestRunLoop(t *testing.T) {
	ctx, cancel := testenv.Context(t)
	defer cancel()
	var out bytes.Buffer
	arms, err := RunLoop(ctx, tinyLoopConfig(), &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	if len(arms) != 2 || !arms[0].TextSignal || arms[1].TextSignal {
		t.Fatalf("%d arms, want on then off", len(arms))
	}
	for _, a := range arms {
		if len(a.Points) != 2 || a.Points[0].SamplesTrained >= a.Points[1].SamplesTrained || a.Points[1].SamplesTrained != len(a.Train) {
			t.Fatalf("text %s: points %+v for %d training rows", onOff(a.TextSignal), a.Points, len(a.Train))
		}
		for _, p := range a.Points {
			// Scale 10, batch 5: two rounds, one update per cell.
			if p.Cells == 0 || p.Rounds != p.Cells || p.Cells != len(a.Heldout) {
				t.Fatalf("%d cells, %d rounds for %d held-out samples", p.Cells, p.Rounds, len(a.Heldout))
			}
			if math.Abs(p.Picked-p.Random-p.Gain.Point) > 1e-9 {
				t.Fatalf("picked %v − random %v ≠ gain %v", p.Picked, p.Random, p.Gain.Point)
			}
			if !(p.Gain.Lo <= p.Gain.Point && p.Gain.Point <= p.Gain.Hi) || p.P < 0 || p.P > 1 {
				t.Fatalf("gain %+v, p %v", p.Gain, p.P)
			}
			if !(p.Oracle > 0) || p.Oracle < p.Gain.Point {
				t.Fatalf("oracle %v, gain %v: the oracle is the ceiling", p.Oracle, p.Gain.Point)
			}
		}
	}
	if on, off := arms[0].Points[0], arms[1].Points[0]; on.Oracle != off.Oracle || on.Random != off.Random {
		t.Fatalf("the control changed the candidates' effects: oracle %v/%v, random %v/%v", on.Oracle, off.Oracle, on.Random, off.Random)
	}
	for _, want := range []string{"stage 2/2", "loop summary (text on)", "loop goal (text on)", "loop goal (text off, the control)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestMeasureLoop: a scorer that knows each candidate's quality gains the
// oracle's lift; one that scores every candidate alike picks the first,
// which is a random pick (no gain beyond its interval); one that prefers
// the worst loses as much as the oracle gains.
func TestMeasureLoop(t *testing.T) {
	cfg := sim.Config{Campaign: "m", Seed: 5}
	var rounds []round
	quality := map[*trainer.Input]float64{}
	for _, bm := range sim.DefaultBenchmarks {
		for _, agent := range sim.DefaultAgents {
			for _, ev := range sim.DefaultEvolvers {
				for cycle := 1; cycle < cfg.Rounds(); cycle++ {
					cs, err := sim.Candidates(cfg, bm, agent, ev, cycle, 5)
					if err != nil {
						t.Fatal(err)
					}
					r := round{cell: cfg.CellID(bm, agent, ev)}
					for _, c := range cs {
						in := &trainer.Input{Update: c.Artifact.Content}
						quality[in] = c.Quality
						r.lift = append(r.lift, 100*c.Lift)
						r.quality = append(r.quality, c.Quality)
						r.inputs, r.rewordings = append(r.inputs, in), append(r.rewordings, in)
					}
					rounds = append(rounds, r)
				}
			}
		}
	}
	by := func(f func(q float64) float64) func([]*trainer.Input) []float64 {
		return func(ins []*trainer.Input) []float64 {
			out := make([]float64, len(ins))
			for i, in := range ins {
				out[i] = f(quality[in])
			}
			return out
		}
	}
	oracle := measureLoop(by(func(q float64) float64 { return q }), rounds, 500, 1)
	if math.Abs(oracle.Gain.Point-oracle.Oracle) > 1e-9 || !(oracle.Gain.Lo > 0) || oracle.P > 1e-6 {
		t.Fatalf("quality scorer: gain %+v (p %v), oracle %v", oracle.Gain, oracle.P, oracle.Oracle)
	}
	flat := measureLoop(by(func(float64) float64 { return 0 }), rounds, 500, 1)
	if !(flat.Gain.Lo < 0 && flat.Gain.Hi > 0) {
		t.Fatalf("constant scorer: gain %+v, want an interval around 0", flat.Gain)
	}
	worst := measureLoop(by(func(q float64) float64 { return -q }), rounds, 500, 1)
	if !(worst.Gain.Hi < 0) {
		t.Fatalf("reversed scorer: gain %+v, want below 0", worst.Gain)
	}
	t.Logf("%d rounds of %d cells: oracle %+.2f pp, constant %+.2f pp [%+.2f, %+.2f], reversed %+.2f pp",
		oracle.Rounds, oracle.Cells, oracle.Gain.Point, flat.Gain.Point, flat.Gain.Lo, flat.Gain.Hi, worst.Gain.Point)
}
