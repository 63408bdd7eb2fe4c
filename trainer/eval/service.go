package eval

import (
	"context"
	"fmt"
	"math"

	"github.com/harnessflow/harnessflow/trainer"
)

// CheckpointEvaluator returns the trainer's per-checkpoint evaluation
// (trainer.WithCheckpointEvaluator, wired by `harnessflow train`): the five
// baselines of Baselines fitted on the checkpoint's training window, the
// checkpoint's model and the baselines scored by Evaluate on the held-out
// rows with group-bootstrap intervals (cfg; its Key defaults to the
// trainer's held-out group key), and the result as the trainer writes it to
// critic_evals: one metric per (predictor, metric) that applies, the
// coverages named cover_1sigma and cover_2sigma. With too few held-out
// groups the result still has every metric, with the verdict
// VerdictNoSignal. It fails (and the trainer logs it) when either side is
// empty or cfg is invalid.
func CheckpointEvaluator(cfg Config) trainer.CheckpointEvaluator {
	return func(ctx context.Context, in *trainer.CheckpointEval) (*trainer.EvalResult, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c := cfg
		if c.Key == "" {
			k, err := ParseGroupKey(in.GroupKey)
			if err != nil {
				return nil, err
			}
			c.Key = k
		}
		if len(in.Model) != len(in.Heldout) {
			return nil, fmt.Errorf("%w: %d model predictions for %d held-out rows", ErrMismatch, len(in.Model), len(in.Heldout))
		}
		bs, err := Baselines(in.Train, in.Heldout)
		if err != nil {
			return nil, fmt.Errorf("fit baselines on a training window of %d samples: %w", len(in.Train), err)
		}
		model := Predictions{Name: "model", Preds: make([]Prediction, len(in.Model)), Effect: true, Label: true}
		for i, p := range in.Model {
			model.Preds[i] = Prediction{Mean: p.Mean, Std: p.Std, Probs: p.Probs}
		}
		rep, err := Evaluate(c, in.Heldout, model, bs)
		if err != nil {
			return nil, err
		}
		return ServiceResult(rep), nil
	}
}

// ServiceResult converts a Report into the trainer's EvalResult (the rows of
// critic_evals): every predictor's metrics that apply (a NaN point, a metric
// that does not apply to the predictor, is left out), the comparisons and
// the verdict.
func ServiceResult(rep *Report) *trainer.EvalResult {
	res := &trainer.EvalResult{Verdict: rep.Verdict, HeldoutRows: rep.Rows, HeldoutGroups: rep.Groups, Note: rep.Note}
	for _, row := range append([]Row{rep.Model}, rep.Baselines...) {
		for _, m := range []struct {
			name string
			iv   Interval
		}{
			{trainer.EvalRMSE, row.RMSE}, {trainer.EvalSpearman, row.Spearman}, {trainer.EvalNLL, row.NLL},
			{trainer.EvalMacroF1, row.MacroF1}, {trainer.EvalCover1, row.Cover1}, {trainer.EvalCover2, row.Cover2},
			{trainer.EvalPairs, row.Pairs},
		} {
			if math.IsNaN(m.iv.Point) { // does not apply
				continue
			}
			res.Metrics = append(res.Metrics, trainer.EvalMetric{Predictor: row.Name, Metric: m.name, Value: m.iv.Point, Low: m.iv.Lo, High: m.iv.Hi})
		}
	}
	for _, c := range rep.Comparisons {
		res.Comparisons = append(res.Comparisons, trainer.EvalComparison{Metric: c.Metric, Baseline: c.Baseline,
			Diff: c.Diff.Point, Low: c.Diff.Lo, High: c.Diff.Hi, Verdict: c.Verdict})
	}
	return res
}
