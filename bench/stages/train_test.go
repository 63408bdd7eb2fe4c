package stages

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/trainer"
)

// TestTrainBenchServesScores: bench train times its steps and then gets a
// 200 answer to every /v1/score request (the trainer serves only published
// checkpoints, so the bench must publish one first), printing both figures.
func TestTrainBenchServesScores(t *testing.T) {
	ctx, cancel := testenv.Context(t)
	defer cancel()
	var out bytes.Buffer
	err := Train(ctx, TrainConfig{Device: "cpu", BatchSize: 32, Steps: 3, Requests: 20,
		Model: trainer.ModelConfig{Buckets: 1 << 12, CatBuckets: 16, Dim: 8, Hidden: 8}}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, re := range []string{`train: 3 steps x 32 samples in \S+: \d+ samples/s`, `score: 20 requests: p50 \S+, p99 \S+`} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("output lacks %q:\n%s", re, out.String())
		}
	}
}
