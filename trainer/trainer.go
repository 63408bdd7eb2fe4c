// Package trainer is harnessflow's continuous trainer (DESIGN.md §6): a
// consumer of hf.samples that never stops, micro-batching samples into AdamW
// steps of a reward model (hashed n-grams + categorical embeddings → MLP →
// effect mean, log-variance and label logits) on a backend.Backend, with
// exactly-once checkpoints, per-step trainer_steps rows in ClickHouse,
// staleness accounting, POST /v1/score and dataset export (export.go).
//
// Exactly once. The checkpoint holds, per partition, the offset after the last
// consumed sample folded into its weights, and the dedup window; a restart
// restores the newest valid checkpoint and reads from those offsets, never from
// the group's committed offsets (which are committed after each checkpoint for
// lag monitoring only). Steps consume a per-partition prefix of what was read,
// so the frontier is exact. trainer_steps rows are flushed before every
// checkpoint; on restore from step S the trainer deletes this trainer's rows
// with step > S (they describe steps whose effect the crash discarded) before
// writing new ones, so the table ends up describing exactly the lineage of the
// live model: the union of its sample_ids is the set of samples trained, each
// once (count with FINAL; the delete is a ClickHouse mutation that applies to
// the rows present when it was issued, never to the re-run's newer rows).
package trainer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harnessflow/harnessflow/infra/chddl"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/cenkalti/backoff/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"

	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/trainer/backend"
)

// StepsDDL creates trainer_steps (the ClickHouse migrations own it; the
// trainer applies it idempotently too, so it runs against a bare database).
const StepsDDL = `CREATE TABLE IF NOT EXISTS trainer_steps(trainer String, model_version String, step UInt64, samples UInt32,
  sample_ids Array(String), sample_id_hash String, loss Float64, loss_nll Float64, loss_ce Float64,
  heldout_acc Float64, heldout_macro_f1 Float64, heldout_mae Float64,
  staleness_versions_p50 Float64, staleness_versions_p95 Float64,
  staleness_model_p50 Float64, staleness_model_p95 Float64,
  dropped_stale UInt32, device String, written_at DateTime)
ENGINE = ReplacingMergeTree(written_at) ORDER BY (trainer, step)`

const stepsInsert = `INSERT INTO trainer_steps (trainer, model_version, step, samples, sample_ids, sample_id_hash,
  loss, loss_nll, loss_ce, heldout_acc, heldout_macro_f1, heldout_mae,
  staleness_versions_p50, staleness_versions_p95, staleness_model_p50, staleness_model_p95,
  dropped_stale, device, written_at)`

// Option customizes a Trainer (test seams).
type Option func(*Trainer)

// WithLogger sets the logger. Default: obs.NewLogger("trainer").
func WithLogger(l zerolog.Logger) Option { return func(t *Trainer) { t.log = l } }

// WithHTTPReady receives the HTTP listener's bound address once serving.
func WithHTTPReady(ch chan<- string) Option { return func(t *Trainer) { t.httpReady = ch } }

// WithListener serves the HTTP API on ln (already bound; closed when the
// trainer stops) instead of binding Config.Listen.
func WithListener(ln net.Listener) Option { return func(t *Trainer) { t.ln = ln } }

// WithBackend uses be instead of opening cfg.Device.
func WithBackend(be backend.Backend) Option { return func(t *Trainer) { t.be = be } }

// withClickHouse wraps the trainer's ClickHouse connection once it is open
// (tests slow or fail its calls).
func withClickHouse(wrap func(driver.Conn) driver.Conn) Option {
	return func(t *Trainer) { t.wrapCH = wrap }
}

// Trainer is the continuous trainer. Create it with New and call Run once.
type Trainer struct {
	cfg       Config
	log       zerolog.Logger
	httpReady chan<- string
	ln        net.Listener
	be        backend.Backend
	device    string
	wrapCH    func(driver.Conn) driver.Conn

	// mu guards the models (and backend) between the training loop and
	// /v1/score, plus modelVersion.
	mu           sync.Mutex
	models       []*Model
	modelVersion string

	// Owned by the training loop.
	store        *CheckpointStore
	ch           driver.Conn
	writer       *kafka.Writer
	dlq          *kafka.Writer // hf.dlq: the samples the trainer cannot use
	index        int64
	step         int64
	trained      int64
	offsets      map[int32]int64
	dedup        *dedupWindow
	cells        map[string]int32
	heldout      []HeldoutRecord
	rows         []stepRow
	rowsSince    time.Time
	lastCkpt     time.Time
	stepsSinceCk int
	dirty        bool
	gen          *kafka.Generation
	genID        int
	// restored says the lineage comes from a checkpoint: a partition absent
	// from offsets then has nothing of it in the weights (see startGeneration).
	restored bool

	ready   atomic.Bool
	metrics *metrics
	reg     *prometheus.Registry
}

// New validates cfg and builds the trainer's models on its backend. It does
// no network I/O; Run connects.
func New(cfg Config, opts ...Option) (*Trainer, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Trainer{cfg: cfg, log: obs.NewLogger("trainer"), offsets: map[int32]int64{}, cells: map[string]int32{}}
	for _, o := range opts {
		o(t)
	}
	if t.be == nil {
		be, why, err := backend.Open(cfg.Device)
		if err != nil {
			return nil, fmt.Errorf("device %s: %w", cfg.Device, err)
		}
		t.be, t.device = be, why
	} else {
		t.device = t.be.Name() + " (given)"
	}
	t.log.Info().Str("device", t.device).Msg("compute backend chosen")
	for i := 0; i < cfg.Ensemble; i++ {
		mc := cfg.Model
		mc.Seed = cfg.Seed + uint64(i)
		m, err := NewModel(t.be, mc)
		if err != nil {
			return nil, err
		}
		t.models = append(t.models, m)
	}
	t.dedup = newDedup(cfg.DedupWindow, nil)
	t.modelVersion = fmt.Sprintf("%s-v0", cfg.Name)
	t.reg = obs.NewRegistry()
	t.metrics = newMetrics(t.reg)
	store, err := NewCheckpointStore(cfg.CheckpointDir, cfg.CheckpointKeep, t.log)
	if err != nil {
		return nil, err
	}
	t.store = store
	return t, nil
}

// HostTensorBytes is the memory the models' tensors take in this process: all
// of it on a backend with host memory (the CPU), 0 on a device.
func (t *Trainer) HostTensorBytes() int64 {
	if _, ok := t.be.(backend.HostView); !ok {
		return 0
	}
	var n int64
	for _, m := range t.models {
		n += m.TensorBytes()
	}
	return n
}

// Device says which backend the trainer uses and why.
func (t *Trainer) Device() string { return t.device }

// ModelVersion returns the version of the latest published checkpoint.
func (t *Trainer) ModelVersion() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.modelVersion
}

type sampleMsg struct {
	gen     int
	part    int32
	off     int64
	s       *schemas.LabeledSample
	err     error
	raw     []byte // the message's bytes (capped), when it did not decode
	arrived time.Time
	// arrivedIndex is the model version index when the sample entered the buffer.
	arrivedIndex int64
}

// Run consumes and trains until ctx ends; then it finishes the current step,
// flushes rows, writes a checkpoint and returns nil. It returns an error only
// for a fatal fault (no broker or ClickHouse at start, a device error, a
// checkpoint that cannot be written).
func (t *Trainer) Run(ctx context.Context) error {
	// A stop asked for while starting (a SIGTERM while ClickHouse or the
	// broker is not reachable yet) is a clean stop: nothing was trained.
	startErr := func(err error) error {
		if ctx.Err() != nil {
			t.log.Info().Err(err).Msg("stopped during start-up")
			return nil
		}
		return err
	}
	if err := kafkax.WaitReachable(ctx, t.cfg.Brokers, 30*time.Second); err != nil {
		return startErr(err)
	}
	if err := kafkax.EnsureAllTopics(ctx, t.cfg.Brokers); err != nil {
		return startErr(err)
	}
	if err := t.openClickHouse(ctx); err != nil {
		return startErr(err)
	}
	defer t.ch.Close()
	t.writer = kafkax.NewWriter(kafkax.WriterConfig{Brokers: t.cfg.Brokers, Topic: schemas.TopicCheckpoints, BatchSize: 1})
	defer t.writer.Close()
	t.dlq = kafkax.NewWriter(kafkax.WriterConfig{Brokers: t.cfg.Brokers, Topic: schemas.TopicDLQ, BatchSize: 1})
	defer t.dlq.Close()
	if err := t.restore(ctx); err != nil {
		return startErr(err)
	}
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                t.cfg.Group,
		Brokers:           t.cfg.Brokers,
		Topics:            []string{t.cfg.Topic},
		HeartbeatInterval: max(t.cfg.SessionTimeout/5, 100*time.Millisecond),
		SessionTimeout:    t.cfg.SessionTimeout,
		RebalanceTimeout:  t.cfg.SessionTimeout,
		JoinGroupBackoff:  500 * time.Millisecond,
		StartOffset:       kafka.FirstOffset,
		Timeout:           5 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("consumer group %s: %w", t.cfg.Group, err)
	}
	gens := make(chan *kafka.Generation)
	msgs := make(chan sampleMsg, 4*t.cfg.BatchSize)
	g, gctx := errgroup.WithContext(ctx)
	if t.cfg.Listen != "off" || t.ln != nil {
		g.Go(func() error { return t.serveHTTP(gctx) })
	}
	g.Go(func() error {
		for {
			gen, err := cg.Next(gctx)
			if err != nil {
				if gctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
					return nil
				}
				t.log.Warn().Err(err).Msg("consumer group join failed; retrying")
				continue
			}
			select {
			case gens <- gen:
			case <-gctx.Done():
				return nil
			}
		}
	})
	g.Go(func() error {
		err := t.loop(gctx, gens, msgs)
		cg.Close()
		return err
	})
	return g.Wait()
}

func (t *Trainer) openClickHouse(ctx context.Context) error {
	admin, err := chx.Open(ctx, t.cfg.ClickHouse, "")
	if err != nil {
		return err
	}
	err = admin.Exec(ctx, "CREATE DATABASE IF NOT EXISTS "+chddl.QuoteIdent(t.cfg.Database))
	admin.Close()
	if err != nil {
		return fmt.Errorf("create database %s: %w", t.cfg.Database, err)
	}
	t.ch, err = chx.Open(ctx, t.cfg.ClickHouse, t.cfg.Database)
	if err != nil {
		return err
	}
	if t.wrapCH != nil {
		t.ch = t.wrapCH(t.ch)
	}
	if err := t.ch.Exec(ctx, StepsDDL); err != nil {
		return fmt.Errorf("create trainer_steps: %w", err)
	}
	return nil
}

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
		t.mu.Lock()
		for i, m := range t.models {
			if err := m.Restore(ck.Models[i]); err != nil {
				t.mu.Unlock()
				return fmt.Errorf("%s: %w", path, err)
			}
		}
		t.modelVersion = ck.ModelVersion
		t.mu.Unlock()
		t.index, t.step, t.trained = ck.Index, ck.Step, ck.SamplesTrained
		for p, o := range ck.Offsets {
			t.offsets[p] = o
		}
		t.dedup = newDedup(t.cfg.DedupWindow, ck.Recent)
		if ck.CellVersions != nil {
			t.cells = ck.CellVersions
		}
		t.heldout = ck.Heldout
		t.restored = true
		t.log.Info().Str("checkpoint", path).Str("model_version", ck.ModelVersion).Int64("step", ck.Step).
			Interface("offsets", ck.Offsets).Msg("restored checkpoint; reading from its offsets")
	}
	t.metrics.step.Set(float64(t.step))
	// Rows of steps after the checkpoint describe work the restart discards.
	if err := t.ch.Exec(ctx, "ALTER TABLE trainer_steps DELETE WHERE trainer = ? AND step > ?", t.cfg.Name, uint64(t.step)); err != nil {
		return fmt.Errorf("delete trainer_steps rows after step %d: %w", t.step, err)
	}
	if ck != nil {
		t.publish(ctx, ck)
	}
	t.lastCkpt = time.Now()
	t.ready.Store(true)
	return nil
}

// loop is the training loop: it owns the buffer, the models' training, rows and
// checkpoints.
func (t *Trainer) loop(ctx context.Context, gens <-chan *kafka.Generation, msgs chan sampleMsg) error {
	var buf []sampleMsg
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	// stop is the clean shutdown: the final flush and checkpoint, under a
	// context of their own since ctx has ended. Samples left in buf are
	// re-read after restart (they are past the frontier).
	stop := func() error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		err := t.housekeeping(sctx, true)
		t.log.Info().Int64("step", t.step).Int("unconsumed_in_buffer", len(buf)).Msg("trainer stopped")
		return err
	}
	// tidy is the housekeeping between steps. A stop that arrives while it
	// waits on ClickHouse (a slow flush, a retry's backoff) fails the flush
	// with the cancellation; that is no fault but the stop itself, so it
	// takes the clean shutdown, which flushes the rows (still buffered) and
	// writes the final checkpoint, instead of exiting with an error and
	// losing the work since the last checkpoint.
	tidy := func() (stopped bool, err error) {
		if err := t.housekeeping(ctx, false); err != nil {
			if ctx.Err() == nil {
				return false, err
			}
			t.log.Info().Err(err).Msg("stopped during housekeeping; finishing with the final flush and checkpoint")
			return true, stop()
		}
		return false, nil
	}
	for {
		for len(buf) >= t.cfg.BatchSize {
			if err := t.trainBatch(ctx, buf[:t.cfg.BatchSize]); err != nil {
				return err
			}
			buf = buf[t.cfg.BatchSize:]
			if stopped, err := tidy(); stopped || err != nil {
				return err
			}
		}
		if len(buf) > 0 && time.Since(buf[0].arrived) >= t.cfg.BatchAge {
			if err := t.trainBatch(ctx, buf); err != nil {
				return err
			}
			buf = nil
		}
		if stopped, err := tidy(); stopped || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return stop()
		case gen := <-gens:
			buf = buf[:0]
			t.startGeneration(gen, msgs)
		case m := <-msgs:
			buf = t.accept(buf, m)
		drain:
			for len(buf) < t.cfg.BatchSize {
				select {
				case m := <-msgs:
					buf = t.accept(buf, m)
				default:
					break drain
				}
			}
		case <-tick.C:
		}
	}
}

func (t *Trainer) accept(buf []sampleMsg, m sampleMsg) []sampleMsg {
	if m.gen != t.genID {
		return buf
	}
	m.arrived = time.Now()
	m.arrivedIndex = t.index
	return append(buf, m)
}

// startGeneration starts one partition reader per assigned partition, at the
// trained frontier (the checkpoint's offsets, advanced by steps since). A
// partition that frontier does not list starts at the first offset when the
// lineage was restored from a checkpoint, and at the group's committed offset
// (or the first offset) on a cold start.
func (t *Trainer) startGeneration(gen *kafka.Generation, msgs chan<- sampleMsg) {
	t.genID++
	t.gen = gen
	id := t.genID
	var parts []int
	for _, a := range gen.Assignments[t.cfg.Topic] {
		start, ok := t.offsets[int32(a.ID)]
		switch {
		case ok:
		case t.restored:
			// Nothing of this partition is in the restored weights. The
			// group's offset cannot stand in for the frontier: it is
			// committed after every checkpoint, also after newer ones
			// than the one restored (a corrupt newest checkpoint makes
			// LoadLatest fall back), so it may lie past samples this
			// lineage never trained.
			start = kafka.FirstOffset
		case a.Offset >= 0:
			// Cold start: continue where the group left off, and record
			// that as this lineage's frontier, so that a restore from a
			// checkpoint of this lineage starts there too (and not at
			// the first offset, as for a partition it never read) even
			// when nothing of the partition is consumed before it.
			start = a.Offset
			t.offsets[int32(a.ID)] = start
		default:
			start = kafka.FirstOffset
		}
		parts = append(parts, a.ID)
		p := int32(a.ID)
		gen.Start(func(ctx context.Context) { t.readPartition(ctx, id, p, start, msgs) })
	}
	t.log.Info().Int32("generation", gen.ID).Ints("partitions", parts).Msg("consumer group generation started")
}

func (t *Trainer) readPartition(ctx context.Context, gen int, part int32, start int64, msgs chan<- sampleMsg) {
	rc := kafkax.ReaderConfig(t.cfg.Brokers, "", t.cfg.Topic)
	rc.Partition = int(part)
	r := kafka.NewReader(rc)
	defer r.Close()
	if err := r.SetOffset(start); err != nil {
		t.log.Error().Err(err).Int32("partition", part).Msg("set offset")
	}
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			t.log.Warn().Err(err).Int32("partition", part).Msg("fetch failed; retrying")
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		sm := sampleMsg{gen: gen, part: part, off: m.Offset}
		ev, err := schemas.Decode(m.Value)
		if err == nil {
			s, ok := ev.(*schemas.LabeledSample)
			if !ok {
				err = fmt.Errorf("unexpected event type %s on %s", ev.Type(), t.cfg.Topic)
			}
			sm.s = s
		}
		sm.err = err
		if err != nil { // kept for the dead letter (capped like every payload)
			sm.raw = append([]byte(nil), m.Value[:min(len(m.Value), schemas.DefaultLimits().Payload)]...)
		}
		select {
		case msgs <- sm:
		case <-ctx.Done():
			return
		}
	}
}

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

// trainBatch consumes batch (a prefix of what was read): it advances the
// frontier over every message, skips undecodable and invalid ones (counted and
// logged; see checkSample) and duplicates, drops stale ones, evaluates
// held-out ones, and trains the rest in one step.
func (t *Trainer) trainBatch(ctx context.Context, batch []sampleMsg) error {
	start := time.Now()
	var (
		train             []Example
		ids               []string
		held              []Example
		staleV, staleM    []float64
		bad, dup, dropped int
	)
	for _, m := range batch {
		if o := m.off + 1; o > t.offsets[m.part] {
			t.offsets[m.part] = o
		}
		t.dirty = true
		if m.err != nil {
			bad++
			t.log.Error().Err(m.err).Str("topic", t.cfg.Topic).Int32("partition", m.part).Int64("offset", m.off).
				Msg("skipping undecodable sample: it is consumed, not retried, and dead-lettered in hf.dlq; fix its producer and re-send it")
			code := schemas.CodeMalformed
			var fe *schemas.FieldError
			if errors.As(m.err, &fe) && fe.Code != "" {
				code = fe.Code
			}
			if err := t.deadLetter(ctx, m, schemas.StageDecode, code, m.err.Error(), m.raw); err != nil {
				return err
			}
			continue
		}
		s := m.s
		if fe := checkSample(s); fe != nil {
			bad++
			t.metrics.invalid.WithLabelValues(fe.Code).Inc()
			t.log.Error().Err(fe).Str("reason", fe.Code).Str("topic", t.cfg.Topic).Int32("partition", m.part).Int64("offset", m.off).
				Str("sample_id", s.SampleID).Msg("skipping invalid sample: it is consumed, not retried, and dead-lettered in hf.dlq; fix its producer and re-send it")
			raw, _ := schemas.Encode(s) // what was read, for the record
			if err := t.deadLetter(ctx, m, schemas.StageSyntax, fe.Code, fe.Error(), raw[:min(len(raw), schemas.DefaultLimits().Payload)]); err != nil {
				return err
			}
			continue
		}
		label := LabelIndex(s.Label)
		if t.dedup.has(s.SampleID) {
			dup++
			continue
		}
		t.dedup.add(s.SampleID)
		if len(t.cells) >= t.cfg.MaxCells {
			t.cells = map[string]int32{}
		}
		if v, ok := t.cells[s.CellID]; !ok || s.HarnessVersionIndex > v {
			t.cells[s.CellID] = s.HarnessVersionIndex
		}
		sv := float64(t.cells[s.CellID] - s.HarnessVersionIndex)
		if t.cfg.MaxStaleness > 0 && sv > float64(t.cfg.MaxStaleness) {
			dropped++
			continue
		}
		ex := Example{Input: Input{Update: s.Update, Query: s.Query, Kind: s.ArtifactKind, Evolver: s.EvolverModel,
			Agent: s.AgentModel, Benchmark: s.Benchmark}, Effect: s.Effect, Label: label}
		if IsHeldOut(s.SampleID, t.cfg.HeldoutFraction) {
			held = append(held, ex)
			continue
		}
		train = append(train, ex)
		ids = append(ids, s.SampleID)
		staleV = append(staleV, sv)
		staleM = append(staleM, float64(t.index-m.arrivedIndex))
	}
	t.mu.Lock()
	if len(held) > 0 {
		t.evaluate(held)
	}
	var l Losses
	var err error
	for _, m := range t.models {
		var li Losses
		if li, err = m.TrainStep(train); err != nil {
			break
		}
		k := float64(len(t.models))
		l.Total += li.Total / k
		l.NLL += li.NLL / k
		l.CE += li.CE / k
	}
	mv := t.modelVersion
	t.mu.Unlock()
	if err != nil {
		return err
	}
	t.metrics.duplicates.Add(float64(dup))
	t.metrics.bad.Add(float64(bad))
	t.metrics.droppedStale.Add(float64(dropped))
	if len(train) == 0 {
		return nil
	}
	t.step++
	t.stepsSinceCk++
	t.trained += int64(len(train))
	if len(t.heldout) > t.cfg.HeldoutWindow {
		t.heldout = append([]HeldoutRecord(nil), t.heldout[len(t.heldout)-t.cfg.HeldoutWindow:]...)
	}
	hm := Summarize(t.heldout)
	row := stepRow{modelVersion: mv, step: uint64(t.step), samples: uint32(len(train)), ids: ids, hash: idHash(ids), l: l, h: hm,
		sv50: quantile(staleV, 0.5), sv95: quantile(staleV, 0.95), sm50: quantile(staleM, 0.5), sm95: quantile(staleM, 0.95),
		droppedStale: uint32(dropped), writtenAt: time.Now()}
	if len(t.rows) == 0 {
		t.rowsSince = time.Now()
	}
	t.rows = append(t.rows, row)
	t.metrics.observeStep(row, time.Since(start))
	t.log.Info().Int64("step", t.step).Int("samples", len(train)).Int("heldout", len(held)).Int("duplicates", dup).
		Int("dropped_stale", dropped).Int("bad", bad).Float64("loss", l.Total).Float64("loss_nll", l.NLL).Float64("loss_ce", l.CE).
		Float64("heldout_acc", hm.Acc).Float64("heldout_macro_f1", hm.MacroF1).Float64("heldout_mae", hm.MAE).
		Float64("staleness_versions_p95", row.sv95).Float64("staleness_model_p95", row.sm95).
		Dur("took", time.Since(start)).Msg("step")
	_ = ctx
	return nil
}

// deadLetter writes the rejected record of a sample the trainer skips to
// hf.dlq and waits for its acknowledgement: the sample's offset is part of
// the next checkpoint, so a record not written now would never be. Its event
// id derives from the sample's coordinates, so a sample read again after a
// restart is dead-lettered again under the same id.
func (t *Trainer) deadLetter(ctx context.Context, m sampleMsg, stage, code, msg string, payload []byte) error {
	rec := &schemas.Rejected{Envelope: schemas.Envelope{EventTime: time.Now().UTC().Truncate(time.Millisecond), Source: "trainer:" + t.cfg.Name},
		Stage: stage, ReasonCode: code, Message: msg, SourceTopic: t.cfg.Topic, Partition: m.part, Offset: m.off, Payload: payload}
	if m.s != nil {
		rec.Project = m.s.Project
	}
	rec.EventID = schemas.DeriveEventID(rec)
	b, err := schemas.Encode(rec)
	if err == nil {
		// A stop arriving now does not cut the record short.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err = t.dlq.WriteMessages(wctx, kafka.Message{Key: []byte(rec.PartitionKey()), Value: b})
		cancel()
	}
	if err != nil {
		return fmt.Errorf("dead-letter %s/%d@%d (%s): %w", t.cfg.Topic, m.part, m.off, code, err)
	}
	return nil
}

// checkSample returns the first problem that makes s unfit to train on, or
// nil: a *schemas.FieldError whose Code (one of the DLQ's reason codes) is the
// reason. Decode does not apply schemas.Validate, and one effect that is NaN,
// infinite or far out of range makes the whole step's loss non-finite: the
// step fails with ErrDiverged, and after the restart the same sample fails it
// again, forever. It checks what the trainer reads of a sample, by the
// labeled_sample contract (schemas/fields.go): the id (dedup, held-out split,
// trainer_steps rows), the label, the effect and the harness version index
// (staleness, kept in checkpoints); a bad field the trainer does not read is
// no reason to lose the sample's training signal.
func checkSample(s *schemas.LabeledSample) *schemas.FieldError {
	bad := func(field, code, msg string) *schemas.FieldError {
		return &schemas.FieldError{Type: schemas.TypeLabeledSample, Field: field, Code: code, Msg: msg}
	}
	switch {
	case s.SampleID == "":
		return bad("sample_id", schemas.CodeMissingField, `required field "sample_id" is empty`)
	case LabelIndex(s.Label) < 0:
		return bad("label", schemas.CodeBadEnum, fmt.Sprintf("%q is not one of %s", s.Label, strings.Join(LabelNames[:], ", ")))
	case !(s.Effect >= -1 && s.Effect <= 1): // NaN fails both comparisons
		return bad("effect", schemas.CodeOutOfRange, strconv.FormatFloat(s.Effect, 'g', -1, 64)+" is outside [-1,1]")
	case s.HarnessVersionIndex < 0:
		return bad("harness_version_index", schemas.CodeOutOfRange, strconv.Itoa(int(s.HarnessVersionIndex))+" is negative")
	}
	return nil
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

// housekeeping flushes rows when due and checkpoints when due (or when final
// and anything was consumed since the last checkpoint).
func (t *Trainer) housekeeping(ctx context.Context, final bool) error {
	due := t.dirty && (final || t.stepsSinceCk >= t.cfg.CheckpointEvery || time.Since(t.lastCkpt) >= t.cfg.CheckpointInterval)
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
				return backoff.Permanent(fmt.Errorf("append step %d: %w", r.step, err))
			}
		}
		return classify(b.Send())
	}
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = 100*time.Millisecond, 5*time.Second, time.Minute
	if err := backoff.Retry(op, backoff.WithContext(bo, ctx)); err != nil {
		return fmt.Errorf("write %d trainer_steps rows: %w", len(t.rows), err)
	}
	t.rows = t.rows[:0]
	return nil
}

func classify(err error) error {
	if err != nil && !chx.Retryable(err) {
		return backoff.Permanent(err)
	}
	return err
}

// checkpoint writes a checkpoint of the current state, then publishes it and
// commits the group's offsets (monitoring only).
func (t *Trainer) checkpoint(ctx context.Context) error {
	start := time.Now()
	idx := max(t.index, t.store.MaxIndex()) + 1
	ck := &Checkpoint{
		Index: idx, ModelVersion: fmt.Sprintf("%s-v%d", t.cfg.Name, idx), Step: t.step, SamplesTrained: t.trained,
		Topic: t.cfg.Topic, Offsets: map[int32]int64{}, Recent: t.dedup.ordered(), CellVersions: t.cells,
		Heldout: t.heldout, CreatedAt: time.Now().UTC(),
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
	t.dirty = false
	t.stepsSinceCk = 0
	t.lastCkpt = time.Now()
	t.metrics.checkpoints.Inc()
	t.log.Info().Str("path", path).Str("model_version", ck.ModelVersion).Int64("step", ck.Step).
		Interface("offsets", ck.Offsets).Dur("took", time.Since(start)).Msg("checkpoint written")
	t.publish(ctx, ck)
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

// publish sends ck's checkpoint_published event (at least once; its event id
// is the model version, so consumers dedupe).
func (t *Trainer) publish(ctx context.Context, ck *Checkpoint) {
	ev := &schemas.CheckpointPublished{ModelVersion: ck.ModelVersion, Step: ck.Step, SamplesTrained: ck.SamplesTrained}
	ev.EventID = "checkpoint:" + ck.ModelVersion
	ev.EventTime = ck.CreatedAt
	ev.Source = "trainer:" + t.cfg.Name
	for p, o := range ck.Offsets {
		ev.Offsets = append(ev.Offsets, schemas.TopicOffset{Topic: ck.Topic, Partition: p, Offset: o})
	}
	hm := Summarize(ck.Heldout)
	ev.Metrics = map[string]float64{"heldout_acc": hm.Acc, "heldout_macro_f1": hm.MacroF1, "heldout_mae": hm.MAE, "heldout_n": float64(hm.N)}
	b, err := schemas.Encode(ev)
	if err == nil {
		err = t.writer.WriteMessages(ctx, kafka.Message{Key: []byte(ev.PartitionKey()), Value: b})
	}
	if err != nil {
		t.log.Warn().Err(err).Str("model_version", ck.ModelVersion).Msg("publish checkpoint_published failed (checkpoint is durable)")
	}
}

func (t *Trainer) serveHTTP(ctx context.Context) error {
	addr, serve := t.cfg.Listen, func() error { return obs.Serve(ctx, t.cfg.Listen, t.Handler(), t.httpReady) }
	if t.ln != nil {
		addr, serve = t.ln.Addr().String(), func() error { return obs.ServeListener(ctx, t.ln, t.Handler(), t.httpReady) }
	}
	if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http %s: %w", addr, err)
	}
	return nil
}

// Handler returns the trainer's HTTP handler: /v1/score, /healthz, /metrics.
func (t *Trainer) Handler() http.Handler {
	mux := obs.Mux(t.reg, func() error {
		if !t.ready.Load() {
			return errors.New("restoring checkpoint")
		}
		return nil
	})
	mux.HandleFunc("/v1/score", t.handleScore)
	return mux
}
