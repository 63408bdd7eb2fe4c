package critic

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/testenv"
)

// TestRunService: the training campaigns go through the up stack (producer,
// processors, ClickHouse, trainer), the trainer trains on them, and every
// candidate of the unseen campaigns is scored by one published checkpoint
// (its version and sha256 named), with the loop's figures for both picks.
// About 40 s: most of it is waiting for the trainer's interval checkpoint.
func TestRunService(t *testing.T) {
	ctx, cancel := testenv.Context(t)
	defer cancel()
	var out bytes.Buffer
	cfg := ServiceConfig{TrainSeeds: []int64{1, 2, 3, 4, 5, 6}, HeldoutSeeds: []int64{7, 8},
		Benchmarks: []string{"swe"}, Agents: []string{"qwen235b", "haiku45"}, Evolvers: []string{"opus46", "qwen32b"},
		K: 3, Arms: []bool{true}, Resamples: 100, Timeout: 3 * time.Minute, DataDir: t.TempDir(),
		// The campaigns train within seconds, long before the first
		// interval checkpoint, which is then the last.
		Settle: 2 * time.Second}
	arms, err := RunService(ctx, cfg, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	a := arms[0]
	if a.Samples == 0 || a.Trained == 0 || a.Trained > a.Samples {
		t.Fatalf("%d samples, %d trained", a.Samples, a.Trained)
	}
	if !strings.HasPrefix(a.ModelVersion, "hf-trainer-v") || len(a.CheckpointSHA256) != 64 {
		t.Fatalf("served %q sha256 %q", a.ModelVersion, a.CheckpointSHA256)
	}
	// 2 held-out campaigns × 4 evolved cells × 1 update, 3 candidates in two wordings.
	if a.ByEffect.Cells != 8 || a.ByEffect.Rounds != 8 || a.Requests != 8*3*2 {
		t.Fatalf("%d cells, %d rounds, %d requests; want 8, 8, 48", a.ByEffect.Cells, a.ByEffect.Rounds, a.Requests)
	}
	if a.ByEffect.Oracle != a.ByReward.Oracle || !(a.ByEffect.Oracle > 0) {
		t.Fatalf("oracle %v by effect, %v by reward", a.ByEffect.Oracle, a.ByReward.Oracle)
	}
	if !strings.Contains(out.String(), "service loop goal (text on") || !strings.Contains(out.String(), "pick by reward") {
		t.Fatalf("output lacks the goal or a pick:\n%s", out.String())
	}
}
