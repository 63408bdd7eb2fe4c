package sim

import (
	"errors"
	"math"
	"testing"

	"github.com/harnessflow/harnessflow/schemas"
)

// TestCandidates: candidates are reproducible, differ from each other,
// keep their effects with the text signal off (only the text changes), and
// their lifts have the campaign's distribution: mean the cell's mean
// increment, correlated with quality as contentSD / updateNoise.
func TestCandidates(t *testing.T) {
	t.Parallel()
	cfg := Config{Campaign: "c", Seed: 3}
	off := cfg
	off.TextSignal = Bool(false)
	var n int
	var sumRel, sq, sl, sqq, sll, sql float64
	for _, bm := range DefaultBenchmarks {
		for _, agent := range DefaultAgents {
			for _, ev := range DefaultEvolvers {
				for cycle := 1; cycle < cfg.Rounds(); cycle++ {
					a, err := Candidates(cfg, bm, agent, ev, cycle, 4)
					if err != nil {
						t.Fatal(err)
					}
					again, _ := Candidates(cfg, bm, agent, ev, cycle, 4)
					ctrl, err := Candidates(off, bm, agent, ev, cycle, 4)
					if err != nil {
						t.Fatal(err)
					}
					mi := meanIncrement(cfg, bm, agent)
					texts := map[string]bool{}
					for i, c := range a {
						if c != again[i] {
							t.Fatalf("%s %s %s %d: candidate %d differs between calls", bm, agent, ev, cycle, i)
						}
						if ctrl[i].Lift != c.Lift || ctrl[i].Quality != c.Quality {
							t.Fatalf("candidate %d: the control changed its effect", i)
						}
						if ctrl[i].Artifact.Content == c.Artifact.Content {
							t.Fatalf("candidate %d: the control's text equals the text-on text", i)
						}
						texts[c.Artifact.Content] = true
						if c.Artifact.Kind != "skill" || c.Artifact.Name == "" || len(c.Artifact.ContentSHA256) != 64 {
							t.Fatalf("candidate %d: artifact %+v", i, c.Artifact)
						}
						rel := c.Lift / mi
						n++
						sumRel += rel
						sq += c.Quality
						sl += rel
						sqq += c.Quality * c.Quality
						sll += rel * rel
						sql += c.Quality * rel
					}
					if len(texts) != len(a) {
						t.Fatalf("%d distinct texts of %d candidates", len(texts), len(a))
					}
				}
			}
		}
	}
	fn := float64(n)
	mean := sumRel / fn
	corr := (sql/fn - sq/fn*sl/fn) / math.Sqrt((sqq/fn-sq*sq/fn/fn)*(sll/fn-sl*sl/fn/fn))
	t.Logf("%d candidates: mean lift %.3f × the mean increment, corr(quality, lift) %.3f (want %.3f)", n, mean, corr, contentSD/updateNoise)
	if se := updateNoise / math.Sqrt(fn); math.Abs(mean-1) > 4*se {
		t.Errorf("mean lift %.3f × the mean increment, want 1 ± %.3f", mean, 4*se)
	}
	if math.Abs(corr-contentSD/updateNoise) > 0.05 {
		t.Errorf("corr(quality, lift) %.3f, want %.3f ± 0.05", corr, contentSD/updateNoise)
	}
}

func TestCandidatesRejectBadArguments(t *testing.T) {
	t.Parallel()
	cfg := Config{Campaign: "c", Seed: 3}
	for _, c := range []struct {
		bm, agent, ev string
		cycle, k      int
		want          error
	}{
		{"swe", "opus46", "opus46", 0, 3, ErrConfig},
		{"swe", "opus46", "opus46", cfg.Rounds(), 3, ErrConfig},
		{"swe", "opus46", "opus46", 1, 0, ErrConfig},
		{"swe", "nobody", "opus46", 1, 3, ErrUnknownModel},
		{"swe", "opus46", "nobody", 1, 3, ErrUnknownModel},
		{"chess", "opus46", "opus46", 1, 3, ErrUnknownBenchmark},
	} {
		if _, err := Candidates(cfg, c.bm, c.agent, c.ev, c.cycle, c.k); !errors.Is(err, c.want) {
			t.Errorf("%+v: %v, want %v", c, err, c.want)
		}
	}
}

// TestTruthOfMatchesTheRun: TruthOf returns, for every update a campaign
// writes (text signal on and off), the latent draw the run made.
func TestTruthOfMatchesTheRun(t *testing.T) {
	t.Parallel()
	for _, text := range []bool{true, false} {
		cfg := Config{Campaign: "truth", Seed: 4, Scale: 15, BatchSize: 5, Benchmarks: []string{BenchSWE, BenchMCP},
			Agents: []string{"opus46", "qwen32b"}, TextSignal: Bool(text)}
		cfg.setDefaults()
		n := 0
		err := generate(cfg, func(schemas.Event) error { return nil }, func(u updateTrace) {
			got, err := TruthOf(cfg, u.bm, u.agent, u.evolver, u.cycle)
			if err != nil {
				t.Fatal(err)
			}
			want := UpdateTruth{Quality: u.draw.quality, ContentLift: u.meanInc * contentSD * u.draw.quality, Lift: u.meanInc * u.draw.mult}
			if got != want {
				t.Fatalf("text %v, %s cycle %d: TruthOf %+v, the run drew %+v", text, u.cellID, u.cycle, got, want)
			}
			n++
		})
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatal("no update traced")
		}
	}
	if _, err := TruthOf(Config{Scale: 10, BatchSize: 5}, BenchSWE, "opus46", DefaultEvolvers[0], 2); !errors.Is(err, ErrConfig) {
		t.Errorf("cycle after the last update: %v, want ErrConfig", err)
	}
	if _, err := TruthOf(Config{}, BenchSWE, "nobody", DefaultEvolvers[0], 1); !errors.Is(err, ErrUnknownModel) {
		t.Errorf("unknown agent: %v, want ErrUnknownModel", err)
	}
}

// Config.ContentShare sets how much of a lift the content explains: the
// correlation of quality and lift is its square root, and TruthOf's
// content lift follows it too.
func TestContentShare(t *testing.T) {
	t.Parallel()
	for _, share := range []float64{0.3, 0.7} {
		cfg := Config{Campaign: "c", Seed: 5, ContentShare: share}
		var n, sq, sl, sqq, sll, sql float64
		for _, bm := range DefaultBenchmarks {
			for _, agent := range DefaultAgents {
				for _, ev := range DefaultEvolvers {
					cs, err := Candidates(cfg, bm, agent, ev, 1, 8)
					if err != nil {
						t.Fatal(err)
					}
					mi := meanIncrement(cfg, bm, agent)
					for _, c := range cs {
						rel := c.Lift / mi
						n++
						sq += c.Quality
						sl += rel
						sqq += c.Quality * c.Quality
						sll += rel * rel
						sql += c.Quality * rel
					}
					u, err := TruthOf(cfg, bm, agent, ev, 1)
					if err != nil {
						t.Fatal(err)
					}
					if want := mi * updateNoise * math.Sqrt(share) * u.Quality; math.Abs(u.ContentLift-want) > 1e-12 {
						t.Fatalf("share %v: content lift %v, want %v", share, u.ContentLift, want)
					}
				}
			}
		}
		corr := (sql/n - sq/n*sl/n) / math.Sqrt((sqq/n-sq*sq/n/n)*(sll/n-sl*sl/n/n))
		if math.Abs(corr-math.Sqrt(share)) > 0.06 {
			t.Errorf("share %v: corr(quality, lift) %.3f over %.0f candidates, want %.3f ± 0.06", share, corr, n, math.Sqrt(share))
		}
	}
	if err := (&Config{ContentShare: 1.5}).Validate(); err == nil {
		t.Error("content share 1.5 accepted")
	}
}
