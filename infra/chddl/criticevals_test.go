package chddl_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// criticEvalsCols are critic_evals' columns as the trainer writes them
// (trainer/evalhook.go); the table has no _version, so the fixture type's
// insert (which adds one) does not apply.
var criticEvalsCols = []string{"trainer", "model_version", "checkpoint_sha256", "step", "samples_trained", "heldout_rows",
	"heldout_groups", "predictor", "metric", "value", "ci_low", "ci_high", "verdict", "evaluated_at"}

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
				out = append(out, []any{trainer, version, "sha256-" + version, samples / 8, samples, groups * 20, groups,
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

// insertCriticEvals writes the fixture's critic_evals rows, copies times
// (redelivered writes: duplicates in parts that have not merged).
func insertCriticEvals(t testing.TB, conn driver.Conn, copies int) {
	t.Helper()
	ctx := context.Background()
	for range copies {
		b, err := conn.PrepareBatch(ctx, "INSERT INTO critic_evals ("+strings.Join(criticEvalsCols, ", ")+")")
		if err != nil {
			t.Fatalf("prepare critic_evals: %v", err)
		}
		for _, r := range criticEvalsRows() {
			if err := b.Append(r...); err != nil {
				t.Fatalf("append critic_evals %v: %v", r, err)
			}
		}
		if err := b.Send(); err != nil {
			t.Fatalf("insert critic_evals: %v", err)
		}
	}
}
