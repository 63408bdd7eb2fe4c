package eval

import (
	"fmt"
	"testing"
)

// BenchmarkEvaluate: one Evaluate (B = 1000 group resamples, the model and
// five baselines) per op over held-out sets of growing size.
func BenchmarkEvaluate(b *testing.B) {
	for _, campaigns := range []int{2, 10} {
		samples := world(3, campaigns, 20, 8)
		train, held, err := Split(samples, ByCampaignSeed, 0.5, 1)
		if err != nil {
			b.Fatal(err)
		}
		bs, err := Baselines(train, held)
		if err != nil {
			b.Fatal(err)
		}
		m := bs[2]
		m.Name = "model"
		b.Run(fmt.Sprintf("rows=%d", len(held)), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := Evaluate(Config{}, held, m, bs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(held))*1000*float64(b.N)/b.Elapsed().Seconds(), "row-resamples/s")
		})
	}
}
