package trainer

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/retry"
	"github.com/harnessflow/harnessflow/schemas"
)

// stepsInsert writes trainer_steps rows (the table is defined by the
// migrations, infra/chddl/0001_tables.sql).
const stepsInsert = `INSERT INTO trainer_steps (trainer, model_version, step, samples, sample_ids, sample_id_hash,
  loss, loss_nll, loss_ce, heldout_acc, heldout_macro_f1, heldout_mae,
  staleness_versions_p50, staleness_versions_p95, staleness_model_p50, staleness_model_p95,
  dropped_stale, device, written_at)`

// stepRow is one trainer_steps row: one step's samples, losses, held-out
// metrics and staleness.
type stepRow struct {
	modelVersion           string
	step                   uint64
	samples                uint32
	ids                    []string
	hash                   string
	l                      Losses
	h                      HeldoutMetrics
	sv50, sv95, sm50, sm95 float64
	droppedStale           uint32
	writtenAt              time.Time
}

// batchIntake is what trainBatch makes of a batch before its step: the
// examples to train on with their sample ids and staleness (in harness and
// in model versions), the held-out examples, and the counts of the messages
// skipped as bad or duplicate and of the samples dropped as stale.
type batchIntake struct {
	train, held       []Example
	ids               []string
	staleV, staleM    []float64
	bad, dup, dropped int
	// foreign counts the samples of other projects than Config.Project,
	// skipped before they touch any state.
	foreign int
}

// trainBatch consumes batch (a prefix of what was read): it advances the
// frontier over every message, skips undecodable and invalid ones (counted and
// logged; see checkSample) and duplicates, drops stale ones, evaluates
// held-out ones, and trains the rest in one step, followed by a replay round
// (replay.go) unless behind (a full batch of new samples waits).
func (t *Trainer) trainBatch(ctx context.Context, batch []sampleMsg, behind bool) error {
	start := time.Now()
	in, err := t.intake(ctx, batch)
	if err != nil {
		return err
	}
	t.metrics.lag.set(t.offsets)
	l, mv, err := t.trainStep(in.train, in.held)
	if err != nil {
		return err
	}
	t.metrics.duplicates.Add(float64(in.dup))
	t.metrics.bad.Add(float64(in.bad))
	t.metrics.droppedStale.Add(float64(in.dropped))
	t.metrics.foreign.Add(float64(in.foreign))
	if in.foreign > 0 && !t.foreignSeen {
		t.foreignSeen = true
		t.log.Info().Str("project", t.cfg.Project).Int("foreign", in.foreign).
			Msg("skipping other projects' samples (this trainer trains on its project's alone); counted in hf_trainer_foreign_samples_total and each step's log line")
	}
	if len(in.train) == 0 {
		return nil
	}
	rs, err := t.replay(in.train, behind)
	if err != nil {
		return err
	}
	t.step++
	t.stepsSinceCk++
	t.trained += int64(len(in.train))
	if len(t.heldout) > t.cfg.HeldoutWindow {
		t.heldout = append([]HeldoutRecord(nil), t.heldout[len(t.heldout)-t.cfg.HeldoutWindow:]...)
	}
	hm := Summarize(t.heldout)
	row := stepRow{modelVersion: mv, step: uint64(t.step), samples: uint32(len(in.train)), ids: in.ids, hash: idHash(in.ids), l: l, h: hm,
		sv50: quantile(in.staleV, 0.5), sv95: quantile(in.staleV, 0.95), sm50: quantile(in.staleM, 0.5), sm95: quantile(in.staleM, 0.95),
		droppedStale: uint32(in.dropped), writtenAt: time.Now()}
	if len(t.rows) == 0 {
		t.rowsSince = time.Now()
	}
	t.rows = append(t.rows, row)
	t.metrics.observeStep(row, time.Since(start))
	t.mu.Lock()
	optSteps, lr, alpha := t.models[0].Steps(), t.models[0].LR(), t.models[0].TextShrink()
	t.mu.Unlock()
	t.metrics.textShrink.Set(alpha)
	t.metrics.optimizerSteps.Set(float64(optSteps))
	t.metrics.learningRate.Set(float64(lr))
	ev := t.log.Info().Int64("step", t.step).Int("samples", len(in.train)).Int("heldout", len(in.held)).Int("duplicates", in.dup).
		Int("foreign", in.foreign).Int("dropped_stale", in.dropped).Int("bad", in.bad).Float64("loss", l.Total).Float64("loss_nll", l.NLL).Float64("loss_ce", l.CE).
		Float64("heldout_acc", hm.Acc).Float64("heldout_macro_f1", hm.MacroF1).Float64("heldout_mae", hm.MAE).
		Float64("staleness_versions_p95", row.sv95).Float64("staleness_model_p95", row.sm95).
		Int("replayed", rs.examples).Int("replay_steps", rs.steps).Int("optimizer_steps", optSteps).Float32("next_lr", lr).Float64("text_shrink", alpha)
	if rs.steps > 0 {
		ev = ev.Float64("replay_loss", rs.loss)
	}
	if rs.skipped != "" {
		ev = ev.Str("replay_skipped", rs.skipped)
	}
	if !math.IsNaN(rs.heldoutLoss) {
		ev = ev.Float64("heldout_loss", rs.heldoutLoss)
	}
	ev.Dur("took", time.Since(start)).Msg("step")
	return nil
}

// intake sorts batch's messages for the step: it advances the frontier
// over every message, dead-letters the undecodable and invalid ones, skips
// duplicates (and remembers the rest in the dedup window; a duplicate is
// the same project's sample id with the same figures: a corrected sample
// is trained, sampleRevision), updates the per-(project, cell) harness
// versions, drops the stale samples, and keeps the others
// as held-out examples (every sample of a held-out group, heldout.go: never
// trained; also kept in the evaluation's held-out ring, evalset.go) or training examples
// (also kept in the evaluation's training window).
func (t *Trainer) intake(ctx context.Context, batch []sampleMsg) (batchIntake, error) {
	var in batchIntake
	for _, m := range batch {
		if o := m.off + 1; o > t.offsets[m.part] {
			t.offsets[m.part] = o
		}
		t.dirty = true
		if m.err != nil {
			in.bad++
			if err := t.rejectUndecodable(ctx, m); err != nil {
				return in, err
			}
			continue
		}
		s := m.s
		// Another project's sample (a per-project trainer): skipped
		// before the duplicate, staleness, replay and held-out windows,
		// and not dead-lettered (it is valid or not for its own trainer).
		if t.foreign(s) {
			in.foreign++
			continue
		}
		if fe := checkSample(s); fe != nil {
			in.bad++
			if err := t.rejectInvalid(ctx, m, fe); err != nil {
				return in, err
			}
			continue
		}
		// Samples and cells are the project's: another project's equal
		// sample id or cell id is another sample or cell.
		// A revision of the sample (sampleRevision) is trained once; a
		// bare (project, id) key is one a checkpoint remembered before
		// revisions were told apart.
		rev := sampleRevision(s)
		if t.dedup.hasSample(s.Project, rev) || t.dedup.hasSample(s.Project, s.SampleID) {
			in.dup++
			continue
		}
		t.dedup.add(projectKey(s.Project, rev))
		if len(t.cells) >= t.cfg.MaxCells {
			t.cells = map[string]int32{}
		}
		cell := projectKey(s.Project, s.CellID)
		if v, ok := t.cells[cell]; !ok || s.HarnessVersionIndex > v {
			t.cells[cell] = s.HarnessVersionIndex
		}
		sv := float64(t.cells[cell] - s.HarnessVersionIndex)
		if t.cfg.MaxStaleness > 0 && sv > float64(t.cfg.MaxStaleness) {
			in.dropped++
			continue
		}
		ex := t.exampleOf(s)
		if t.holdOut(s) {
			in.held = append(in.held, ex)
			t.noteHeldOut(s)
			continue
		}
		t.trainWin.add(s)
		in.train = append(in.train, ex)
		in.ids = append(in.ids, s.SampleID)
		in.staleV = append(in.staleV, sv)
		in.staleM = append(in.staleM, float64(t.index-m.arrivedIndex))
	}
	return in, nil
}

// Effect weightings of Config.EffectWeighting.
const (
	// WeightPrecision weighs each effect by its paired tasks (the default).
	WeightPrecision = "precision"
	// WeightNone weighs every effect alike.
	WeightNone = "none"
)

// ExampleOf is the training example of a (valid) labeled sample: its
// input, effect and label index, and the precision of its effect, the
// number of paired tasks behind it (min of n_before and n_after; 0 when
// either is unknown, which counts as the batch's mean).
func ExampleOf(s *schemas.LabeledSample) Example {
	return Example{Input: Input{Update: s.Update, Query: s.Query, Kind: s.ArtifactKind, Evolver: s.EvolverModel,
		Agent: s.AgentModel, Benchmark: s.Benchmark}, Effect: s.Effect, Label: LabelIndex(s.Label),
		Precision: float64(max(min(s.NBefore, s.NAfter), 0)), Round: RoundKey(s)}
}

// RoundKey names a sample's round: its (project, campaign, seed, agent,
// benchmark, cycle), the updates of every evolver written after the same
// round of the same tasks, among which a critic is asked to choose.
func RoundKey(s *schemas.LabeledSample) string {
	return fmt.Sprintf("%s\x00%s\x00%d\x00%s\x00%s\x00%d", s.Project, s.CampaignID, s.Seed, s.AgentModel, s.Benchmark, s.Cycle)
}

// exampleOf is ExampleOf under the trainer's Config.EffectWeighting.
func (t *Trainer) exampleOf(s *schemas.LabeledSample) Example {
	ex := ExampleOf(s)
	if t.cfg.EffectWeighting == WeightNone {
		ex.Precision = 0
	}
	return ex
}

// holdOut reports whether s is held out: its group (Config.HeldoutGroupKey)
// falls in the held-out fraction — unless no sample has been trained on
// yet, in which case that group becomes the trainer's first group and is
// trained on instead, for good (t.firstGroup, kept in checkpoints). Without
// that exception a stream of one group (one campaign and seed, as `up
// --demo` sends) that hashes into the fraction would never be trained on;
// with it, such a stream trains and is simply not evaluated until a
// held-out group arrives. Owned by the training loop.
func (t *Trainer) holdOut(s *schemas.LabeledSample) bool {
	g := GroupOf(t.cfg.HeldoutGroupKey, s)
	if g == t.firstGroup {
		return false
	}
	if !IsHeldOutGroup(g, t.cfg.HeldoutFraction) {
		t.trainedAny = true
		return false
	}
	if t.trainedAny {
		return true
	}
	t.firstGroup, t.trainedAny = g, true
	t.log.Warn().Str("group", g).Str("group_key", t.cfg.HeldoutGroupKey).Float64("heldout_fraction", t.cfg.HeldoutFraction).
		Msg("the first group falls in the held-out fraction: training on it instead (a stream of one group would otherwise never train); it is never evaluated on")
	return false
}

// trainStep evaluates the held-out examples and trains every ensemble member
// on train, under t.mu (/v1/score waits). It returns the members' mean
// losses and the model version the step started from.
func (t *Trainer) trainStep(train, held []Example) (Losses, string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(held) > 0 {
		t.evaluate(held)
	}
	var l Losses
	for _, m := range t.models {
		li, err := m.TrainStep(train)
		if err != nil {
			return l, "", err
		}
		k := float64(len(t.models))
		l.Total += li.Total / k
		l.NLL += li.NLL / k
		l.CE += li.CE / k
	}
	return l, t.modelVersion, nil
}

// evaluate scores held-out examples with the ensemble (t.mu held).
func (t *Trainer) evaluate(held []Example) {
	ins := make([]*Input, len(held))
	for i := range held {
		ins[i] = &held[i].Input
	}
	agg := t.predictLocked(ins)
	for i, a := range agg {
		d := a.Effect - held[i].Effect
		if d < 0 {
			d = -d
		}
		t.heldout = append(t.heldout, HeldoutRecord{Label: held[i].Label, Pred: LabelIndex(a.Label), AbsErr: d})
	}
}

// flushRows writes buffered trainer_steps rows in one batch, retrying
// transient failures for up to a minute.
func (t *Trainer) flushRows(ctx context.Context) error {
	op := func() error {
		b, err := t.ch.PrepareBatch(ctx, stepsInsert)
		if err != nil {
			return classify(err)
		}
		for _, r := range t.rows {
			if err := b.Append(t.cfg.Name, r.modelVersion, r.step, r.samples, r.ids, r.hash, r.l.Total, r.l.NLL, r.l.CE,
				r.h.Acc, r.h.MacroF1, r.h.MAE, r.sv50, r.sv95, r.sm50, r.sm95, r.droppedStale, t.device, r.writtenAt); err != nil {
				_ = b.Abort()
				return retry.Permanent(fmt.Errorf("append step %d: %w", r.step, err))
			}
		}
		return classify(b.Send())
	}
	if err := retry.Do(ctx, chWritePolicy, op, nil); err != nil {
		return fmt.Errorf("write %d trainer_steps rows: %w", len(t.rows), err)
	}
	t.rows = t.rows[:0]
	return nil
}

// chWritePolicy retries the trainer's ClickHouse writes (trainer_steps,
// critic_evals) for up to a minute.
var chWritePolicy = retry.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second, MaxElapsed: time.Minute}

func classify(err error) error {
	if err != nil && !chx.Retryable(err) {
		return retry.Permanent(err)
	}
	return err
}
