package chddl_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/sinks/report"
)

// criticEvalsCols are critic_evals' columns as the trainer writes them
// (trainer/evalhook.go); the table has no _version, so the fixture type's
// insert (which adds one) does not apply.
var criticEvalsCols = []string{"trainer", "model_version", "checkpoint_sha256", "eval_set_sha256", "eval_epoch", "step", "samples_trained", "heldout_rows",
	"heldout_groups", "predictor", "metric", "value", "ci_low", "ci_high", "verdict", "evaluated_at"}

// fixtureEvalSet is the evaluation set (its sha256 and epoch) a fixture
// checkpoint was evaluated on: trainer-a's two checkpoints in one epoch,
// on the same rows.
func fixtureEvalSet(trainer string) (string, uint64) {
	if trainer == "trainer-a" {
		return "set-a-3", 3
	}
	return "set-b-1", 1
}

// criticEvalsRows are the critic_evals rows of the fixture, the way
// trainer/eval writes them: two trainers; trainer-a's first checkpoint has
// no signal (it is behind median on RMSE) and its second beats its
// baselines; trainer-b's one checkpoint has too few groups. trainer-a's a-1
// was evaluated twice: the older evaluation's rows (other values, and a
// cell-mean RMSE the newer one did not write) lose to the newer ones.
func criticEvalsRows() [][]any {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var out [][]any
	add := func(trainer, version string, samples uint64, groups uint32, verdict string, at time.Time, vals map[string]float64) {
		for _, pred := range []string{"model", "median", "majority-label", "cell-mean", "evidence-regression"} {
			for _, metric := range []string{"rmse", "spearman", "nll", "macro_f1", "cover_1sigma"} {
				v, ok := vals[pred+"/"+metric]
				if !ok {
					continue
				}
				set, epoch := fixtureEvalSet(trainer)
				out = append(out, []any{trainer, version, "sha256-" + version, set, epoch, samples / 8, samples, groups * 20, groups,
					pred, metric, v, v - 0.02, v + 0.03, verdict, at})
			}
		}
	}
	base := map[string]float64{"median/rmse": 0.178, "median/spearman": 0, "median/nll": -0.5, "majority-label/macro_f1": 0.33,
		"cell-mean/rmse": 0.181, "cell-mean/spearman": 0.12, "cell-mean/nll": -0.45, "cell-mean/macro_f1": 0.31,
		"evidence-regression/rmse": 0.18, "evidence-regression/spearman": 0.19, "evidence-regression/nll": -0.48}
	with := func(model map[string]float64) map[string]float64 {
		m := map[string]float64{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range model {
			m["model/"+k] = v
		}
		return m
	}
	add("trainer-a", "a-1", 400, 12, "no signal yet", t0, map[string]float64{"model/rmse": 0.3, "model/spearman": 0.05, "cell-mean/rmse": 0.01})
	newer := with(map[string]float64{"rmse": 0.184, "spearman": 0.21, "nll": -0.6, "macro_f1": 0.4, "cover_1sigma": 0.7})
	delete(newer, "cell-mean/rmse")
	add("trainer-a", "a-1", 400, 12, "no signal yet", t0.Add(time.Hour), newer)
	add("trainer-a", "a-2", 800, 14, "beats baselines", t0.Add(2*time.Hour), with(map[string]float64{"rmse": 0.15, "spearman": 0.35, "nll": -0.8, "macro_f1": 0.45, "cover_1sigma": 0.69}))
	add("trainer-b", "b-1", 100, 4, "no signal yet", t0.Add(3*time.Hour), with(map[string]float64{"rmse": 0.17, "spearman": 0.25, "nll": -0.6, "macro_f1": 0.4}))
	return out
}

// criticEvalDiffsCols are critic_eval_diffs' columns as the trainer writes
// them (trainer/evalhook.go).
var criticEvalDiffsCols = []string{"trainer", "model_version", "checkpoint_sha256", "eval_set_sha256", "eval_epoch", "step", "samples_trained", "heldout_rows",
	"heldout_groups", "metric", "baseline", "diff", "ci_low", "ci_high", "verdict", "checkpoint_verdict", "evaluated_at"}

// criticEvalDiffsRows are the paired differences of the evaluations of
// criticEvalsRows, with the same evaluated_at: trainer-a's a-1 against the
// best baselines of its newer evaluation (and a stale RMSE row of its older
// one, against cell-mean, replaced), a-2 clear of 0 on every metric,
// trainer-b's b-1 on RMSE only.
func criticEvalDiffsRows() [][]any {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	type diff struct {
		metric, baseline, verdict string
		diff, low, high           float64
	}
	var out [][]any
	add := func(trainer, version string, samples uint64, groups uint32, ckVerdict string, at time.Time, diffs ...diff) {
		for _, d := range diffs {
			set, epoch := fixtureEvalSet(trainer)
			out = append(out, []any{trainer, version, "sha256-" + version, set, epoch, samples / 8, samples, groups * 20, groups,
				d.metric, d.baseline, d.diff, d.low, d.high, d.verdict, ckVerdict, at})
		}
	}
	const no, beats = "no signal yet", "beats baselines"
	add("trainer-a", "a-1", 400, 12, no, t0, diff{"rmse", "cell-mean", no, 0.29, 0.24, 0.34})
	add("trainer-a", "a-1", 400, 12, no, t0.Add(time.Hour),
		diff{"rmse", "median", no, 0.006, -0.01, 0.02}, diff{"spearman", "evidence-regression", no, 0.02, -0.05, 0.09},
		diff{"nll", "median", no, -0.1, -0.2, 0.01}, diff{"macro_f1", "majority-label", no, 0.07, -0.01, 0.15})
	add("trainer-a", "a-2", 800, 14, beats, t0.Add(2*time.Hour),
		diff{"rmse", "median", beats, -0.028, -0.05, -0.01}, diff{"spearman", "evidence-regression", beats, 0.16, 0.05, 0.27},
		diff{"nll", "median", beats, -0.3, -0.45, -0.15}, diff{"macro_f1", "majority-label", beats, 0.12, 0.04, 0.2})
	add("trainer-b", "b-1", 100, 4, no, t0.Add(3*time.Hour), diff{"rmse", "median", no, -0.008, -0.03, 0.01})
	return out
}

// insertCriticEvals writes the fixture's critic_evals and critic_eval_diffs
// rows, copies times (redelivered writes: duplicates in parts that have not
// merged).
func insertCriticEvals(t testing.TB, conn driver.Conn, copies int) {
	t.Helper()
	ctx := context.Background()
	for range copies {
		for _, tbl := range []struct {
			name string
			cols []string
			rows [][]any
		}{{"critic_evals", criticEvalsCols, criticEvalsRows()}, {"critic_eval_diffs", criticEvalDiffsCols, criticEvalDiffsRows()}} {
			b, err := conn.PrepareBatch(ctx, "INSERT INTO "+tbl.name+" ("+strings.Join(tbl.cols, ", ")+")")
			if err != nil {
				t.Fatalf("prepare %s: %v", tbl.name, err)
			}
			for _, r := range tbl.rows {
				if err := b.Append(r...); err != nil {
					t.Fatalf("append %s %v: %v", tbl.name, r, err)
				}
			}
			if err := b.Send(); err != nil {
				t.Fatalf("insert %s: %v", tbl.name, err)
			}
		}
	}
}

// TestCriticDiffIntervalsOnBothEngines: the report's learning curves carry
// the paired intervals of critic_eval_diffs, the same on 18.16 and on the
// current engine: a-1's from its newer evaluation (its older one's row,
// against another baseline, replaced), a-2's on every metric, b-1's on
// RMSE only. Without the table (a database from before migration 0006)
// both engines build the same curves with no interval.
func TestCriticDiffIntervalsOnBothEngines(t *testing.T) {
	old, cur := loadBoth(t)
	ctx := context.Background()
	build := func() (*report.Report, *report.Report) {
		t.Helper()
		ra, err := report.Build(ctx, old.Conn, "", "c1")
		if err != nil {
			t.Fatal(err)
		}
		rb, err := report.Build(ctx, cur, "", "c1")
		if err != nil {
			t.Fatalf("report on %s: %v", cur.Version, err)
		}
		if d := testenv.DiffJSON(ra, rb); d != "" {
			t.Errorf("harnessflow report differs between 18.16 and %s:\n%s", cur.Version, d)
		}
		if len(ra.Critic) != 2 || len(ra.Critic[0].Points) != 2 || len(ra.Critic[1].Points) != 1 {
			t.Fatalf("curves on 18.16: %+v", ra.Critic)
		}
		return ra, rb
	}
	type iv struct {
		point  int
		metric string
		// low and high are the interval; NaN: none.
		low, high float64
	}
	check := func(r *report.Report, engine string, want map[string][]iv) {
		t.Helper()
		for _, c := range r.Critic {
			for _, w := range want[c.Trainer] {
				p := c.Points[w.point]
				cm := p.Comparison(w.metric)
				if cm == nil {
					t.Fatalf("%s: %s has no %s comparison", engine, p.ModelVersion, w.metric)
				}
				ok := cm.DiffLow == nil && cm.DiffHigh == nil
				if !math.IsNaN(w.low) {
					ok = cm.DiffLow != nil && cm.DiffHigh != nil && testenv.Close(*cm.DiffLow, w.low) && testenv.Close(*cm.DiffHigh, w.high)
				}
				if !ok {
					show := func(p *float64) string {
						if p == nil {
							return "none"
						}
						return fmt.Sprint(*p)
					}
					t.Errorf("%s: %s %s against %s: paired interval [%s, %s], want [%v, %v] (NaN: none)", engine, p.ModelVersion, w.metric, cm.Baseline,
						show(cm.DiffLow), show(cm.DiffHigh), w.low, w.high)
				}
			}
		}
	}
	ra, rb := build()
	with := map[string][]iv{
		"trainer-a": {{0, "rmse", -0.01, 0.02}, {0, "spearman", -0.05, 0.09}, {0, "nll", -0.2, 0.01}, {0, "macro_f1", -0.01, 0.15},
			{1, "rmse", -0.05, -0.01}, {1, "spearman", 0.05, 0.27}, {1, "nll", -0.45, -0.15}, {1, "macro_f1", 0.04, 0.2}},
		"trainer-b": {{0, "rmse", -0.03, 0.01}, {0, "spearman", nan, nan}},
	}
	check(ra, "18.16", with)
	check(rb, cur.Version, with)
	// The terminal report shows a-2's RMSE difference with its interval,
	// or alone without the table.
	shows := func(r *report.Report, engine string, interval bool) {
		t.Helper()
		var b strings.Builder
		if err := r.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(b.String(), "−0.0280 [−0.0500, −0.0100]"); got != interval || !strings.Contains(b.String(), "−0.0280") {
			t.Errorf("%s: the text report shows a-2's RMSE Δ with its interval: %v, want %v:\n%s", engine, got, interval, b.String())
		}
	}
	shows(ra, "18.16", true)
	shows(rb, cur.Version, true)

	if err := old.Conn.Exec(ctx, "DROP TABLE critic_eval_diffs"); err != nil {
		t.Fatal(err)
	}
	if err := cur.Exec(ctx, "DROP TABLE critic_eval_diffs"); err != nil {
		t.Fatalf("drop on %s: %v", cur.Version, err)
	}
	ra, rb = build()
	without := map[string][]iv{}
	for trainer, ivs := range with {
		for _, w := range ivs {
			without[trainer] = append(without[trainer], iv{w.point, w.metric, nan, nan})
		}
	}
	check(ra, "18.16", without)
	check(rb, cur.Version, without)
	shows(ra, "18.16", false)
	shows(rb, cur.Version, false)
	if a := ra.Critic[0]; a.Points[1].Verdict != report.VerdictBeats || a.NoSignal != "" || !testenv.Close(a.Points[1].Comparison("rmse").Diff, -0.028) {
		t.Fatalf("trainer-a's curve without critic_eval_diffs: %+v", a)
	}
}

var nan = math.NaN()
