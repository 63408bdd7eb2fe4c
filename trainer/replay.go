package trainer

import "math"

// Replays: several passes over a bounded, recent window. A slow stream
// (a demo campaign sends a few hundred samples) gives one pass of a few
// optimizer steps, after which the model has barely moved. So after each
// step on newly admitted samples the trainer takes extra steps on examples
// drawn from the last Config.ReplayWindow admitted training examples:
// ReplayRatio replayed examples per new one (the fraction carried over), in
// steps the size of the new step but at most ReplayBatchSize (so a round
// is about ReplayRatio steps after a small step, more after a large one),
// of distinct examples drawn uniformly (seeded by Config.Seed). The new
// examples are in the window before the draw, so each takes part in
// several passes.
//
// Exactly once is unchanged: a replay is a training pass, not an admission.
// Only intake admits samples (dedup window, frontier, samples_trained,
// trainer_steps rows); a replayed step advances no offset, counts in no
// samples_trained and writes no row. Replayed steps are optimizer steps
// (Model.Steps, the learning-rate schedule's clock), not trainer steps
// (Trainer.step, one per batch of new samples, the rows' step).
//
// The window is not kept in checkpoints as such: a restart refills it from
// the checkpoint's evaluation training window (the same samples, the newest
// trained, while ReplayWindow ≤ EvalTrainWindow; evalset.go), and from new
// samples. The early-stopping state is in checkpoints too; the replay
// credit and the draw's random state restart.
//
// Replays yield to new data: a round is skipped when any new sample is
// already waiting (the trainer is behind the stream), so a backlog or a
// burst trains at one pass and replays spend CPU only when the trainer
// would otherwise wait. The credit of the skipped rounds is kept, up to
// ReplayRatio × ReplayWindow examples, and spent by the first round after
// the trainer has caught up: a burst (a demo campaign) gets its passes once
// it has arrived, and the replay work after a long fast stream is bounded by
// the window, not proportional to the stream.
//
// Early stopping. After each round, the ensemble's mean loss (Gaussian NLL
// + cross-entropy, the training loss) on the newest EarlyStopRows samples
// of the evaluation set (held-out groups, never trained; fixed for an
// evaluation epoch, evalset.go) is one evaluation.
// When it has not improved on the best evaluation (by more than
// earlyStopMinDelta) for EarlyStopPatience evaluations in a row, replays
// pause; new samples still train, once each. While paused, the loss is
// evaluated after each step on new samples, and replays resume when new
// samples bring it below the best, or at the latest once ReplayWindow new
// samples have been admitted since the pause (the window then holds none of
// what it held; the best is forgotten, since the held-out set has moved on
// too). When a new evaluation epoch begins, the best is measured again on
// its rows (evalset.go). Without held-out samples there is no evaluation
// and replays never pause.

// earlyStopMinDelta is how much an evaluation must improve on the best to
// count as an improvement.
const earlyStopMinDelta = 1e-4

// earlyStop is the replays' early-stopping state (see above). Owned by the
// training loop.
type earlyStop struct {
	patience int // ≤ 0: never pause
	// best is the lowest held-out loss evaluated (+Inf before the first);
	// bad counts the evaluations since it last improved.
	best float64
	bad  int
	// paused says replays wait; sincePause counts the samples admitted
	// since.
	paused     bool
	sincePause int
}

func newEarlyStop(patience int) earlyStop { return earlyStop{patience: patience, best: math.Inf(1)} }

// observe records an evaluation after a replay round and reports whether
// it paused replays.
func (e *earlyStop) observe(loss float64) (paused bool) {
	if loss < e.best-earlyStopMinDelta {
		e.best, e.bad = loss, 0
		return false
	}
	e.bad++
	if e.patience > 0 && e.bad >= e.patience && !e.paused {
		e.paused, e.sincePause = true, 0
		return true
	}
	return false
}

// admitted records n samples admitted while paused and the loss evaluated
// after their step (NaN: none); it reports why replays resume ("" while
// they stay paused).
func (e *earlyStop) admitted(n int, loss float64, window int) string {
	e.sincePause += n
	switch {
	case loss < e.best-earlyStopMinDelta:
		e.best, e.bad, e.paused = loss, 0, false
		return "new samples improved the held-out loss"
	case e.sincePause >= window:
		e.best, e.bad, e.paused = math.Inf(1), 0, false
		return "the replay window holds only samples admitted since the pause"
	}
	return ""
}

// replayStats is what a replay round did, for the step's log line.
type replayStats struct {
	// examples and steps are the replayed examples and optimizer steps;
	// loss their mean loss before each update.
	examples, steps int
	loss            float64
	// heldoutLoss is the last held-out evaluation (NaN: none this round).
	heldoutLoss float64
	// skipped says why the round took no step: "off", "behind", "paused",
	// "" (it ran, or there was nothing to replay).
	skipped string
}

// replay adds the step's newly admitted training examples to the window and
// runs the replay round that follows their step (see above); behind says a
// full batch of new samples waits. Called by the training loop after the
// step on train (non-empty).
func (t *Trainer) replay(train []Example, behind bool) (replayStats, error) {
	st := replayStats{heldoutLoss: math.NaN()}
	for _, ex := range train {
		t.window.add(ex)
	}
	t.metrics.replayWindow.Set(float64(t.window.len()))
	if t.cfg.ReplayRatio <= 0 {
		st.skipped = "off"
		return st, nil
	}
	// Credit accrues for every admitted example, also while behind or
	// paused, up to a window's worth of rounds (ReplayRatio × ReplayWindow
	// examples): a backlog or a burst trains at one pass while it lasts,
	// and its replays follow when the trainer has caught up, bounded
	// however long the stream ran.
	t.replayCredit = min(t.replayCredit+t.cfg.ReplayRatio*float64(len(train)), t.cfg.ReplayRatio*float64(t.cfg.ReplayWindow))
	if behind {
		st.skipped = "behind"
		return st, nil
	}
	es := &t.early
	if es.paused {
		loss, ok := t.heldoutLoss()
		if ok {
			st.heldoutLoss = loss
		} else {
			loss = math.NaN()
		}
		why := es.admitted(len(train), loss, t.cfg.ReplayWindow)
		if why == "" {
			st.skipped = "paused"
			return st, nil
		}
		t.metrics.replayPaused.Set(0)
		t.log.Info().Str("why", why).Int("samples_since_pause", es.sincePause).Msg("replays resume")
	}
	k := int(t.replayCredit)
	t.replayCredit -= float64(k)
	size := min(len(train), t.cfg.ReplayBatchSize)
	for k > 0 {
		b := min(k, size, t.window.len())
		t.replayBuf = drawRounds(t.window, t.replayRand, b, t.replayBuf)
		l, err := t.replayStep(t.replayBuf)
		if err != nil {
			return st, err
		}
		k -= b
		st.examples += b
		st.steps++
		st.loss += (l.Total - st.loss) / float64(st.steps)
	}
	t.metrics.replayed.Add(float64(st.examples))
	t.metrics.replaySteps.Add(float64(st.steps))
	if es.patience <= 0 {
		return st, nil
	}
	loss, ok := t.heldoutLoss()
	if !ok {
		return st, nil
	}
	st.heldoutLoss = loss
	if es.observe(loss) {
		t.metrics.replayPaused.Set(1)
		t.metrics.earlyStops.Inc()
		t.log.Info().Int("patience", es.patience).Float64("heldout_loss", loss).Float64("heldout_loss_best", es.best).
			Msg("early stop: the held-out loss has not improved for --early-stop-patience evaluations; replays pause until new samples improve it (new samples always train)")
	}
	t.metrics.heldoutLossBest.Set(es.best)
	return st, nil
}

// replayStep trains every ensemble member on batch (replayed examples)
// under t.mu and returns their mean losses.
func (t *Trainer) replayStep(batch []Example) (Losses, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var l Losses
	k := float64(len(t.models))
	for i := range batch {
		batch[i].Replay = true
	}
	for _, m := range t.models {
		li, err := m.TrainStep(batch)
		if err != nil {
			return l, err
		}
		l.Total += li.Total / k
		l.NLL += li.NLL / k
		l.CE += li.CE / k
	}
	return l, nil
}

// heldoutLoss evaluates the ensemble's mean loss on the newest
// EarlyStopRows samples of the evaluation set (false: there are none), and
// sets the hf_trainer_heldout_loss gauge.
func (t *Trainer) heldoutLoss() (float64, bool) {
	rows := t.evalRows()
	if len(rows) == 0 {
		return 0, false
	}
	rows = rows[max(0, len(rows)-t.cfg.EarlyStopRows):]
	exs := make([]Example, len(rows))
	for i, s := range rows {
		exs[i] = t.exampleOf(s)
	}
	var loss float64
	t.withModels(func() {
		for _, m := range t.models {
			loss += m.Loss(exs).Total / float64(len(t.models))
		}
	})
	t.metrics.heldoutLoss.Set(loss)
	return loss, true
}
