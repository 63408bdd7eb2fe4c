package trainer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/schemas"
)

// restore loads the newest valid checkpoint (if any), deletes trainer_steps
// rows of steps after it, and re-publishes its checkpoint_published event.
func (t *Trainer) restore(ctx context.Context) error {
	ck, path, err := t.store.LoadLatest()
	switch {
	case errors.Is(err, ErrNoCheckpoint):
		t.log.Info().Str("dir", t.cfg.CheckpointDir).Msg("no checkpoint: starting from scratch at the group's committed offsets or the first offset")
	case err != nil:
		return err
	default:
		if ck.Topic != t.cfg.Topic || len(ck.Models) != len(t.models) {
			return fmt.Errorf("%w: %s has topic %s and %d models, config wants %s and %d", ErrIncompatible, path, ck.Topic, len(ck.Models), t.cfg.Topic, len(t.models))
		}
		if ck.Project == AllProjects && t.cfg.Project != AllProjects && t.cfg.AdoptSharedCheckpoint {
			t.log.Warn().Str("checkpoint", path).Str("project", t.cfg.Project).
				Msg("adopting a checkpoint of all projects: other projects' samples may have shaped this model; its next checkpoint is the project's")
		} else if ck.Project != t.cfg.Project {
			return fmt.Errorf("%w: %s holds a model trained on %s; this trainer trains on %s: "+
				"a model never changes project; give this trainer a checkpoint directory of its own (--checkpoint-dir), or the project of that one (--project)",
				ErrIncompatible, path, projectDesc(ck.Project), projectDesc(t.cfg.Project))
		}
		var rerr error
		t.withModels(func() {
			for i, m := range t.models {
				if rerr = m.Restore(ck.Models[i]); rerr != nil {
					rerr = fmt.Errorf("%s: %w", path, rerr)
					return
				}
			}
			t.modelVersion = ck.ModelVersion
		})
		if rerr != nil {
			return rerr
		}
		t.index, t.step, t.trained = ck.Index, ck.Step, ck.SamplesTrained
		t.ckOptSteps = t.models[0].Steps()
		for p, o := range ck.Offsets {
			t.offsets[p] = o
		}
		t.dedup = restoreDedup(t.cfg.DedupWindow, ck)
		switch {
		case !ck.KeyedByProject && len(ck.CellVersions) > 0:
			// Keyed by cell id alone: whose cell each was is unknown. The
			// staleness table starts empty, as when it reaches MaxCells.
			t.log.Info().Int("cells", len(ck.CellVersions)).Msg("checkpoint from before the staleness table was keyed by (project, cell): starting it empty; the dedup window's sample ids match every project's until they age out")
		case ck.CellVersions != nil:
			t.cells = ck.CellVersions
		}
		t.heldout = ck.Heldout
		t.firstGroup, t.trainedAny = ck.FirstGroup, ck.SamplesTrained > 0 || ck.FirstGroup != ""
		if ck.EvalWindows {
			t.restoreEvalState(ck)
			t.log.Info().Int64("eval_epoch", ck.EvalEpoch).Str("eval_set_sha256", ck.EvalSetSHA256).Int("eval_set_rows", len(ck.EvalSet)).
				Int64("heldout_since_frozen", ck.EvalSince).Int("eval_train_window", len(ck.EvalTrain)).Bool("replays_paused", ck.EarlyStop.Paused).
				Msg("restored the evaluation set, the training window and the early-stopping state")
			if ck.EvalEpoch > 0 {
				// Evaluated again once the evaluations run (Run): same
				// weights, rows and window, so the same verdict, served
				// again; its rows replace the identical ones.
				t.reeval = &Checkpoint{Index: ck.Index, ModelVersion: ck.ModelVersion, Step: ck.Step, SamplesTrained: ck.SamplesTrained,
					EvalEpoch: ck.EvalEpoch, EvalSet: ck.EvalSet, EvalSetSHA256: ck.EvalSetSHA256, EvalTrain: ck.EvalTrain,
					path: ck.path, fileSHA256: ck.fileSHA256}
			}
		} else {
			t.log.Info().Str("checkpoint", path).
				Msg("checkpoint from before evaluation sets were kept: the evaluation set, training window and early stopping start from the samples read from now on")
		}
		t.restored = true
		t.log.Info().Str("checkpoint", path).Str("model_version", ck.ModelVersion).Int64("step", ck.Step).
			Interface("offsets", ck.Offsets).Msg("restored checkpoint; reading from its offsets")
	}
	t.metrics.step.Set(float64(t.step))
	t.metrics.optimizerSteps.Set(float64(t.models[0].Steps()))
	t.metrics.learningRate.Set(float64(t.models[0].LR()))
	// Rows of steps after the checkpoint describe work the restart discards.
	if err := t.ch.Exec(ctx, forgetStepsSQL(t.cfg.Database, t.cfg.Cluster), t.cfg.Name, uint64(t.step)); err != nil {
		return fmt.Errorf("delete trainer_steps rows after step %d: %w", t.step, err)
	}
	if ck != nil {
		t.publish(ctx, ck)
	}
	t.lastCkpt = time.Now()
	t.restoreDone.Store(true)
	return nil
}

// forgetStepsSQL deletes a trainer's trainer_steps rows after a step: on a
// single server from the table; on a cluster from the replicated local
// table under the Distributed one, ON CLUSTER (a Distributed table takes no
// ALTER ... DELETE; the mutation replicates to the shard's replicas).
func forgetStepsSQL(database, cluster string) string {
	if cluster == "" {
		return "ALTER TABLE trainer_steps DELETE WHERE trainer = ? AND step > ?"
	}
	return "ALTER TABLE " + chddl.QuoteIdent(database) + ".trainer_steps" + chddl.LocalSuffix + " ON CLUSTER " + cluster +
		" DELETE WHERE trainer = ? AND step > ?"
}

// housekeeping flushes rows when due and checkpoints when due (or when final
// and anything was consumed since the last checkpoint).
//
// A checkpoint is a new model version, so none is written while the weights
// have not moved since the last one (only held-out, duplicate or bad
// samples were read): the version served stays the one trained, and a
// restart reads those samples again from the last checkpoint's offsets,
// with the state as it was there (nothing counts twice).
func (t *Trainer) housekeeping(ctx context.Context, final bool) error {
	due := t.dirty && (final || t.stepsSinceCk >= t.cfg.CheckpointEvery || time.Since(t.lastCkpt) >= t.cfg.CheckpointInterval)
	if due && t.index > 0 && t.models[0].Steps() == t.ckOptSteps {
		due = false
	}
	if len(t.rows) > 0 && (due || final || time.Since(t.rowsSince) >= t.cfg.RowFlushInterval) {
		if err := t.flushRows(ctx); err != nil {
			return err
		}
	}
	if due {
		return t.checkpoint(ctx)
	}
	return nil
}

// checkpoint writes a checkpoint of the current state, then publishes it and
// commits the group's offsets (monitoring only).
func (t *Trainer) checkpoint(ctx context.Context) error {
	start := time.Now()
	idx := max(t.index, t.store.MaxIndex()) + 1
	t.evalRows() // the checkpoint holds the set it is evaluated on
	ck := &Checkpoint{
		Index: idx, ModelVersion: fmt.Sprintf("%s-v%d", t.cfg.Name, idx), Step: t.step, SamplesTrained: t.trained,
		Topic: t.cfg.Topic, Offsets: map[int32]int64{}, RecentDigests: t.dedup.ordered(), RecentLegacy: t.dedup.legacy, CellVersions: t.cells, KeyedByProject: true, FirstGroup: t.firstGroup, Project: t.cfg.Project,
		Heldout: t.heldout, CreatedAt: time.Now().UTC(),
		EvalWindows: true, EvalEpoch: t.evalSet.epoch, EvalSet: t.evalSet.rows, EvalSetSHA256: t.evalSet.sha256,
		EvalSince: t.evalSet.since, EvalPending: t.evalPending(), EvalTrain: t.trainWin.snapshot(), EarlyStop: t.earlyStopState(),
	}
	for p, o := range t.offsets {
		ck.Offsets[p] = o
	}
	// The tensors stream from the models into the file, one at a time: a
	// full copy of every tensor (weights and both AdamW moments) per
	// checkpoint was most of the trainer's peak memory. On the CPU backend
	// they are read in place (a host buffer the size of the largest tensor,
	// the embedding table, was still the trainer's peak live heap minus its
	// resting one); from a device, through one host buffer. Only this
	// goroutine trains, so the models do not change meanwhile; /v1/score
	// only reads the weights, and the lock is for its use of the backend.
	t.mu.Lock()
	for _, m := range t.models {
		ck.Models = append(ck.Models, m.Shape())
	}
	t.mu.Unlock()
	var buf []float32
	ck.tensor = func(model, param, which int) []float32 {
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.models[model].Tensor(param, which, &buf)
	}
	path, err := t.store.Save(ck)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.modelVersion = ck.ModelVersion
	t.mu.Unlock()
	t.index = idx
	t.ckOptSteps = t.models[0].Steps()
	t.dirty = false
	t.stepsSinceCk = 0
	t.lastCkpt = time.Now()
	t.metrics.checkpoints.Inc()
	t.log.Info().Str("path", path).Str("model_version", ck.ModelVersion).Int64("step", ck.Step).
		Interface("offsets", ck.Offsets).Dur("took", time.Since(start)).Msg("checkpoint written")
	t.publish(ctx, ck)
	t.submitEval(ck)
	if t.gen != nil {
		commit := map[int]int64{}
		for _, a := range t.gen.Assignments[t.cfg.Topic] {
			if o, ok := t.offsets[int32(a.ID)]; ok {
				commit[a.ID] = o
			}
		}
		if err := t.gen.CommitOffsets(map[string]map[int]int64{t.cfg.Topic: commit}); err != nil {
			t.log.Warn().Err(err).Msg("commit group offsets (monitoring only) failed")
		}
	}
	return nil
}

// publish makes ck, just saved or restored, the checkpoint /v1/score and
// /v1/rewards serve (serving.go; it copies the live weights, so after a
// Save it must run before the next training step), then sends its
// checkpoint_published event (at least once; its event id is the model
// version, so consumers dedupe).
func (t *Trainer) publish(ctx context.Context, ck *Checkpoint) {
	if err := t.serveCheckpoint(ck); err != nil {
		t.log.Error().Err(err).Str("model_version", ck.ModelVersion).Msg("cannot serve the checkpoint; /v1/score answers 503 until the next one")
	}
	if t.writer == nil {
		return
	}
	ev := checkpointEvent(ck, t.cfg.Name)
	b, err := schemas.Encode(ev)
	if err == nil {
		err = t.writer.WriteMessages(ctx, kafka.Message{Key: []byte(ev.PartitionKey()), Value: b})
	}
	if err != nil {
		t.log.Warn().Err(err).Str("model_version", ck.ModelVersion).Msg("publish checkpoint_published failed (checkpoint is durable)")
	}
}
