package processors

import "time"

// merge processes up to budget messages into out, in the deterministic merge
// order: each time the smallest head of the streams, while every stream has
// a head or is known to be at its end (pick). A message at or past its
// stream's committed offset is emitted; one before it only rebuilds state.
// now is the wall clock handed to process. It returns how many messages it
// processed and whether it stopped because it must wait for input (blocked)
// rather than because the budget was used up.
func (w *partWork) merge(process func(*inMsg, bool, *sink, time.Time), out *sink, budget int, now time.Time) (n int, blocked bool) {
	mergeIdle := w.p.cfg.MergeIdle
	for n < budget {
		best := w.pick(mergeIdle)
		if best == nil {
			return n, true
		}
		m := best.take()
		emit := best.committed < 0 || m.offset >= best.committed
		m.emit = emit
		best.in.Inc()
		process(m, emit, out, now)
		n++
	}
	return n, false
}

// pick returns the stream whose head is merged next: the smallest head
// (before), once every stream has a head or is known to be at its end. It
// returns nil when the merge must wait for input.
func (w *partWork) pick(mergeIdle time.Duration) *stream {
	var best *stream
	for _, s := range w.streams {
		h := s.head()
		if h == nil {
			if !s.atEndKnown() {
				return nil
			}
			continue
		}
		if best == nil || before(h, s.rank, best.head(), best.rank) {
			best = s
		}
	}
	if best != nil && len(w.streams) > 1 {
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
			if s.head() == nil && h.ts.After(s.lastTS) && s.endSeen.Before(h.arrived.Add(mergeIdle)) {
				return nil
			}
		}
	}
	return best
}

// take removes the stream's head, which the merge processes next, and
// returns it. The stream's consumed offset moves past the message (past a
// batched hf.outcomes record only with its last event). When its buffer is
// used up the stream moves on to its next queued fetch, and asks for another
// fetch once none is queued and none is in flight.
func (s *stream) take() *inMsg {
	m := s.head()
	s.lastTS = m.ts
	s.pos++
	if s.consumed = m.offset + 1; m.more {
		// A batched hf.outcomes record is consumed with its last
		// event: a commit between its events re-reads it whole.
		s.consumed = m.offset
	}
	if s.pos == len(s.buf) {
		s.buf, s.pos = nil, 0
		if len(s.queued) > 0 {
			s.buf = s.queued[0].msgs
			s.queued = s.queued[1:]
			if len(s.queued) == 0 && !s.inflight {
				s.want <- struct{}{}
				s.inflight = true
			}
		}
	}
	return m
}

// atEndKnown: no buffered message, and the last fetch answered that the
// stream had reached its high watermark.
func (s *stream) atEndKnown() bool {
	return s.head() == nil && len(s.queued) == 0 && s.hwm >= 0 && s.next >= s.hwm
}

// allAtEnd reports that every stream is known to be at its end.
func (w *partWork) allAtEnd() bool {
	for _, s := range w.streams {
		if !s.atEndKnown() {
			return false
		}
	}
	return true
}

// rebuildDone reports that every stream has answered a fetch and was
// consumed up to its committed offset: the state is rebuilt from the log.
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
