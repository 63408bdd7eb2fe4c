package processors

import (
	"context"
	"strconv"
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

// run rebuilds the partition's state from the log start, then processes and
// emits from the committed offsets on, until the generation or the run ends.
// It returns an error only for a fatal problem (outputs not writable).
func (w *partWork) run(gctx, runCtx context.Context) error {
	p, cfg := w.p, &w.p.cfg
	// ctx stops the fetchers: generation or run over. fctx bounds writes and
	// commits: it ends with the generation, and DrainTimeout after the run
	// (at once when DrainTimeout < 0: a crash).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fparent := context.Background()
	if cfg.DrainTimeout < 0 {
		// A crash: writes and commits end the moment the run does, not
		// when the goroutine below gets to run.
		fparent = runCtx
	}
	fctx, fcancel := context.WithCancel(fparent)
	defer func() {
		// Never leave a flush running behind the generation.
		fcancel()
		_ = w.waitFlush()
	}()
	go func() {
		select {
		case <-gctx.Done():
			fcancel()
		case <-runCtx.Done():
			if cfg.DrainTimeout < 0 {
				fcancel()
			}
		case <-fctx.Done():
		}
		cancel()
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
	var process func(*inMsg, bool, *sink, time.Time)
	var tick func(*sink, time.Time)
	var size func() partSize
	var release, idle func(*sink, time.Time) // stage A: admit held finishes
	if w.stage == stageA {
		c := newCells(cfg, p.m)
		c.log = p.log
		process, tick = c.process, c.tick
		size = func() partSize { return partSize{cells: len(c.byID), pending: c.pending.live} }
		w.commitCap = c.commitFrom
		release = c.drain
		if cfg.StopWhenCaughtUp {
			// Until caught up, the log as it stands is the whole input:
			// a finish held at its end has nothing left to wait for.
			idle = c.drain
		}
	} else {
		s := newPairs(cfg, p.m, p.camps)
		s.log = p.log
		process = s.process
		tick = func(_ *sink, now time.Time) { s.sweep(now) }
		size = func() partSize { return partSize{pairers: s.size()} }
	}
	sizeKey := w.stage + "/" + strconv.Itoa(w.part)
	defer p.setSize(sizeKey, partSize{})
	p.m.rebuilds.WithLabelValues(w.stage).Inc()

	ch := make(chan fetched, len(w.streams))
	for i, s := range w.streams {
		f := &fetcher{client: p.client, cfg: cfg, topic: s.topic, part: w.part, idx: i, decode: true, m: p.m}
		if w.stage == stageB {
			f.cache, f.split = p.cache, true
		}
		go f.run(ctx, -1, s.want, ch)
		s.want <- struct{}{}
		s.inflight = true
	}
	out, spare := &sink{}, &sink{}
	processed, since := 0, time.Now()
	rebuilt := false
	// idled: idle ran since the last processed message (it runs again only
	// after new input, not on every empty fetch).
	idled := false
	ticker := time.NewTicker(cfg.FetchWait)
	defer ticker.Stop()
	attach := func(f fetched) error {
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
	for {
		// Take what the fetchers delivered.
		for more := true; more; {
			select {
			case f := <-ch:
				if err := attach(f); err != nil {
					p.log.Error().Err(err).Str("stage", w.stage).Int("partition", w.part).Msg("fetch failed; the partition's work stops and starts again from the committed offsets")
					return nil
				}
			default:
				more = false
			}
		}
		// Merge: process the smallest head while every stream has a head or
		// is known to be at its end.
		blocked := false
		now := time.Now()
		for processed < cfg.BatchSize {
			var best *stream
			ready := true
			for _, s := range w.streams {
				h := s.head()
				if h == nil {
					if !s.atEndKnown() {
						ready = false
						break
					}
					continue
				}
				if best == nil || before(h, s.rank, best.head(), best.rank) {
					best = s
				}
			}
			if ready && best != nil && len(w.streams) > 1 {
				// Merge past a stream at its end only when what is merged
				// is not newer than what that stream last had, or that
				// stream was seen at its end by a fetch sent MergeIdle
				// after the message arrived: a producer writing one topic
				// after another has had that long to write the sibling
				// topic. The end must be seen again after that time, not
				// merely known: under a backlog a message waits in the
				// buffer long after the sibling's last look, and what the
				// sibling received since is not known yet.
				h := best.head()
				for _, s := range w.streams {
					if s.head() == nil && h.ts.After(s.lastTS) && s.endSeen.Before(h.arrived.Add(cfg.MergeIdle)) {
						ready = false
						break
					}
				}
			}
			if !ready || best == nil {
				blocked = true
				break
			}
			m := best.head()
			best.lastTS = m.ts
			best.pos++
			if best.consumed = m.offset + 1; m.more {
				// A batched hf.outcomes record is consumed with its last
				// event: a commit between its events re-reads it whole.
				best.consumed = m.offset
			}
			if best.pos == len(best.buf) {
				best.buf, best.pos = nil, 0
				if len(best.queued) > 0 {
					best.buf = best.queued[0].msgs
					best.queued = best.queued[1:]
					if len(best.queued) == 0 && !best.inflight {
						best.want <- struct{}{}
						best.inflight = true
					}
				}
			}
			emit := best.committed < 0 || m.offset >= best.committed
			m.emit = emit
			best.in.Inc()
			process(m, emit, out, now)
			processed++
			idled = false
		}
		if blocked && idle != nil && !idled && w.allAtEnd() {
			// Every stream is at its end: run idle now rather than at the
			// next tick, so a run that stops when caught up does not wait a
			// FetchWait for its last held finishes.
			idle(out, now)
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
			p.setSize(sizeKey, size())
			continue
		}
		if !blocked {
			continue
		}
		select {
		case f := <-ch:
			if err := attach(f); err != nil {
				p.log.Error().Err(err).Str("stage", w.stage).Int("partition", w.part).Msg("fetch failed; the partition's work stops and starts again from the committed offsets")
				return nil
			}
		case <-ticker.C:
			if w.allAtEnd() {
				tick(out, time.Now())
				if idle != nil {
					idle(out, time.Now())
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
			if release != nil && cfg.DrainTimeout >= 0 {
				release(out, time.Now())
			}
			return w.drain(fctx, out, processed)
		}
	}
}

// atEndKnown: no buffered message, and the last fetch answered that the
// stream had reached its high watermark.
func (s *stream) atEndKnown() bool {
	return s.head() == nil && len(s.queued) == 0 && s.hwm >= 0 && s.next >= s.hwm
}

func (w *partWork) allAtEnd() bool {
	for _, s := range w.streams {
		if !s.atEndKnown() {
			return false
		}
	}
	return true
}

func (w *partWork) rebuildDone() bool {
	for _, s := range w.streams {
		if s.committed >= 0 && s.consumed < s.committed && s.hwm >= 0 {
			return false
		}
		if s.hwm < 0 {
			return false
		}
	}
	return true
}
