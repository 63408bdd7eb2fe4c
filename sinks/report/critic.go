package report

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// The critic's learning curve, from critic_evals
// (infra/chddl/0005_critic_evals.sql): the trainer scores every checkpoint
// on grouped held-out data beside trivial baselines and writes one row per
// (checkpoint, predictor, metric) with the checkpoint's verdict
// (trainer/evalhook.go, trainer/eval). Beside them, from the same
// evaluation, critic_eval_diffs (infra/chddl/0006_critic_eval_diffs.sql)
// holds one row per (checkpoint, metric): model − best baseline with the
// paired bootstrap interval that the verdict rests on.

// Verdicts the trainer writes (trainer/eval's VerdictBeats and
// VerdictNoSignal).
const (
	VerdictBeats    = "beats baselines"
	VerdictNoSignal = "no signal yet"
)

// CriticModel is the predictor name of the trained model in critic_evals;
// every other predictor is a baseline.
const CriticModel = "model"

// criticBaselines are trainer/eval's baselines in its order, which breaks
// ties when choosing the best baseline (the first listed wins); a baseline
// not named here comes after them, by name.
var criticBaselines = []string{"median", "majority-label", "cell-mean", "evidence-regression", "context-regression"}

// criticMetrics are the metrics the trainer compares (model − best
// baseline, each with a paired bootstrap interval that its verdict rests
// on), in order, and whether lower is better.
var criticMetrics = []struct {
	name  string
	lower bool
}{{"rmse", true}, {"spearman", false}, {"nll", true}, {"macro_f1", false}}

// minVerdictGroups is the trainer's default --eval-min-groups: with fewer
// held-out groups every verdict is "no signal yet".
const minVerdictGroups = 10

// CriticValue is one predictor's metric on the held-out rows with its
// bootstrap interval (nil where not stored or not finite).
type CriticValue struct {
	Value     float64
	Low, High *float64
}

// CriticComparison is the model against the best baseline on one metric:
// the baseline with the best point value at that checkpoint (lowest RMSE
// and NLL, highest ρ and macro-F1; ties to trainer/eval's order), as the
// trainer chooses it.
type CriticComparison struct {
	Metric, Baseline string
	Model, Best      CriticValue
	// Diff is model − best baseline (point values, from critic_evals).
	Diff float64
	// DiffLow and DiffHigh are the trainer's paired bootstrap interval of
	// Diff (critic_eval_diffs), the one its verdict rests on: nil where not
	// finite, and both nil where no diff row of the same evaluation names
	// Baseline for Metric (a database from before migration 0006, an
	// evaluation written without its diff rows, or a best baseline the
	// trainer chose otherwise).
	DiffLow, DiffHigh *float64
	// Ahead is true when Diff is on the model's side (below 0 for RMSE and
	// NLL, above 0 for ρ and macro-F1).
	Ahead bool
}

// CriticPoint is one evaluated checkpoint: its newest evaluation's rows.
type CriticPoint struct {
	ModelVersion, CheckpointSHA256 string
	Step, SamplesTrained           int64
	HeldoutRows, HeldoutGroups     int64
	Verdict                        string
	// Comparisons has one entry per compared metric (rmse, spearman, nll,
	// macro_f1, in that order) that the model and some baseline have.
	Comparisons []CriticComparison
	// at is the evaluation's evaluated_at (unix seconds).
	at int64
}

// Comparison returns p's comparison on metric, or nil.
func (p *CriticPoint) Comparison(metric string) *CriticComparison {
	for i := range p.Comparisons {
		if p.Comparisons[i].Metric == metric {
			return &p.Comparisons[i]
		}
	}
	return nil
}

// CriticCurve is one trainer's learning curve.
type CriticCurve struct {
	Trainer string
	// Points are its evaluated checkpoints by samples trained (then step,
	// model version).
	Points []CriticPoint
	// NoSignal is "" when the newest checkpoint's verdict is "beats
	// baselines", else the reason it is not, in words: which best baseline
	// the model does not beat on which metric.
	NoSignal string
}

// CriticMissing is Report.CriticNote when the database has no critic_evals
// table (a schema from before migration 0005).
const CriticMissing = "no critic_evals table (run harnessflow migrate)"

// criticEvals reads every trainer's learning curve. critic_evals is not per
// campaign or project: the curves are the database's. A database without
// the table gets a note, not an error.
func (r *Report) criticEvals(ctx context.Context, conn Querier) error {
	var tables int64
	err := query(ctx, conn, "critic_evals table", "SELECT toInt64(count()) FROM system.tables WHERE database = currentDatabase() AND name = 'critic_evals'",
		func(rows driver.Rows) error { return rows.Scan(&tables) })
	if err != nil {
		return err
	}
	if tables == 0 {
		r.CriticNote = CriticMissing
		return nil
	}
	// FINAL: a re-evaluated checkpoint's rows replace the older ones
	// (ReplacingMergeTree(evaluated_at)); redelivered copies collapse.
	q := `SELECT toString(trainer), toString(model_version), toString(checkpoint_sha256), toInt64(step), toInt64(samples_trained),
    toInt64(heldout_rows), toInt64(heldout_groups), toString(predictor), toString(metric),
    toFloat64(value), toFloat64(ci_low), toFloat64(ci_high), toString(verdict), toInt64(toUInt32(evaluated_at))
FROM critic_evals FINAL
ORDER BY trainer, samples_trained, step, model_version, predictor, metric, evaluated_at`
	var all []criticRow
	err = query(ctx, conn, "critic_evals", q, func(rows driver.Rows) error {
		var c criticRow
		err := rows.Scan(&c.trainer, &c.version, &c.sha, &c.step, &c.samples, &c.heldRows, &c.heldGroups, &c.predictor, &c.metric,
			&c.value, &c.low, &c.high, &c.verdict, &c.at)
		all = append(all, c)
		return err
	})
	if err != nil {
		return err
	}
	r.Critic = criticCurves(all)
	if len(r.Critic) == 0 {
		return nil
	}
	diffs, err := criticDiffs(ctx, conn)
	if err != nil {
		return err
	}
	attachDiffs(r.Critic, diffs)
	return nil
}

// diffKey names a checkpoint's metric.
type diffKey struct{ trainer, version, metric string }

// diffRow is one critic_eval_diffs row.
type diffRow struct {
	diffKey
	baseline  string
	low, high float64
	at        int64
}

// criticDiffs reads the newest evaluation's critic_eval_diffs rows of each
// checkpoint, by checkpoint and metric: none when the database has no such
// table (a schema from before migration 0006).
func criticDiffs(ctx context.Context, conn Querier) (map[diffKey]diffRow, error) {
	var tables int64
	err := query(ctx, conn, "critic_eval_diffs table", "SELECT toInt64(count()) FROM system.tables WHERE database = currentDatabase() AND name = 'critic_eval_diffs'",
		func(rows driver.Rows) error { return rows.Scan(&tables) })
	if err != nil || tables == 0 {
		return nil, err
	}
	// FINAL: one row per (checkpoint, metric), the newest evaluation's.
	q := `SELECT toString(trainer), toString(model_version), toString(metric), toString(baseline),
    toFloat64(ci_low), toFloat64(ci_high), toInt64(toUInt32(evaluated_at))
FROM critic_eval_diffs FINAL
ORDER BY trainer, model_version, metric, evaluated_at`
	var all []diffRow
	err = query(ctx, conn, "critic_eval_diffs", q, func(rows driver.Rows) error {
		var d diffRow
		err := rows.Scan(&d.trainer, &d.version, &d.metric, &d.baseline, &d.low, &d.high, &d.at)
		all = append(all, d)
		return err
	})
	if err != nil {
		return nil, err
	}
	// A metric an older evaluation wrote and the newest did not is left
	// out, as in criticCurves.
	type checkpoint struct{ trainer, version string }
	newest := map[checkpoint]int64{}
	for _, d := range all {
		k := checkpoint{d.trainer, d.version}
		if at, ok := newest[k]; !ok || d.at > at {
			newest[k] = d.at
		}
	}
	out := map[diffKey]diffRow{}
	for _, d := range all {
		if d.at == newest[checkpoint{d.trainer, d.version}] {
			out[d.diffKey] = d
		}
	}
	return out, nil
}

// attachDiffs gives each comparison its paired interval: the diff row of
// its checkpoint and metric, when that row is of the same evaluation as the
// point's values (evaluated_at) and names the same best baseline.
func attachDiffs(curves []CriticCurve, diffs map[diffKey]diffRow) {
	for i := range curves {
		for j := range curves[i].Points {
			p := &curves[i].Points[j]
			for k := range p.Comparisons {
				c := &p.Comparisons[k]
				d, ok := diffs[diffKey{curves[i].Trainer, p.ModelVersion, c.Metric}]
				if !ok || d.at != p.at || d.baseline != c.Baseline {
					continue
				}
				low, high := d.low, d.high
				c.DiffLow, c.DiffHigh = clean(&low), clean(&high)
			}
		}
	}
}

// criticRow is one critic_evals row.
type criticRow struct {
	trainer, version, sha      string
	step, samples              int64
	heldRows, heldGroups       int64
	predictor, metric, verdict string
	value, low, high           float64
	at                         int64
}

// criticCurves groups rows, in the query's order, into one curve per
// trainer and one point per checkpoint. A point holds its newest
// evaluation's rows only (the rows of one evaluation share evaluated_at):
// a metric an older evaluation wrote and the newest did not is not mixed in.
func criticCurves(rows []criticRow) []CriticCurve {
	type key struct{ trainer, version string }
	newest := map[key]int64{}
	for _, c := range rows {
		k := key{c.trainer, c.version}
		if at, ok := newest[k]; !ok || c.at > at {
			newest[k] = c.at
		}
	}
	var curves []CriticCurve
	var cur *CriticCurve
	vals := map[key]map[[2]string]CriticValue{}
	var order []key
	points := map[key]*CriticPoint{}
	for _, c := range rows {
		k := key{c.trainer, c.version}
		if c.at != newest[k] || math.IsNaN(c.value) || math.IsInf(c.value, 0) {
			continue
		}
		if points[k] == nil {
			points[k] = &CriticPoint{ModelVersion: c.version, CheckpointSHA256: c.sha, Step: c.step, SamplesTrained: c.samples,
				HeldoutRows: c.heldRows, HeldoutGroups: c.heldGroups, Verdict: c.verdict, at: c.at}
			vals[k] = map[[2]string]CriticValue{}
			order = append(order, k)
		}
		pm := [2]string{c.predictor, c.metric}
		if _, dup := vals[k][pm]; !dup {
			low, high := c.low, c.high
			vals[k][pm] = CriticValue{Value: c.value, Low: clean(&low), High: clean(&high)}
		}
	}
	for _, k := range order {
		p := points[k]
		p.Comparisons = compare(vals[k])
		if cur == nil || cur.Trainer != k.trainer {
			curves = append(curves, CriticCurve{Trainer: k.trainer})
			cur = &curves[len(curves)-1]
		}
		cur.Points = append(cur.Points, *p)
	}
	for i := range curves {
		curves[i].NoSignal = noSignal(&curves[i].Points[len(curves[i].Points)-1])
	}
	return curves
}

// compare finds each compared metric's best baseline and the model's
// difference with it.
func compare(vals map[[2]string]CriticValue) []CriticComparison {
	var baselines []string
	seen := map[string]bool{}
	for pm := range vals {
		if pm[0] != CriticModel && !seen[pm[0]] {
			seen[pm[0]] = true
			baselines = append(baselines, pm[0])
		}
	}
	rank := func(name string) int {
		for i, b := range criticBaselines {
			if b == name {
				return i
			}
		}
		return len(criticBaselines)
	}
	sort.Slice(baselines, func(i, j int) bool {
		ri, rj := rank(baselines[i]), rank(baselines[j])
		if ri != rj {
			return ri < rj
		}
		return baselines[i] < baselines[j]
	})
	var out []CriticComparison
	for _, m := range criticMetrics {
		model, ok := vals[[2]string{CriticModel, m.name}]
		if !ok {
			continue
		}
		best := ""
		var bv CriticValue
		for _, b := range baselines {
			v, ok := vals[[2]string{b, m.name}]
			if !ok {
				continue
			}
			if best == "" || (m.lower && v.Value < bv.Value) || (!m.lower && v.Value > bv.Value) {
				best, bv = b, v
			}
		}
		if best == "" {
			continue
		}
		d := model.Value - bv.Value
		out = append(out, CriticComparison{Metric: m.name, Baseline: best, Model: model, Best: bv, Diff: d,
			Ahead: (m.lower && d < 0) || (!m.lower && d > 0)})
	}
	return out
}

// noSignal says why p's verdict is not "beats baselines" ("" when it is):
// the best baselines the model is not ahead of, metric by metric; else too
// few held-out groups for a verdict; else that the paired intervals of its
// leads hold 0.
func noSignal(p *CriticPoint) string {
	if p.Verdict == VerdictBeats {
		return ""
	}
	var behind, ahead []string
	for _, c := range p.Comparisons {
		if !c.Ahead {
			behind = append(behind, fmt.Sprintf("%s on %s (model %.4f, %s %.4f)", c.Baseline, c.Metric, c.Model.Value, c.Baseline, c.Best.Value))
		} else {
			ahead = append(ahead, c.Baseline+" on "+c.Metric)
		}
	}
	var why []string
	if len(behind) > 0 {
		why = append(why, "the model does not beat "+strings.Join(behind, ", nor "))
	}
	if p.HeldoutGroups < minVerdictGroups {
		why = append(why, fmt.Sprintf("%d held-out groups are too few for a verdict (the trainer needs %d by default)", p.HeldoutGroups, minVerdictGroups))
	}
	switch {
	case len(p.Comparisons) == 0:
		why = append(why, "no metric compares the model with a baseline")
	case len(behind) == 0 && len(why) == 0:
		why = append(why, "the model is ahead of "+strings.Join(ahead, ", ")+", but the paired interval of at least one difference holds 0")
	}
	return strings.Join(why, "; ")
}
