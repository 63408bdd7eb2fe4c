package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harnessflow/harnessflow/bench/e2e"
)

// TestWriteE2EKeepsTheLastCompleteRun: an interrupted run leaves the results
// file as it was; a complete one replaces it.
func TestWriteE2EKeepsTheLastCompleteRun(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "results", "e2e.json")
	var w bytes.Buffer
	if err := writeE2E(context.Background(), &w, out, &e2e.Result{E2EEventsPerS: 51000}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := writeE2E(ctx, &w, out, &e2e.Result{}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var got e2e.Result
	if err := json.Unmarshal(b, &got); err != nil || got.E2EEventsPerS != 51000 {
		t.Fatalf("results after an interrupted run: %+v, %v", got, err)
	}
	if !strings.Contains(w.String(), "wrote "+out) || !strings.Contains(w.String(), "interrupted: "+out+" not written") {
		t.Fatalf("output:\n%s", w.String())
	}
}
