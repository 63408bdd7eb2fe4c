package main

import (
	"strings"
	"testing"
)

// TestBenchCriticOffline runs both arms at a tiny scale through the CLI and
// checks that each prints its table, summary and goal; bad seeds are a usage
// error.
func TestBenchCriticOffline(t *testing.T) {
	t.Parallel()
	code, out, errOut := simRunCLI(t, "bench", "critic-offline", "--seeds", "1..12", "--scale", "6", "--sim-batch-size", "2",
		"--benchmarks", "swe", "--agents", "qwen235b,haiku45", "--evolvers", "opus46,qwen32b",
		"--buckets", "4096", "--epochs", "3", "--batch-size", "32", "--resamples", "100",
		"--group-heldout-fraction", "0.4", "--split-seed", "1")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	for _, want := range []string{"== text signal on", "== text signal off", "evidence-regression", "cell-mean",
		"summary (text on)", "summary (text off)", "goal (text on)", "goal (text off, the control)", "epoch 3/3"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range [][]string{{"--seeds", "5..2"}, {"--seeds", "1,1"}, {"--epochs", "0"}} {
		if code, _, _ := simRunCLI(t, append([]string{"bench", "critic-offline"}, bad...)...); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
}

// TestBenchCriticLoop runs the closed loop at a tiny scale through the CLI:
// each stage's line, the summary and the goal of each arm; bad flags are a
// usage error.
func TestBenchCriticLoop(t *testing.T) {
	t.Parallel()
	code, out, errOut := simRunCLI(t, "bench", "critic", "--seeds", "1..24", "--scale", "10",
		"--benchmarks", "swe", "--agents", "qwen235b,haiku45", "--evolvers", "opus46,qwen32b",
		"--buckets", "4096", "--dim", "8", "--hidden", "8", "--epochs", "1", "--batch-size", "32", "--resamples", "100",
		"--group-heldout-fraction", "0.3", "--split-seed", "1", "--k", "3", "--stages", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	for _, want := range []string{"closed loop, text signal on", "closed loop, text signal off", "stage 1/2", "stage 2/2",
		"loop summary (text on)", "loop goal (text on)", "loop goal (text off, the control)", "oracle"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = simRunCLI(t, "bench", "critic", "--seeds", "1..24", "--scale", "10", "--benchmarks", "swe",
		"--agents", "qwen235b", "--evolvers", "opus46", "--buckets", "4096", "--dim", "8", "--hidden", "8",
		"--epochs", "1", "--resamples", "50", "--group-heldout-fraction", "0.3", "--split-seed", "1", "--stages", "1", "--arms", "off")
	if code != 0 || strings.Contains(out, "text signal on") || !strings.Contains(out, "text signal off") {
		t.Fatalf("--arms off: exit %d\n%s", code, out)
	}
	for _, bad := range [][]string{{"--k", "1"}, {"--stages", "0"}, {"--arms", "maybe"}, {"--seeds", "3..1"}} {
		if code, _, _ := simRunCLI(t, append([]string{"bench", "critic"}, bad...)...); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
}

// TestBenchCriticServiceFlags: a held-out seed that is also a training seed,
// a bad arm or bad seeds are usage errors, before any stack starts (the
// run itself is bench/critic's TestRunService).
func TestBenchCriticServiceFlags(t *testing.T) {
	t.Parallel()
	for _, bad := range [][]string{{"--train-seeds", "1..5", "--heldout-seeds", "5..6"}, {"--arms", "maybe"},
		{"--train-seeds", "x"}, {"--k", "1"}} {
		if code, _, _ := simRunCLI(t, append([]string{"bench", "critic-service"}, bad...)...); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
}
