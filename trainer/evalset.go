package trainer

import (
	"math"

	"github.com/harnessflow/harnessflow/schemas"
)

// Evaluation sets and epochs. A checkpoint is evaluated (evalhook.go), and
// the replays' early stopping scores its loss (replay.go), on a frozen
// evaluation set, not on the held-out ring as it slides: the held-out
// samples every checkpoint of one evaluation epoch is compared on, so that
// the learning curve within an epoch is the model's change alone, not the
// data's drift.
//
// The rule, a function of the held-out samples' count alone. The held-out
// ring (Trainer.heldSet) keeps the last HeldoutWindow held-out samples, as
// before. The first held-out sample admitted begins epoch 1, its set that
// one sample. An epoch ends as the held-out sample arrives that makes those
// admitted since its set was frozen number EvalEpochSamples (default
// HeldoutWindow: once the set is full, each set is entirely new rows) — or
// the set's size, while that is below HeldoutWindow, so that the set
// doubles while the ring fills (1, 2, 4, … rows). The next set is the ring
// as it is then (its last HeldoutWindow held-out samples, which may share
// rows with the previous set). A checkpoint is evaluated on the set of the
// epoch it was written in, which it holds: checkpoints written while fewer
// than EvalEpochSamples held-out samples arrived are compared on the same
// rows.
//
// The set is named by EvalSetSHA256: the lowercase hex sha256 of its sample
// ids, sorted bytewise and joined by '\n' (no trailing newline): the
// definition of trainer_steps' sample_id_hash (idHash), so the same rows
// give the same name in any order, and a set can be recomputed in SQL from
// its ids. The ids are compared without their project: a trainer of every
// project's samples (AllProjects) whose set holds two projects' equal ids
// names them once each, in the sorted list.
//
// Checkpoints hold the set, its epoch and hash, the held-out samples
// admitted since it was frozen (the newest HeldoutWindow of them: with the
// set, they rebuild the held-out ring exactly), the evaluation's training
// window and the early-stopping state (checkpoint.go), and restore puts
// them back (checkpointing.go), so a restarted trainer evaluates its next
// checkpoint on the same rows, ends the epoch at the same held-out sample
// as the uninterrupted one would (the samples after the checkpoint are read
// again), and evaluates the checkpoint it restored again, to the same
// verdict.
//
// Early stopping compares losses on the newest EarlyStopRows of the set;
// when an epoch ends, its best loss is measured again on the new set's rows
// with the current weights (the rows it was measured on are gone), and the
// count of evaluations without improvement and a pause carry on.

// evalSet is the current evaluation epoch's set. Owned by the training
// loop; rows is replaced at each epoch, never modified, so an evaluation
// job may share it.
type evalSet struct {
	// rows are the set's held-out samples, oldest first (nil before the
	// first epoch).
	rows []*schemas.LabeledSample
	// epoch numbers the sets from 1 (0: none frozen yet); sha256 names the
	// set (see above).
	epoch  int64
	sha256 string
	// since counts the held-out samples collected since the set was
	// frozen.
	since int64
}

// noteHeldOut keeps a held-out sample for the evaluation: in the held-out
// ring, counted toward the epoch's end, which it may bring (see the rule
// above). Called by intake.
func (t *Trainer) noteHeldOut(s *schemas.LabeledSample) {
	t.heldSet.add(s)
	t.evalSet.since++
	switch {
	case t.evalSet.epoch == 0:
		t.newEvalEpoch("the first held-out sample")
	case t.evalSet.since >= t.evalEpochSize():
		why := "the held-out samples admitted since the set was frozen reached --eval-epoch-samples"
		if int64(len(t.evalSet.rows)) < int64(t.cfg.EvalEpochSamples) && len(t.evalSet.rows) < t.cfg.HeldoutWindow {
			why = "the held-out samples admitted since the set was frozen reached its size (it grows until --heldout-window)"
		}
		t.newEvalEpoch(why)
	}
}

// evalEpochSize is how many held-out samples end the current epoch:
// EvalEpochSamples, or the set's size while it is smaller than
// HeldoutWindow (at least 1).
func (t *Trainer) evalEpochSize() int64 {
	need := int64(t.cfg.EvalEpochSamples)
	if n := int64(len(t.evalSet.rows)); n < int64(t.cfg.HeldoutWindow) {
		need = min(need, n)
	}
	return max(need, 1)
}

// evalRows returns the current evaluation set (nil while there are no
// held-out samples). The first set is frozen by noteHeldOut; here only
// when the ring was filled without it (benchmarks and tests that fill it
// directly).
func (t *Trainer) evalRows() []*schemas.LabeledSample {
	if t.evalSet.epoch == 0 && t.heldSet.len() > 0 {
		t.newEvalEpoch("the first held-out samples")
	}
	return t.evalSet.rows
}

// newEvalEpoch freezes the held-out ring as the next epoch's set and
// measures the early-stopping best again on it.
func (t *Trainer) newEvalEpoch(why string) {
	prev := t.evalSet
	rows := t.heldSet.snapshot()
	ids := make([]string, len(rows))
	for i, s := range rows {
		ids[i] = s.SampleID
	}
	t.evalSet = evalSet{rows: rows, epoch: prev.epoch + 1, sha256: idHash(ids)}
	t.metrics.evalEpoch.Set(float64(t.evalSet.epoch))
	t.metrics.evalSetRows.Set(float64(len(rows)))
	t.log.Info().Int64("eval_epoch", t.evalSet.epoch).Int("eval_set_rows", len(rows)).Str("eval_set_sha256", t.evalSet.sha256).
		Int64("heldout_since_previous", prev.since).Str("why", why).
		Msg("evaluation epoch begins: checkpoints are evaluated on this set until the next one")
	if prev.epoch == 0 || t.early.patience <= 0 || math.IsInf(t.early.best, 1) {
		return
	}
	// The best loss was measured on the old rows: it is measured again on
	// the new ones with the current weights, so that the next evaluations
	// compare like with like; the evaluations without improvement and a
	// pause carry on.
	loss, ok := t.heldoutLoss()
	if !ok {
		loss = math.Inf(1)
	}
	t.early.best = loss
	t.metrics.heldoutLossBest.Set(loss)
}

// evalPending returns the held-out samples collected since the set was
// frozen that the ring still holds, oldest first (at most HeldoutWindow).
func (t *Trainer) evalPending() []*schemas.LabeledSample {
	rows := t.heldSet.snapshot()
	return rows[len(rows)-int(min(t.evalSet.since, int64(len(rows)))):]
}

// restoreEvalState puts ck's evaluation set, held-out ring, training
// window, replay window and early-stopping state back (ck.EvalWindows),
// as they were when ck was written.
func (t *Trainer) restoreEvalState(ck *Checkpoint) {
	t.heldSet = newSampleRing(t.cfg.HeldoutWindow)
	for _, s := range ck.EvalSet {
		t.heldSet.add(s)
	}
	for _, s := range ck.EvalPending {
		t.heldSet.add(s)
	}
	t.evalSet = evalSet{rows: ck.EvalSet, epoch: ck.EvalEpoch, sha256: ck.EvalSetSHA256, since: ck.EvalSince}
	if ck.EvalEpoch == 0 {
		t.evalSet.rows = nil
	}
	t.trainWin = newSampleRing(t.cfg.EvalTrainWindow)
	for _, s := range ck.EvalTrain {
		t.trainWin.add(s)
	}
	// The replay window holds the newest admitted training examples: the
	// training window's samples (the same stream) while it is no larger.
	t.window = newReplayWindow(t.cfg.ReplayWindow)
	for _, s := range ck.EvalTrain[max(0, len(ck.EvalTrain)-t.cfg.ReplayWindow):] {
		t.window.add(t.exampleOf(s))
	}
	es := ck.EarlyStop
	t.early.best, t.early.bad, t.early.paused, t.early.sincePause = es.Best, es.Bad, es.Paused, es.SincePause
	if math.IsNaN(t.early.best) {
		t.early.best = math.Inf(1)
	}
	paused := 0.0
	if t.early.paused {
		paused = 1
	}
	t.metrics.replayPaused.Set(paused)
	t.metrics.heldoutLossBest.Set(t.early.best)
	t.metrics.replayWindow.Set(float64(t.window.len()))
	t.metrics.evalEpoch.Set(float64(t.evalSet.epoch))
	t.metrics.evalSetRows.Set(float64(len(t.evalSet.rows)))
}

// EarlyStopState is the replays' early-stopping state as checkpoints keep
// it (replay.go's earlyStop; the patience is the configuration's).
type EarlyStopState struct {
	// Best is the lowest held-out loss of the epoch's evaluations (+Inf
	// before the first); Bad counts the evaluations since it improved.
	Best float64
	Bad  int
	// Paused says replays wait; SincePause counts the samples admitted
	// since they paused.
	Paused     bool
	SincePause int
}

// earlyStopState is t.early as a checkpoint keeps it.
func (t *Trainer) earlyStopState() EarlyStopState {
	e := &t.early
	return EarlyStopState{Best: e.best, Bad: e.bad, Paused: e.paused, SincePause: e.sincePause}
}
