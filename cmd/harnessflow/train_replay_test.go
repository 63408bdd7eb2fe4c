package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/harnessflow/harnessflow/trainer"
)

// TestTrainReplayFlags: an explicit 0 of the flags whose Config zero means
// "default" turns the feature off (or, for --replay-window, is refused); a
// flag left alone, or another value, stays; the train command's defaults
// are trainer.DefaultConfig's.
func TestTrainReplayFlags(t *testing.T) {
	t.Parallel()
	all := func(string) bool { return true }
	var c trainer.Config
	explicitZeros(&c, all)
	if c.ReplayRatio >= 0 || c.EarlyStopPatience >= 0 || c.LRWarmup >= 0 || c.LRMinRatio >= 0 || c.ReplayWindow >= 0 {
		t.Fatalf("explicit zeros did not turn off: %+v", c)
	}
	c = trainer.Config{}
	explicitZeros(&c, func(string) bool { return false })
	if c.ReplayRatio != 0 || c.EarlyStopPatience != 0 || c.LRWarmup != 0 || c.LRMinRatio != 0 {
		t.Fatalf("unset flags changed: %+v", c)
	}
	c = trainer.Config{ReplayRatio: 2, EarlyStopPatience: 3}
	explicitZeros(&c, all)
	if c.ReplayRatio != 2 || c.EarlyStopPatience != 3 {
		t.Fatalf("non-zero values changed: %+v", c)
	}
	d := trainer.DefaultConfig()
	f := newTrainCmd().Flags()
	for name, want := range map[string]string{"replay-window": "5000", "replay-ratio": "4", "replay-batch-size": "32",
		"early-stop-patience": "5", "early-stop-rows": "256", "lr-schedule": d.LRSchedule, "lr-warmup": "20",
		"lr-decay-steps": "1000", "lr-min-ratio": "0.1", "eval-epoch-samples": "0"} {
		if fl := f.Lookup(name); fl == nil || fl.DefValue != want {
			t.Errorf("--%s: %v, want default %s", name, fl, want)
		}
	}
}

// TestTrainRejectsBadReplayFlags: bad values stop `train` before any
// network I/O, with exit code 2 and a message naming each flag.
func TestTrainRejectsBadReplayFlags(t *testing.T) {
	t.Parallel()
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"train", "--checkpoint-dir", t.TempDir(), "--listen", "off", "--nice", "0", "--device", "cpu", "--buckets", "64",
		"--replay-window", "0", "--lr-schedule", "linear", "--replay-batch-size", "-1", "--eval-epoch-samples", "-1"})
	err := root.Execute()
	if err == nil {
		t.Fatal("train accepted --replay-window 0 and --lr-schedule linear")
	}
	for _, want := range []string{"--replay-window", "--replay-ratio 0", "--lr-schedule", "--replay-batch-size", "--eval-epoch-samples"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 2 {
		t.Errorf("exit status %v, want 2", ee)
	}
}
