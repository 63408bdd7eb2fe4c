package processors

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// partWork is one assigned partition number of one stage in one generation.
type partWork struct {
	// commitCap (stage A) returns the offset each topic's commit stops at
	// (topics absent: no limit).
	commitCap func() map[string]int64
	p         *Processor
	stage     string
	group     string
	gen       *kafka.Generation
	part      int
	streams   []*stream
	commits   *committer // the generation's, shared by its partitions
	// flushDone receives the result of the flush in flight (nil: none).
	flushDone chan error
}

// stageHooks are what a stage does with a partition's merged input, bound to
// the stage's state for the partition (newStage).
type stageHooks struct {
	// process handles one merged message; its outputs go to the sink only
	// when emit (the bool) is true.
	process func(*inMsg, bool, *sink, time.Time)
	// tick runs the wall-clock work of a partition at its end.
	tick func(*sink, time.Time)
	// size is the state's size, for the gauges.
	size func() partSize
	// release runs when the run ends, idle when every stream is at its end
	// (nil: nothing to run).
	release, idle func(*sink, time.Time) // stage A: admit held finishes
}

// run rebuilds the partition's state from the log start, then processes and
// emits from the committed offsets on, until the generation or the run ends.
// It returns an error only for a fatal problem (outputs not writable).
func (w *partWork) run(gctx, runCtx context.Context) error {
	p := w.p
	// ctx stops the fetchers: generation or run over. fctx bounds writes and
	// commits: it ends with the generation, and DrainTimeout after the run
	// (at once when DrainTimeout < 0: a crash).
	//
	// The fetchers and the flush context's goroutine are owned: run waits
	// for them (after cancel and fcancel, which end them), so a partition
	// started again never overlaps its previous fetchers.
	var owned sync.WaitGroup
	defer owned.Wait()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fctx, fcancel := w.flushContext(gctx, runCtx, cancel, &owned)
	defer func() {
		// Never leave a flush running behind the generation.
		fcancel()
		_ = w.waitFlush()
	}()
	st := w.newStage()
	sizeKey := w.stage + "/" + strconv.Itoa(w.part)
	defer p.setSize(sizeKey, partSize{})
	p.m.rebuilds.WithLabelValues(w.stage).Inc()
	ch := w.startFetchers(ctx, &owned)
	return w.loop(gctx, runCtx, fctx, ch, st, sizeKey)
}

// flushContext returns the context that bounds the partition's writes and
// commits (fctx), and its cancel. A goroutine ends it with the generation
// (gctx), and DrainTimeout after the run (runCtx) ends; at once when
// DrainTimeout < 0 (a crash). Whichever of the three ends first, the
// goroutine also calls stopFetch, which stops the fetchers.
func (w *partWork) flushContext(gctx, runCtx context.Context, stopFetch context.CancelFunc, owned *sync.WaitGroup) (context.Context, context.CancelFunc) {
	cfg := &w.p.cfg
	fparent := context.Background()
	if cfg.DrainTimeout < 0 {
		// A crash: writes and commits end the moment the run does, not
		// when the goroutine below gets to run.
		fparent = runCtx
	}
	fctx, fcancel := context.WithCancel(fparent)
	owned.Add(1)
	go func() {
		defer owned.Done()
		select {
		case <-gctx.Done():
			fcancel()
		case <-runCtx.Done():
			if cfg.DrainTimeout < 0 {
				fcancel()
			}
		case <-fctx.Done():
		}
		stopFetch()
		if cfg.DrainTimeout > 0 {
			t := time.NewTimer(cfg.DrainTimeout)
			defer t.Stop()
			select {
			case <-t.C:
			case <-gctx.Done():
			case <-fctx.Done():
			}
		}
		fcancel()
	}()
	return fctx, fcancel
}

// newStage builds the stage's state for the partition (cells for stage A,
// pairs for stage B) and returns its hooks; for stage A it also sets
// w.commitCap.
func (w *partWork) newStage() stageHooks {
	p, cfg := w.p, &w.p.cfg
	if w.stage == stageA {
		c := newCells(cfg, p.m)
		c.log, c.part = p.log, w.part
		st := stageHooks{process: c.process, tick: c.tick}
		st.size = func() partSize { return partSize{cells: len(c.byID), pending: c.pending.live} }
		w.commitCap = c.commitFrom
		st.release = c.drain
		if cfg.StopWhenCaughtUp {
			// Until caught up, the log as it stands is the whole input:
			// a finish held at its end has nothing left to wait for.
			st.idle = c.drain
		}
		return st
	}
	s := newPairs(cfg, p.m, p.camps)
	s.log = p.log
	st := stageHooks{process: s.process}
	st.tick = s.sweep
	st.size = func() partSize { return partSize{pairers: s.size()} }
	return st
}

// startFetchers starts one fetcher per stream, reading from the log start
// until ctx ends, and asks each for its first fetch. Their fetches arrive on
// the returned channel; owned counts them until they end.
func (w *partWork) startFetchers(ctx context.Context, owned *sync.WaitGroup) <-chan fetched {
	p := w.p
	ch := make(chan fetched, len(w.streams))
	for i, s := range w.streams {
		f := &fetcher{client: p.client, cfg: &p.cfg, topic: s.topic, part: w.part, idx: i, decode: true, dec: p.dec, m: p.m}
		if w.stage == stageB {
			f.cache, f.split = p.cache, true
		}
		owned.Add(1)
		go func() { defer owned.Done(); f.run(ctx, -1, s.want, ch) }()
		s.want <- struct{}{}
		s.inflight = true
	}
	return ch
}

// loop is the partition's main loop: it attaches what the fetchers deliver
// on ch, merges and processes it (merge), and hands each full batch, or the
// batch the merge blocked after, to a flush. It returns when the generation
// ends, when the run ends (drain), when a fetch fails (nil: runGroup starts
// the work again) or when a flush fails (flushExit).
func (w *partWork) loop(gctx, runCtx, fctx context.Context, ch <-chan fetched, st stageHooks, sizeKey string) error {
	p, cfg := w.p, &w.p.cfg
	out, spare := &sink{}, &sink{}
	processed, since := 0, time.Now()
	rebuilt := false
	// idled: idle ran since the last processed message (it runs again only
	// after new input, not on every empty fetch).
	idled := false
	ticker := time.NewTicker(cfg.FetchWait)
	defer ticker.Stop()
	for {
		// Take what the fetchers delivered.
		if err := w.attachDelivered(ch); err != nil {
			w.fetchFailed(err)
			return nil
		}
		now := time.Now()
		n, blocked := w.merge(st.process, out, cfg.BatchSize-processed, now)
		if n > 0 {
			processed += n
			idled = false
		}
		if blocked && st.idle != nil && !idled && w.allAtEnd() {
			// Every stream is at its end: run idle now rather than at the
			// next tick, so a run that stops when caught up does not wait a
			// FetchWait for its last held finishes.
			st.idle(out, now)
			idled = true
		}
		if !rebuilt && w.rebuildDone() {
			rebuilt = true
			p.log.Info().Str("stage", w.stage).Int("partition", w.part).Dur("took", time.Since(since)).Msg("state rebuilt from the log")
		}
		if processed >= cfg.BatchSize || (blocked && (processed > 0 || len(out.msgs) > 0)) {
			// Write and commit this batch in the background while the next
			// one is processed; flushes stay in order (one in flight).
			if err := w.waitFlush(); err != nil {
				return flushExit(err)
			}
			w.startFlush(fctx, out, processed)
			out, spare = spare, out
			processed = 0
			p.setSize(sizeKey, st.size())
			continue
		}
		if !blocked {
			continue
		}
		select {
		case f := <-ch:
			if err := w.attach(f); err != nil {
				w.fetchFailed(err)
				return nil
			}
		case <-ticker.C:
			if w.allAtEnd() {
				st.tick(out, time.Now())
				if st.idle != nil {
					st.idle(out, time.Now())
					idled = true
				}
			}
		case err := <-w.flushDone:
			w.flushDone = nil
			if err != nil {
				return flushExit(err)
			}
		case <-gctx.Done():
			return nil
		case <-runCtx.Done():
			if st.release != nil && cfg.DrainTimeout >= 0 {
				st.release(out, time.Now())
			}
			return w.drain(fctx, out, processed)
		}
	}
}

// attachDelivered attaches every fetch already delivered on ch, without
// waiting for more. It returns the error of a failed fetch.
func (w *partWork) attachDelivered(ch <-chan fetched) error {
	for {
		select {
		case f := <-ch:
			if err := w.attach(f); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// attach hands a fetch's messages to its stream (as its buffer, or queued
// behind what the stream still holds) and, when nothing is queued, asks its
// fetcher for the next fetch. It returns the fetch's error, if it failed.
func (w *partWork) attach(f fetched) error {
	if f.err != nil {
		return f.err
	}
	s := w.streams[f.stream]
	s.inflight = false
	s.hwm, s.next = f.hwm, f.next
	if f.next >= f.hwm {
		s.endSeen = f.asked
	}
	if len(f.msgs) > 0 {
		if s.head() == nil && len(s.queued) == 0 {
			s.buf, s.pos = f.msgs, 0
		} else {
			s.queued = append(s.queued, f)
		}
	}
	if len(s.queued) == 0 {
		s.want <- struct{}{}
		s.inflight = true
	}
	return nil
}

// fetchFailed logs a fetch that failed past its retries: the partition's
// work stops (loop returns nil) and runGroup starts it again from the
// committed offsets.
func (w *partWork) fetchFailed(err error) {
	w.p.log.Error().Err(err).Str("stage", w.stage).Int("partition", w.part).Msg("fetch failed; the partition's work stops and starts again from the committed offsets")
}
