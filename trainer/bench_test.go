package trainer

import (
	"testing"

	"github.com/harnessflow/harnessflow/trainer/backend"
)

// BenchmarkTrainStep measures training throughput (samples/s) of the default
// model on the CPU backend at the default batch size (256).
func BenchmarkTrainStep(b *testing.B) {
	m, err := NewModel(backend.NewCPU(), ModelConfig{})
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
