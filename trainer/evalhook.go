package trainer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/harnessflow/harnessflow/internal/retry"
	"github.com/harnessflow/harnessflow/schemas"
)

// Evaluation every checkpoint. After each checkpoint is saved and published,
// the trainer scores that checkpoint's models on the evaluation set of its
// evaluation epoch (held-out samples, never trained on, frozen for the
// epoch: evalset.go) and hands them, with the training window (the last
// EvalTrainWindow trained samples, on which the baselines are fitted), both
// as the checkpoint holds them, to the CheckpointEvaluator given with
// WithCheckpointEvaluator; `harnessflow train` gives trainer/eval's
// (eval.CheckpointEvaluator: the five trivial baselines, group-bootstrap
// intervals, the verdict). trainer/eval imports trainer, so the trainer
// knows it only through this hook.
//
// The model's predictions are computed in the training loop right after the
// save, from the live weights (then the checkpoint's; /v1/score waits per
// batch of 256 rows); the evaluation itself (fitting baselines,
// bootstrapping) and the write of its critic_evals and critic_eval_diffs
// rows run on one goroutine of their own, so training goes on meanwhile.
// One evaluation runs at a time and at most one waits: a checkpoint written
// while one waits replaces it (the skipped one is logged). After each
// evaluation the checkpoint's verdict goes to the serving side (warming
// until it beats its baselines), its summary to the log and the
// hf_trainer_eval_* gauges. An evaluation that fails, panics or cannot be
// written (to either table) is logged and counted once
// (hf_trainer_eval_failures_total), never fatal: training and checkpoints go
// on. On stop, the evaluation in progress or waiting finishes (at most
// evalStopGrace after the stop) before Run returns. After a restart the
// restored checkpoint is evaluated again, on the set, window and weights it
// holds: the same verdict, served again, and the same rows.

// Metric names of critic_evals rows (trainer/eval's, plus the coverages);
// critic_eval_diffs rows name the compared ones (rmse, spearman, nll,
// macro_f1).
const (
	EvalRMSE     = "rmse"
	EvalSpearman = "spearman"
	EvalNLL      = "nll"
	EvalMacroF1  = "macro_f1"
	EvalCover1   = "cover_1sigma"
	EvalCover2   = "cover_2sigma"
	// EvalPairs is the within-round pairwise accuracy (trainer/eval's
	// MetricPairs), the metric the verdict rests on.
	EvalPairs = "pairwise"
)

// EvalPrediction is the checkpoint's forecast for one held-out row, its
// ensemble combined as eval.ModelPredictions does: Mean the mean of the
// members' means, Std the mixture's sqrt(mean variance + variance of means),
// Probs the mean label probabilities (negative, neutral, positive).
type EvalPrediction struct {
	Mean, Std float64
	Probs     [3]float64
}

// CheckpointEval is what a CheckpointEvaluator evaluates: one checkpoint's
// predictions on the held-out rows, and the training window to fit
// baselines on. The samples are shared, not copied: do not modify them.
type CheckpointEval struct {
	// Trainer is Config.Name; ModelVersion and CheckpointSHA256 name the
	// checkpoint (the sha256 of its file as saved).
	Trainer, ModelVersion, CheckpointSHA256 string
	// Project is the project whose samples the checkpoint's model is
	// trained and evaluated on (Config.Project), written to the
	// critic_evals and critic_eval_diffs rows' project column:
	// AllProjects ('') for a trainer of every project's samples.
	Project string
	// Step and SamplesTrained are the checkpoint's.
	Step, SamplesTrained int64
	// GroupKey is Config.HeldoutGroupKey: the key the held-out set was
	// split by, and the one to resample.
	GroupKey string
	// EvalEpoch and EvalSetSHA256 name the evaluation set Heldout is: its
	// evaluation epoch (from 1) and the sha256 of its sorted sample ids
	// (evalset.go), the same for every checkpoint of the epoch.
	EvalEpoch     int64
	EvalSetSHA256 string
	// Heldout are the held-out rows (the evaluation set), oldest first;
	// Model has the checkpoint's prediction for each, in the same order.
	Heldout []*schemas.LabeledSample
	Model   []EvalPrediction
	// Train is the recent training window, oldest first.
	Train []*schemas.LabeledSample
}

// EvalMetric is one predictor's metric: its value on all held-out rows and
// its interval.
type EvalMetric struct {
	// Predictor is "model" or a baseline's name; Metric one of the Eval*
	// names.
	Predictor, Metric string
	Value, Low, High  float64
}

// EvalComparison is model − best baseline on one metric: Diff with its
// paired bootstrap interval [Low, High], and the metric's verdict. The
// trainer writes one critic_eval_diffs row per comparison.
type EvalComparison struct {
	Metric, Baseline string
	Diff, Low, High  float64
	Verdict          string
}

// EvalResult is a checkpoint's evaluation.
type EvalResult struct {
	// Verdict is VerdictBeats or VerdictNoSignal ("no signal yet").
	Verdict string
	// HeldoutRows and HeldoutGroups count the rows evaluated and their
	// groups.
	HeldoutRows, HeldoutGroups int
	// Metrics has one entry per (predictor, metric) that applies.
	Metrics []EvalMetric
	// Comparisons are the model's paired differences with the best
	// baseline of each metric.
	Comparisons []EvalComparison
	// Note says why there is no verdict ("" when there is one).
	Note string
}

// VerdictNoSignal is the verdict of a checkpoint that does not (yet) beat
// its baselines (trainer/eval's VerdictNoSignal).
const VerdictNoSignal = "no signal yet"

// CheckpointEvaluator evaluates one checkpoint. It runs on the trainer's
// evaluation goroutine, one call at a time; ctx ends when the evaluation
// must stop.
type CheckpointEvaluator func(ctx context.Context, in *CheckpointEval) (*EvalResult, error)

// WithCheckpointEvaluator evaluates every checkpoint with f and writes the
// result to ClickHouse's critic_evals table (its metrics) and
// critic_eval_diffs table (its comparisons). Default: none (checkpoints are
// not evaluated; /v1/score stays warming).
func WithCheckpointEvaluator(f CheckpointEvaluator) Option {
	return func(o *options) { o.evaluator = f }
}

const (
	// evalTimeout bounds one evaluation with its write.
	evalTimeout = 2 * time.Minute
	// evalStopGrace is how long an evaluation may go on after Run's
	// context ends.
	evalStopGrace = 15 * time.Second
	// evalPredictBatch is the rows scored per hold of t.mu.
	evalPredictBatch = 256
)

// AllProjects is Config.Project of a trainer of every project's samples
// (one shared model), and the project column of its critic_evals and
// critic_eval_diffs rows.
const AllProjects = ""

// criticEvalsInsert writes critic_evals rows
// (infra/chddl/0005_critic_evals.sql; project since 0007, eval_set_sha256
// and eval_epoch since 0008).
const criticEvalsInsert = `INSERT INTO critic_evals (trainer, project, model_version, checkpoint_sha256, eval_set_sha256, eval_epoch,
  step, samples_trained, heldout_rows, heldout_groups, predictor, metric, value, ci_low, ci_high, verdict, evaluated_at)`

// criticEvalDiffsInsert writes critic_eval_diffs rows
// (infra/chddl/0006_critic_eval_diffs.sql; project since 0007,
// eval_set_sha256 and eval_epoch since 0008).
const criticEvalDiffsInsert = `INSERT INTO critic_eval_diffs (trainer, project, model_version, checkpoint_sha256, eval_set_sha256, eval_epoch,
  step, samples_trained, heldout_rows, heldout_groups, metric, baseline, diff, ci_low, ci_high, verdict, checkpoint_verdict, evaluated_at)`

// startEvals starts the evaluation goroutine (when there is an evaluator)
// and returns the function that stops it: it lets the evaluation in
// progress and the one waiting finish, and returns once they have.
func (t *Trainer) startEvals(ctx context.Context) (stop func()) {
	if t.evaluator == nil {
		return func() {}
	}
	jobs := make(chan *CheckpointEval, 1)
	done := make(chan struct{})
	t.evalJobs = jobs
	go func() {
		defer close(done)
		for job := range jobs {
			t.runEval(ctx, job)
		}
	}()
	return func() {
		close(jobs)
		<-done
		t.evalJobs = nil
	}
}

// submitEval queues ck's evaluation: the predictions of the live models
// (ck's weights, just saved or restored) for ck's evaluation set, and ck's
// training window. Called by the training loop after ck is saved (and by
// Run for the restored checkpoint, before the loop starts).
func (t *Trainer) submitEval(ck *Checkpoint) {
	if t.evalJobs == nil {
		return
	}
	if ck.EvalEpoch == 0 || len(ck.EvalSet) == 0 {
		t.log.Info().Str("model_version", ck.ModelVersion).Str("group_key", t.cfg.HeldoutGroupKey).
			Msg("checkpoint not evaluated: no held-out samples yet (they arrive with their groups; see --heldout-fraction)")
		return
	}
	job := &CheckpointEval{Trainer: t.cfg.Name, Project: t.cfg.Project, ModelVersion: ck.ModelVersion, CheckpointSHA256: ck.FileSHA256(),
		Step: ck.Step, SamplesTrained: ck.SamplesTrained, GroupKey: t.cfg.HeldoutGroupKey,
		EvalEpoch: ck.EvalEpoch, EvalSetSHA256: ck.EvalSetSHA256, Heldout: ck.EvalSet, Train: ck.EvalTrain}
	job.Model = t.predictEval(job.Heldout)
	select {
	case t.evalJobs <- job:
	default:
		select {
		case old := <-t.evalJobs:
			t.log.Warn().Str("model_version", old.ModelVersion).Str("replaced_by", job.ModelVersion).
				Msg("checkpoint evaluation skipped: the previous evaluation was still running when a newer checkpoint came")
		default:
		}
		t.evalJobs <- job // only this goroutine sends, and the slot is free
	}
}

// reevaluateRestored queues the evaluation of the checkpoint restore
// loaded (when it holds an evaluation set), once: its weights are the live
// ones until the training loop starts. Called by Run after startEvals,
// before the loop.
func (t *Trainer) reevaluateRestored() {
	ck := t.reeval
	t.reeval = nil
	if ck == nil || t.evalJobs == nil {
		return
	}
	t.log.Info().Str("model_version", ck.ModelVersion).Int64("eval_epoch", ck.EvalEpoch).Str("eval_set_sha256", ck.EvalSetSHA256).
		Msg("evaluating the restored checkpoint again on the evaluation set and training window it holds: its verdict is served again")
	t.submitEval(ck)
}

// predictEval scores rows with the live models (see EvalPrediction), a
// batch at a time under t.mu. Called by the training loop only, so the
// models do not change meanwhile.
func (t *Trainer) predictEval(rows []*schemas.LabeledSample) []EvalPrediction {
	out := make([]EvalPrediction, len(rows))
	for lo := 0; lo < len(rows); lo += evalPredictBatch {
		hi := min(lo+evalPredictBatch, len(rows))
		ins := make([]*Input, hi-lo)
		for i, s := range rows[lo:hi] {
			ins[i] = &Input{Update: s.Update, Query: s.Query, Kind: s.ArtifactKind, Evolver: s.EvolverModel,
				Agent: s.AgentModel, Benchmark: s.Benchmark}
		}
		per := make([][]Prediction, len(t.models))
		t.withModels(func() {
			for k, m := range t.models {
				per[k] = m.Predict(ins)
			}
		})
		k := float64(len(per))
		for i := range ins {
			var mean, sq, v float64
			p := &out[lo+i]
			for _, mp := range per {
				q := mp[i]
				mean += q.Mean / k
				sq += q.Mean * q.Mean / k
				v += q.Std * q.Std / k
				for c := range q.Probs {
					p.Probs[c] += q.Probs[c] / k
				}
			}
			p.Mean, p.Std = mean, math.Sqrt(v+math.Max(0, sq-mean*mean))
		}
	}
	return out
}

// runEval evaluates job, writes its rows, and passes its verdict on. It
// never fails: every fault is logged and counted.
func (t *Trainer) runEval(runCtx context.Context, job *CheckpointEval) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(runCtx), evalTimeout)
	defer cancel()
	stopGrace := context.AfterFunc(runCtx, func() { time.AfterFunc(evalStopGrace, cancel) })
	defer stopGrace()
	fail := func(err error, what string) {
		t.metrics.evalFailures.Inc()
		t.log.Error().Err(err).Str("model_version", job.ModelVersion).Int64("step", job.Step).
			Msg(what + "; training goes on, and the next checkpoint is evaluated afresh")
	}
	res, err := t.callEvaluator(ctx, job)
	if err != nil {
		fail(err, "checkpoint evaluation failed")
		return
	}
	t.serving.setVerdict(job.ModelVersion, res.Verdict)
	t.metrics.observeEval(res)
	ev := t.log.Info().Str("model_version", job.ModelVersion).Str("checkpoint_sha256", job.CheckpointSHA256).
		Int64("eval_epoch", job.EvalEpoch).Str("eval_set_sha256", job.EvalSetSHA256).Int64("step", job.Step).Int64("samples_trained", job.SamplesTrained).Int("heldout_rows", res.HeldoutRows).
		Int("heldout_groups", res.HeldoutGroups).Int("train_window", len(job.Train)).Str("verdict", res.Verdict)
	for _, c := range res.Comparisons {
		if c.Metric == EvalRMSE || c.Metric == EvalSpearman {
			ev = ev.Str(c.Metric+"_best_baseline", c.Baseline).Float64(c.Metric+"_diff", c.Diff).
				Float64(c.Metric+"_diff_low", c.Low).Float64(c.Metric+"_diff_high", c.High)
		}
	}
	if res.Note != "" {
		ev = ev.Str("note", res.Note)
	}
	ev.Dur("took", time.Since(start)).Msg("checkpoint evaluated")
	// Both tables get the evaluation's rows, with one evaluated_at, each
	// whether or not the other's write failed; a failure of either or both
	// counts once.
	at := time.Now().UTC()
	var failed []string
	var errs []error
	if err := t.writeEvals(ctx, job, res, at); err != nil {
		failed, errs = append(failed, "critic_evals"), append(errs, err)
	}
	if err := t.writeEvalDiffs(ctx, job, res, at); err != nil {
		failed, errs = append(failed, "critic_eval_diffs"), append(errs, err)
	}
	if len(errs) > 0 {
		fail(errors.Join(errs...), "write "+strings.Join(failed, " and ")+" rows failed")
	}
}

// callEvaluator calls the evaluator, turning a panic into an error, and
// checks its result.
func (t *Trainer) callEvaluator(ctx context.Context, job *CheckpointEval) (res *EvalResult, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, fmt.Errorf("evaluator panicked: %v\n%s", p, debug.Stack())
		}
	}()
	res, err = t.evaluator(ctx, job)
	if err == nil && res == nil {
		err = errors.New("evaluator returned no result")
	}
	return res, err
}

// writeEvals writes res as critic_evals rows, one per (predictor, metric)
// whose value is defined, evaluated at at.
func (t *Trainer) writeEvals(ctx context.Context, job *CheckpointEval, res *EvalResult, at time.Time) error {
	err := t.insertEvalRows(ctx, criticEvalsInsert, func(b driver.Batch) error {
		for _, m := range res.Metrics {
			if math.IsNaN(m.Value) {
				continue
			}
			if err := b.Append(job.Trainer, job.Project, job.ModelVersion, job.CheckpointSHA256, job.EvalSetSHA256, uint64(max(job.EvalEpoch, 0)),
				uint64(max(job.Step, 0)), uint64(max(job.SamplesTrained, 0)), uint32(res.HeldoutRows), uint32(res.HeldoutGroups), m.Predictor, m.Metric, m.Value, m.Low, m.High, res.Verdict, at); err != nil {
				return fmt.Errorf("append critic_evals row %s/%s: %w", m.Predictor, m.Metric, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("write %d critic_evals rows of %s (are the critic_evals migrations, infra/chddl/0005, 0007 and 0008, applied? run `harnessflow migrate`): %w",
			len(res.Metrics), job.ModelVersion, err)
	}
	return nil
}

// writeEvalDiffs writes res's comparisons as critic_eval_diffs rows, one
// per metric whose difference is defined, with the metric's verdict and
// the checkpoint's, evaluated at at (the critic_evals rows' time). Nothing
// is written when there is no comparison.
func (t *Trainer) writeEvalDiffs(ctx context.Context, job *CheckpointEval, res *EvalResult, at time.Time) error {
	n := 0
	for _, c := range res.Comparisons {
		if !math.IsNaN(c.Diff) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	err := t.insertEvalRows(ctx, criticEvalDiffsInsert, func(b driver.Batch) error {
		for _, c := range res.Comparisons {
			if math.IsNaN(c.Diff) {
				continue
			}
			if err := b.Append(job.Trainer, job.Project, job.ModelVersion, job.CheckpointSHA256, job.EvalSetSHA256, uint64(max(job.EvalEpoch, 0)),
				uint64(max(job.Step, 0)), uint64(max(job.SamplesTrained, 0)), uint32(res.HeldoutRows), uint32(res.HeldoutGroups), c.Metric, c.Baseline, c.Diff, c.Low, c.High, c.Verdict, res.Verdict, at); err != nil {
				return fmt.Errorf("append critic_eval_diffs row %s/%s: %w", c.Metric, c.Baseline, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("write %d critic_eval_diffs rows of %s (are the critic_eval_diffs migrations, infra/chddl/0006, 0007 and 0008, applied? run `harnessflow migrate`): %w",
			n, job.ModelVersion, err)
	}
	return nil
}

// insertEvalRows sends one batch of query, filled by fill, retrying
// transient failures like flushRows; a row that fill cannot append fails
// at once.
func (t *Trainer) insertEvalRows(ctx context.Context, query string, fill func(driver.Batch) error) error {
	op := func() error {
		b, err := t.ch.PrepareBatch(ctx, query)
		if err != nil {
			return classify(err)
		}
		if err := fill(b); err != nil {
			_ = b.Abort()
			return retry.Permanent(err)
		}
		return classify(b.Send())
	}
	return retry.Do(ctx, chWritePolicy, op, nil)
}
