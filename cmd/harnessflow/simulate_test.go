package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harnessflow/harnessflow/internal/testenv"
)

// simRunCLI runs the root command with args; it returns main's exit status,
// stdout and stderr.
func simRunCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	// The command runs as long as the suite allows: a bench at tiny scale
	// took over a minute beside a CPU hog.
	ctx, cancel := testenv.Context(t)
	defer cancel()
	var stdout, stderr bytes.Buffer
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	code := 0
	if err := root.ExecuteContext(ctx); err != nil {
		code = 2
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
		// What main prints to the process's stderr: the test's failure
		// message then says why the command failed.
		fmt.Fprintln(&stderr, "harnessflow:", err)
	}
	return code, stdout.String(), stderr.String()
}

func TestSimulateCommand(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	code, out, errOut := simRunCLI(t, "simulate", "--brokers", b.Addr(), "--campaign", "cli", "--scale", "4", "--batch-size", "2",
		"--benchmarks", "swe", "--agents", "opus46,qwen35_9b", "--evolvers", "qwen32b")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "in 4 cells") || !strings.Contains(errOut, "4/4 cells") {
		t.Fatalf("stdout %q stderr %q", out, errOut)
	}
	code, _, _ = simRunCLI(t, "simulate", "--brokers", b.Addr(), "--agents", "gpt9")
	if code != 2 {
		t.Fatalf("unknown agent: exit %d", code)
	}
}

func TestImportAEvolveCommand(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	root := filepath.Join(t.TempDir(), "run1")
	cell := filepath.Join(root, "opus46_x_none_mcp_s1")
	if err := os.MkdirAll(cell, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(cell, "BENCHMARK_REPORT.md"), []byte("benchmark: mcp_atlas\nroute: baseline\ndone_marker: DONE\nsolver_model_id: claude-opus-4-6\n"), 0o644)
	os.WriteFile(filepath.Join(cell, "DONE"), nil, 0o644)
	os.WriteFile(filepath.Join(cell, "summary.csv"), []byte("task_id,result,score,elapsed_s,output_len,detail\nm1,PASS,0.9,1,1,\nm2,FAIL,0.2,1,1,\nm3,BOGUS,0.2,1,1,\n"), 0o644)
	code, out, errOut := simRunCLI(t, "import", "a-evolve", root, "--brokers", b.Addr())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "campaign run1: produced 5 events from 1 cells") || !strings.Contains(out, "claude-opus-4-6") {
		t.Fatalf("stdout %q", out)
	}
	if !strings.Contains(errOut, "summary.csv: read 2 rows, skipped 1 (unknown result: 1)") {
		t.Fatalf("stderr %q", errOut)
	}
	if code, _, _ := simRunCLI(t, "import", "a-evolve", t.TempDir(), "--brokers", b.Addr()); code != 2 {
		t.Fatalf("empty dir: exit %d", code)
	}
}
