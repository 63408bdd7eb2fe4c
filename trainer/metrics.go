package trainer

import (
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/harnessflow/harnessflow/schemas"
)

type metrics struct {
	step, samples, loss, lossNLL, lossCE   prometheus.Gauge
	acc, f1, mae                           prometheus.Gauge
	staleV50, staleV95, staleM50, staleM95 prometheus.Gauge
	trained, duplicates, bad, droppedStale prometheus.Counter
	foreign                                prometheus.Counter
	checkpoints                            prometheus.Counter
	// Replays and the learning-rate schedule (replay.go, schedule.go).
	optimizerSteps, learningRate      prometheus.Gauge
	textShrink                        prometheus.Gauge
	replayWindow, replayPaused        prometheus.Gauge
	heldoutLoss, heldoutLossBest      prometheus.Gauge
	replayed, replaySteps, earlyStops prometheus.Counter
	// The latest checkpoint evaluation (evalhook.go).
	evalRMSEDiff, evalSpearmanDiff, evalBeats prometheus.Gauge
	evals, evalFailures                       prometheus.Counter
	// The evaluation epoch and its set (evalset.go).
	evalEpoch, evalSetRows    prometheus.Gauge
	invalid                   *prometheus.CounterVec
	stepSeconds, scoreSeconds prometheus.Histogram
	// commitLag is the lag per partition and lag the frontier it is
	// computed from (lag.go).
	commitLag *prometheus.GaugeVec
	lag       frontier
}

// newMetrics makes the trainer's metrics (hf_trainer_*) and registers them
// with reg (all of them, or none and the error).
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	var all []prometheus.Collector
	g := func(name, help string) prometheus.Gauge {
		x := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "hf", Subsystem: "trainer", Name: name, Help: help})
		all = append(all, x)
		return x
	}
	c := func(name, help string) prometheus.Counter {
		x := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "hf", Subsystem: "trainer", Name: name, Help: help})
		all = append(all, x)
		return x
	}
	h := func(name, help string, buckets []float64) prometheus.Histogram {
		x := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "hf", Subsystem: "trainer", Name: name, Help: help, Buckets: buckets})
		all = append(all, x)
		return x
	}
	invalid := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "hf", Subsystem: "trainer", Name: "invalid_samples_total",
		Help: "Samples skipped as invalid (also counted in bad_samples_total), by reason code (the DLQ's: out_of_range, bad_enum, missing_field)."},
		[]string{"reason"})
	all = append(all, invalid)
	commitLag := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "hf", Subsystem: "trainer", Name: "commit_lag",
		Help: "Log end offset minus the trained frontier (or the group's committed offset where that is further), by group, topic and partition (polled every LagInterval)."},
		[]string{"group", "topic", "partition"})
	all = append(all, commitLag)
	for _, code := range []string{schemas.CodeOutOfRange, schemas.CodeBadEnum, schemas.CodeMissingField} {
		invalid.WithLabelValues(code) // present at 0 before the first one
	}
	m := &metrics{
		step:         g("step", "Trainer steps taken: steps on newly admitted samples (trainer_steps rows; replayed steps are in optimizer_steps)."),
		samples:      g("step_samples", "Samples trained in the last step."),
		loss:         g("loss", "Last step's total loss (NLL + CE), ensemble mean."),
		lossNLL:      g("loss_nll", "Last step's Gaussian NLL of the effect."),
		lossCE:       g("loss_ce", "Last step's label cross-entropy."),
		acc:          g("heldout_accuracy", "Label accuracy over the held-out window."),
		f1:           g("heldout_macro_f1", "Label macro-F1 over the held-out window."),
		mae:          g("heldout_mae", "Effect MAE over the held-out window."),
		staleV50:     g("staleness_versions_p50", "Last step's median sample staleness in harness versions."),
		staleV95:     g("staleness_versions_p95", "Last step's p95 sample staleness in harness versions."),
		staleM50:     g("staleness_model_p50", "Last step's median sample staleness in model versions."),
		staleM95:     g("staleness_model_p95", "Last step's p95 sample staleness in model versions."),
		trained:      c("samples_trained_total", "Samples trained."),
		duplicates:   c("duplicates_total", "Samples skipped as duplicates of a recent sample id of the same project."),
		bad:          c("bad_samples_total", "Messages skipped as undecodable or invalid."),
		foreign:      c("foreign_samples_total", "Samples of other projects than the trainer's (Config.Project, train --project), skipped before the duplicate, staleness, replay and held-out windows; always 0 for a trainer of all projects."),
		droppedStale: c("dropped_stale_total", "Samples dropped for exceeding --max-staleness."),
		checkpoints:  c("checkpoints_total", "Checkpoints written."),
		optimizerSteps: g("optimizer_steps",
			"Optimizer steps of ensemble member 0: steps on new samples plus replayed steps (the learning-rate schedule's clock, kept in checkpoints)."),
		learningRate: g("learning_rate", "Learning rate of the next optimizer step (--lr-schedule)."),
		textShrink: g("text_shrink",
			"Weight α of the additive critic's text part in its forecasts (ensemble member 0): 1 once the text's out-of-sample help is shown, else its least-squares share of what the context regression leaves, in [0, 1] (1 for the mlp structure)."),
		replayWindow: g("replay_window_examples", "Admitted training examples held in the replay window (at most --replay-window; a restart refills it from the checkpoint's evaluation training window)."),
		replayPaused: g("replay_paused", "1 while early stopping pauses replays (the held-out loss stopped improving), else 0."),
		heldoutLoss:  g("heldout_loss", "Latest early-stopping evaluation: ensemble mean loss (NLL + CE) on the newest --early-stop-rows samples of the evaluation set."),
		heldoutLossBest: g("heldout_loss_best",
			"Lowest held-out loss of the early-stopping evaluations since the last reset, on the current evaluation set (measured again when an evaluation epoch begins; +Inf before the first; kept in checkpoints)."),
		replayed:     c("replayed_examples_total", "Examples replayed from the replay window (training passes, not admissions: not in samples_trained_total)."),
		replaySteps:  c("replay_steps_total", "Optimizer steps on replayed examples."),
		earlyStops:   c("early_stops_total", "Times early stopping paused replays."),
		evalRMSEDiff: g("eval_rmse_diff", "Latest checkpoint evaluation: held-out effect RMSE of the model minus the best baseline's (negative: the model is better)."),
		evalSpearmanDiff: g("eval_spearman_diff",
			"Latest checkpoint evaluation: held-out Spearman rho of the model minus the best baseline's (positive: the model is better)."),
		evalBeats:    g("eval_beats_baselines", "Latest checkpoint evaluation's verdict: 1 when it beats its baselines, else 0."),
		evals:        c("evals_total", "Checkpoint evaluations completed."),
		evalFailures: c("eval_failures_total", "Checkpoint evaluations that failed or could not be written to critic_evals or critic_eval_diffs (once per evaluation; logged; training goes on)."),
		evalEpoch:    g("eval_epoch", "Current evaluation epoch (from 1; 0 before the first evaluation set is frozen): checkpoints of one epoch are evaluated on the same held-out rows."),
		evalSetRows:  g("eval_set_rows", "Held-out samples in the current evaluation epoch's set."),
		invalid:      invalid,
		commitLag:    commitLag,
		stepSeconds:  h("step_seconds", "Time per training step.", prometheus.ExponentialBuckets(0.001, 2, 16)),
		scoreSeconds: h("score_seconds", "Time per /v1/score request.", prometheus.ExponentialBuckets(0.0001, 2, 16)),
	}
	// No evaluation yet: no difference (not 0, which would read as a tie).
	m.evalRMSEDiff.Set(math.NaN())
	m.evalSpearmanDiff.Set(math.NaN())
	m.heldoutLoss.Set(math.NaN())
	m.heldoutLossBest.Set(math.Inf(1))
	for i, x := range all {
		if err := reg.Register(x); err != nil {
			for _, done := range all[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("register trainer metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) observeStep(r stepRow, took time.Duration) {
	m.step.Set(float64(r.step))
	m.samples.Set(float64(r.samples))
	m.trained.Add(float64(r.samples))
	m.loss.Set(r.l.Total)
	m.lossNLL.Set(r.l.NLL)
	m.lossCE.Set(r.l.CE)
	m.acc.Set(r.h.Acc)
	m.f1.Set(r.h.MacroF1)
	m.mae.Set(r.h.MAE)
	m.staleV50.Set(r.sv50)
	m.staleV95.Set(r.sv95)
	m.staleM50.Set(r.sm50)
	m.staleM95.Set(r.sm95)
	m.stepSeconds.Observe(took.Seconds())
}

// observeEval sets the evaluation gauges from res (NaN for a comparison the
// result lacks).
func (m *metrics) observeEval(res *EvalResult) {
	m.evals.Inc()
	rmse, rho := math.NaN(), math.NaN()
	for _, c := range res.Comparisons {
		switch c.Metric {
		case EvalRMSE:
			rmse = c.Diff
		case EvalSpearman:
			rho = c.Diff
		}
	}
	m.evalRMSEDiff.Set(rmse)
	m.evalSpearmanDiff.Set(rho)
	beats := 0.0
	if res.Verdict == VerdictBeats {
		beats = 1
	}
	m.evalBeats.Set(beats)
}
