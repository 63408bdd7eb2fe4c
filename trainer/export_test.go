package trainer

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/harnessflow/harnessflow/schemas"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

func fixedSamples() []*schemas.LabeledSample {
	mk := func(id, upd, cell, query, text, label string, effect float64) *schemas.LabeledSample {
		s := &schemas.LabeledSample{SampleID: id, UpdateID: upd, CellID: cell, CampaignID: "c1", Benchmark: "swe-bench-verified",
			AgentModel: "qwen3-235b", EvolverModel: "opus-4.6", Cycle: 1, Query: query, Update: text, ArtifactKind: "skill",
			Effect: effect, Label: label, NBefore: 20, NAfter: 20, CILow: effect - 0.05, CIHigh: effect + 0.05, PValue: 0.01,
			Reason: "fixture", HarnessVersion: "h1", HarnessVersionIndex: 1, Seed: 1, Route: schemas.RouteInSitu,
			ProducedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
		s.EventID = "sample:" + id
		s.EventTime = s.ProducedAt
		s.Project = "p"
		s.Source = "fixture"
		return s
	}
	qa, qb := "tests in repo A fail on import", "tool call times out"
	return []*schemas.LabeledSample{
		mk("s01", "u1", "cell-a", qa, "Add a skill: run pytest -x before editing", "positive", 0.12),
		mk("s02", "u2", "cell-a", qa, "Remove the test step", "negative", -0.08),
		mk("s03", "u3", "cell-b", qa, "Check imports with python -c first", "positive", 0.05),
		mk("s04", "u4", "cell-b", qa, "Rename the skill", "neutral", 0.0),
		// The same update evaluated twice in one context with opposite
		// labels: it must never be paired with itself.
		mk("s05", "u5", "cell-c", qb, "Retry the tool call once", "positive", 0.04),
		mk("s06", "u5", "cell-d", qb, "Retry the tool call once", "negative", -0.03),
		mk("s07", "u7", "cell-c", qb, "Never call tools", "negative", -0.2),
		mk("s08", "u8", "cell-d", qb, "Log tool latency", "neutral", 0.01),
		mk("s09", "u9", "cell-e", qa, "Skip flaky tests", "negative", -0.1),
	}
}

func TestExportGolden(t *testing.T) {
	t.Parallel()
	addr := startBroker(t)
	samples := fixedSamples()
	produce(t, addr, samples)
	produce(t, addr, []*schemas.LabeledSample{samples[0], samples[5]}) // redeliveries
	for _, format := range []string{FormatPreference, FormatKTO, FormatJSONL} {
		t.Run(format, func(t *testing.T) {
			out := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			m, err := Export(ctx, ExportConfig{Brokers: []string{addr}, Format: format, Out: out, ShardRows: 2}, WithLogger(zerolog.Nop()))
			if err != nil {
				t.Fatal(err)
			}
			if m.Counts.Duplicates != 2 || m.Counts.Samples != len(samples) || m.Counts.Messages != len(samples)+2 {
				t.Fatalf("counts %+v", m.Counts)
			}
			// A second export is byte-identical (deterministic).
			out2 := t.TempDir()
			if _, err := Export(ctx, ExportConfig{Brokers: []string{addr}, Format: format, Out: out2, ShardRows: 2}, WithLogger(zerolog.Nop())); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "export", format)
			files, _ := filepath.Glob(filepath.Join(out, "*"))
			if *update {
				os.RemoveAll(golden)
				os.MkdirAll(golden, 0o755)
			}
			for _, f := range files {
				got, _ := os.ReadFile(f)
				again, _ := os.ReadFile(filepath.Join(out2, filepath.Base(f)))
				if string(got) != string(again) {
					t.Fatalf("%s differs between two exports", filepath.Base(f))
				}
				gp := filepath.Join(golden, filepath.Base(f))
				if *update {
					if err := os.WriteFile(gp, got, 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want, err := os.ReadFile(gp)
				if err != nil {
					t.Fatalf("golden %s: %v (run with -update)", gp, err)
				}
				if string(got) != string(want) {
					t.Errorf("%s differs from golden:\n got: %s\nwant: %s", gp, got, want)
				}
			}
			gfiles, _ := filepath.Glob(filepath.Join(golden, "*"))
			if len(gfiles) != len(files) {
				t.Errorf("%d files written, %d golden", len(files), len(gfiles))
			}
		})
	}
}

func TestPreferencePairsNeverPairAnUpdateWithItself(t *testing.T) {
	t.Parallel()
	var samples []*schemas.LabeledSample
	// Many samples of few updates in one context, both labels.
	for i := 0; i < 60; i++ {
		label := "positive"
		if i%3 == 0 {
			label = "negative"
		}
		u := i % 7
		samples = append(samples, &schemas.LabeledSample{SampleID: fmt.Sprintf("s%03d", i), UpdateID: fmt.Sprintf("u%d", u),
			CampaignID: "c", Benchmark: "b", AgentModel: "a", Query: "q", Update: fmt.Sprintf("text %d", u), Label: label})
	}
	locs := make([]located, len(samples))
	for i, s := range samples {
		locs[i] = located{part: i % 3, off: int64(i), s: s}
	}
	sorted, _ := dedupeSamples(locs)
	var c ExportCounts
	rows, err := buildRows(FormatPreference, sorted, &c)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal("no pairs")
	}
	for _, r := range rows {
		var p PreferenceRow
		if err := json.Unmarshal(r, &p); err != nil {
			t.Fatal(err)
		}
		if p.Chosen == p.Rejected {
			t.Fatalf("update paired with itself: %s", r)
		}
	}
	if c.Rows+c.Unpaired > c.Positive+c.Negative {
		t.Fatalf("a sample was used twice: %+v", c)
	}
}
