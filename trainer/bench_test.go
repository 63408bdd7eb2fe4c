package trainer

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/trainer/backend"
)

// BenchmarkTrainStep measures training throughput (samples/s) of the default
// model on the CPU backend at the default batch size (256).
func BenchmarkTrainStep(b *testing.B) { benchTrainSteps(b, ModelConfig{}) }

// benchTrainSteps times b.N training steps of batches of 256 synthetic
// examples on a CPU model of cfg.
func benchTrainSteps(b *testing.B, cfg ModelConfig) {
	m, err := NewModel(backend.NewCPU(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	const bs = 256
	data := SyntheticExamples(1, bs*8)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := i % 8
		if _, err := m.TrainStep(data[k*bs : (k+1)*bs]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*bs)/b.Elapsed().Seconds(), "samples/s")
}

// BenchmarkPredictOne measures one candidate's forward pass (the model part of
// /v1/score) with the default model.
func BenchmarkPredictOne(b *testing.B) {
	m, err := NewModel(backend.NewCPU(), ModelConfig{})
	if err != nil {
		b.Fatal(err)
	}
	data := SyntheticExamples(2, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.Predict([]*Input{&data[i%64].Input})
	}
}

// BenchmarkTrainStepEvidence trains on samples shaped like the processors'
// (per-task evidence lines in the query, a skill update), with the bag merge
// (merged) and without it (raw), side by side: compare the two samples/s.
func BenchmarkTrainStepEvidence(b *testing.B) {
	const bs = 256
	data := make([]Example, bs*4)
	for i := range data {
		data[i] = Example{Input: evidenceInput(i, 40), Label: i % 3, Effect: float64(i%5-2) / 10}
	}
	for _, raw := range []bool{true, false} {
		name := "merged"
		if raw {
			name = "raw"
		}
		b.Run(name, func(b *testing.B) {
			m, err := NewModel(backend.NewCPU(), ModelConfig{})
			if err != nil {
				b.Fatal(err)
			}
			m.rawBags = raw
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				k := i % 4
				if _, err := m.TrainStep(data[k*bs : (k+1)*bs]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*bs)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}

// BenchmarkTrainStream is the CPU cost of replays, side by side: the
// default model trains a stream of 256 evidence-shaped samples (as the
// processors write them) arriving 8 at a time (slow: every batch-age
// flush) or 256 at a time (a burst, as a demo campaign arrives), in one
// pass (replays off) and with the default replays (4 replayed examples per
// new one, steps of at most 32), evaluated on 256 held-out samples after
// each round as early stopping does, but never paused (the upper bound of
// the cost). ns/sample is per admitted sample: compare the two of each
// stream (go test -run '^$' -bench TrainStream -benchtime 1x -count 3).
func BenchmarkTrainStream(b *testing.B) {
	const n = 256
	evidence := func(ss []*schemas.LabeledSample, from int) []*schemas.LabeledSample {
		for i, s := range ss {
			in := evidenceInput(from+i, 40)
			s.Query, s.Update = in.Query, in.Update
		}
		return ss
	}
	samples := evidence(genSamples(rand.New(rand.NewPCG(41, 42)), 0, n), 0)
	held := evidence(genSamples(rand.New(rand.NewPCG(43, 44)), 10_000, 256), 10_000)
	for _, arrive := range []int{8, 256} {
		for _, ratio := range []float64{-1, 0} {
			name := fmt.Sprintf("arrive=%d/replays=default", arrive)
			if ratio < 0 {
				name = fmt.Sprintf("arrive=%d/replays=off", arrive)
			}
			b.Run(name, func(b *testing.B) {
				tr := replayTrainer(b, nil, func(c *Config) {
					c.Model, c.BatchSize, c.ReplayRatio, c.EarlyStopPatience = ModelConfig{}, 256, ratio, -1
				})
				for _, s := range held {
					tr.heldSet.add(s)
				}
				var off int64
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					feed(b, tr, samples, arrive, &off)
					tr.dedup = newDedup(tr.cfg.DedupWindow, nil, false) // admit the same samples again
					tr.rows = tr.rows[:0]
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/sample")
				b.ReportMetric(float64(tr.models[0].Steps())/float64(b.N*n), "steps/sample")
			})
		}
	}
}
