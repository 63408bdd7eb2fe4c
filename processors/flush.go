package processors

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/harnessflow/harnessflow/internal/retry"
)

// flushExit maps a flush error to run's result: ErrWrite is fatal, anything
// else (a failed commit, the generation ending) ends the partition's work,
// which runGroup starts again from the committed offsets while the
// generation lasts.
func flushExit(err error) error {
	if errors.Is(err, ErrWrite) {
		return err
	}
	return nil
}

// drain finishes the in-flight flush and writes and commits the batch being
// processed when the run ends, within Config.DrainTimeout (fctx); with a
// negative DrainTimeout fctx is already over and nothing more is written.
func (w *partWork) drain(fctx context.Context, out *sink, processed int) error {
	if w.p.cfg.DrainTimeout < 0 {
		return nil // a crash: whatever is in flight is cancelled
	}
	if err := w.waitFlush(); err != nil || fctx.Err() != nil {
		return flushExit(err)
	}
	w.startFlush(fctx, out, processed)
	if err := w.waitFlush(); err != nil {
		w.p.log.Warn().Err(err).Str("stage", w.stage).Int("partition", w.part).Msg("drain: batch not written or not committed")
	}
	return nil
}

// waitFlush waits for the flush in flight, if any, and returns its error.
func (w *partWork) waitFlush() error {
	if w.flushDone == nil {
		return nil
	}
	err := <-w.flushDone
	w.flushDone = nil
	return err
}

// startFlush hands the batch's outputs and the offsets consumed so far to a
// goroutine that writes the outputs, waits for their acknowledgement, then
// commits the offsets. out belongs to that goroutine until waitFlush. A write
// that fails past the retry budget is ErrWrite (fatal); a failed commit ends
// the generation.
func (w *partWork) startFlush(fctx context.Context, out *sink, processed int) {
	commit := map[string]map[int]int64{}
	var caps map[string]int64
	if w.commitCap != nil {
		caps = w.commitCap()
	}
	for _, s := range w.streams {
		to := s.consumed
		// Never commit past a message that still waits in memory (a
		// pending event, a held cell_finished): until it is processed,
		// what it derives is not written (and Lag says so).
		if held, ok := caps[s.topic]; ok && held < to {
			to = held
		}
		if to > s.flushedTo && to > s.committed {
			commit[s.topic] = map[int]int64{w.part: to}
			s.flushedTo = to
		}
	}
	hwm := map[string]int64{}
	for _, s := range w.streams {
		hwm[s.topic] = s.hwm
	}
	done := make(chan error, 1)
	w.flushDone = done
	go func() {
		w.p.cache.put(out.admitted)
		err := w.flush(fctx, out, processed, commit, hwm)
		if err == nil {
			out.reset()
		}
		// After a failed flush a produce request abandoned on ctx may still
		// be encoding out.msgs (outWriter does not copy them): out is left
		// as it is, and never used again, since any flush error ends the
		// partition's work (run, drain).
		done <- err
	}()
}

func (w *partWork) flush(ctx context.Context, out *sink, processed int, commit map[string]map[int]int64, hwm map[string]int64) error {
	p, cfg := w.p, &w.p.cfg
	start := time.Now()
	if len(out.msgs) > 0 {
		err := retry.Do(ctx, retry.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second, MaxElapsed: cfg.RetryMaxElapsed}, func() error {
			err := p.out.write(ctx, out.msgs)
			if err != nil && ctx.Err() != nil {
				return retry.Permanent(ctx.Err())
			}
			if err != nil {
				p.m.writeRetries.Inc()
				p.log.Warn().Err(err).Int("messages", len(out.msgs)).Msg("write outputs failed; retrying")
			}
			return err
		}, nil)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w: %d messages of %s partition %d: %w", ErrWrite, len(out.msgs), w.stage, w.part, err)
		}
	}
	if len(commit) > 0 {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := w.commits.commit(ctx, commit); err != nil {
			p.log.Warn().Err(err).Str("group", w.group).Int("partition", w.part).Msg("commit failed; the partition's work stops and starts again from the committed offsets")
			return err
		}
		for topic, po := range commit {
			off := po[w.part]
			p.m.commitLag.WithLabelValues(w.group, topic, strconv.Itoa(w.part)).Set(float64(max(hwm[topic]-off, 0)))
			if p.prog != nil {
				p.prog(Progress{Group: w.group, Topic: topic, Partition: w.part, Offset: off})
			}
		}
	}
	if out.agedOut > 0 {
		p.log.Warn().Str("stage", w.stage).Int("partition", w.part).Int("aged_out", out.agedOut).Dur("cell_idle", cfg.CellIdle).
			Msg("unfinished cells aged out after --cell-idle without an event; their state was dropped (stage A dead-letters each as limit/cell_idle)")
	}
	if processed > 0 || len(out.msgs) > 0 {
		p.log.Debug().Str("stage", w.stage).Int("partition", w.part).Int("in", processed).
			Int("outcomes", out.outcomes).Int("rejected", out.rejected).Int("samples", out.samples).
			Int("round_metrics", out.rounds).Dur("took", time.Since(start)).Msg("batch")
	}
	return nil
}
