package trainer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/retry"
	"github.com/harnessflow/harnessflow/schemas"
)

// sampleMsg is one message of the sample topic as a partition reader hands
// it to the training loop: its coordinates and generation, and the sample or
// why it did not decode.
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

// joinGroup joins the trainer's consumer group on its topic. The group only
// assigns partitions (and keeps offsets for lag monitoring): the trainer
// reads each partition from its trained frontier (startGeneration).
func (t *Trainer) joinGroup() (*kafka.ConsumerGroup, error) {
	return kafkax.NewConsumerGroup(kafkax.GroupConfig{
		ID:                t.cfg.Group,
		Brokers:           t.cfg.Brokers,
		Topics:            []string{t.cfg.Topic},
		SessionTimeout:    t.cfg.SessionTimeout,
		HeartbeatInterval: max(t.cfg.SessionTimeout/5, 100*time.Millisecond),
		RebalanceTimeout:  t.cfg.SessionTimeout,
		JoinGroupBackoff:  500 * time.Millisecond,
	})
}

// generations hands each generation of cg to the training loop on gens,
// retrying failed joins, until ctx ends or cg is closed.
func (t *Trainer) generations(ctx context.Context, cg *kafka.ConsumerGroup, gens chan<- *kafka.Generation) error {
	for {
		gen, err := cg.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
				return nil
			}
			t.log.Warn().Err(err).Msg("consumer group join failed; retrying")
			continue
		}
		select {
		case gens <- gen:
		case <-ctx.Done():
			return nil
		}
	}
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
			// Behind: a new sample beyond this batch is already read.
			behind := len(buf)-t.cfg.BatchSize+len(msgs) > 0
			if err := t.trainBatch(ctx, buf[:t.cfg.BatchSize], behind); err != nil {
				return err
			}
			buf = buf[t.cfg.BatchSize:]
			if stopped, err := tidy(); stopped || err != nil {
				return err
			}
		}
		if len(buf) > 0 && time.Since(buf[0].arrived) >= t.cfg.BatchAge {
			if err := t.trainBatch(ctx, buf, len(msgs) > 0); err != nil {
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

// accept appends m to buf, stamped with its arrival, unless it was read for
// an earlier generation (its partition may be another member's now).
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

// readPartition reads partition part from start and hands every message,
// decoded or not, to the loop on msgs, until ctx (the generation's) ends.
func (t *Trainer) readPartition(ctx context.Context, gen int, part int32, start int64, msgs chan<- sampleMsg) {
	rc := kafkax.ReaderConfig(t.cfg.Brokers, "", t.cfg.Topic)
	rc.Partition = int(part)
	r := kafka.NewReader(rc)
	defer r.Close()
	if err := r.SetOffset(start); err != nil {
		t.log.Error().Err(err).Int32("partition", part).Msg("set offset")
	}
	restarts := retry.NewRestarts(retry.Policy{Initial: 200 * time.Millisecond, Max: 5 * time.Second})
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d := restarts.Next()
			t.log.Warn().Err(err).Int32("partition", part).Dur("retry_in", d).Msg("fetch failed; retrying")
			if !retry.Sleep(ctx, d) {
				return
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
