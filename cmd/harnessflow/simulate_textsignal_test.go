package main

import (
	"strings"
	"testing"

	"github.com/harnessflow/harnessflow/internal/testenv"
)

// TestSimulateTextSignal: the control switch is a flag and HF_TEXT_SIGNAL;
// a value that is no boolean is a usage error.
func TestSimulateTextSignal(t *testing.T) {
	b := testenv.Kafka(t)
	args := []string{"simulate", "--brokers", b.Addr(), "--campaign", "ctl", "--scale", "4", "--batch-size", "2",
		"--benchmarks", "mcp", "--agents", "haiku45", "--evolvers", "qwen32b", "--quiet"}
	code, out, errOut := simRunCLI(t, append(args, "--text-signal=false", "--held-out-wording")...)
	if code != 0 || !strings.Contains(out, "in 2 cells") {
		t.Fatalf("--text-signal=false: exit %d, stdout %q, stderr %s", code, out, errOut)
	}
	t.Setenv("HF_TEXT_SIGNAL", "maybe")
	if code, _, _ := simRunCLI(t, args...); code != 2 {
		t.Fatalf("HF_TEXT_SIGNAL=maybe: exit %d, want 2", code)
	}
	t.Setenv("HF_TEXT_SIGNAL", "false")
	if code, _, errOut := simRunCLI(t, args...); code != 0 {
		t.Fatalf("HF_TEXT_SIGNAL=false: exit %d: %s", code, errOut)
	}
}
