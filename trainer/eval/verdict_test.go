package eval_test

import (
	"testing"

	"github.com/harnessflow/harnessflow/trainer"
	"github.com/harnessflow/harnessflow/trainer/eval"
)

// TestVerdictBeatsMatchesTrainer: the trainer ends /v1/score's warming when a
// checkpoint's verdict is trainer.VerdictBeats, a copy of eval.VerdictBeats
// (trainer cannot import trainer/eval); the two must stay equal.
func TestVerdictBeatsMatchesTrainer(t *testing.T) {
	t.Parallel()
	if trainer.VerdictBeats != eval.VerdictBeats {
		t.Fatalf("trainer.VerdictBeats %q, eval.VerdictBeats %q", trainer.VerdictBeats, eval.VerdictBeats)
	}
	if trainer.VerdictBeats == eval.VerdictNoSignal {
		t.Fatal("the two verdicts are equal")
	}
}
