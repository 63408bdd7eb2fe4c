package processors

import (
	"errors"
	"time"

	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/processors/score"
	"github.com/harnessflow/harnessflow/schemas"
)

// pairs is stage B's state for one assigned hf.outcomes partition: one
// score.Pairer per pairing key. It is used by one goroutine.
type pairs struct {
	log   zerolog.Logger // set by the processor; zero value logs nothing
	cfg   *Config
	m     *metrics
	camps *campaignTable
	byKey map[string]*pairState
	done  []*pairState // eviction queue, in the order pairers became done
	// finished lists the finished cells held by the pairers, in finishing
	// order: each is forgotten (score.Pairer.Forget) once its retention
	// window for late events passed (lateWindow).
	finished []finishedCell
	logClock time.Time
	buffered int
	// agedAt is the log clock at the last ageOut pass from process.
	agedAt time.Time
	now    time.Time // the wall clock of the message being processed
}

// pairState is one pairing key's Pairer with what the runtime adds: the
// campaign parameters applied, and the events of cells whose cell_started has
// not reached the Pairer (buffered, in order).
type pairState struct {
	key       string
	p         *score.Pairer
	project   string
	campaign  string
	camp      *schemas.CampaignDeclared // the declaration whose params are applied
	campVer   uint64                    // campaignTable.version when camp was looked up
	started   map[cellKey]bool
	buf       map[cellKey][]*inMsg
	hadCell   bool
	isDone    bool
	doneLog   time.Time
	doneWall  time.Time
	touchLog  time.Time
	touchWall time.Time
}

// finishedCell is a cell that finished in a pairer, and when (log clock,
// wall clock).
type finishedCell struct {
	ps        *pairState
	cell      string
	log, wall time.Time
}

// lateWindow is how long stage B keeps a finished cell's state for late
// events that correct its outputs: twice Config.Grace, stage A's window,
// so that what stage A admits within its window still finds the state
// when stage B's clocks run ahead of stage A's (its partitions mix the
// raw partitions). An event stage B gets after that is dead-lettered
// late_beyond_window.
func (s *pairs) lateWindow() time.Duration { return 2 * s.cfg.Grace }

func newPairs(cfg *Config, m *metrics, camps *campaignTable) *pairs {
	return &pairs{cfg: cfg, m: m, camps: camps, byKey: map[string]*pairState{}}
}

// size is the number of pairers held.
func (s *pairs) size() int { return len(s.byKey) }

// stateSize sums the pairers' Size plus the buffered events.
func (s *pairs) stateSize() int {
	n := s.buffered
	for _, ps := range s.byKey {
		n += ps.p.Size()
	}
	return n
}

func (s *pairs) params(ps *pairState) score.Params {
	p := score.Params{MinPairs: s.cfg.MinPairs, Lambda: s.cfg.Lambda, Project: ps.project}
	if ps.camp != nil {
		p.Epsilon, p.Alpha = ps.camp.LabelEpsilon, ps.camp.LabelAlpha
	}
	return p
}

// process feeds one hf.outcomes message to its key's Pairer. Outputs go to
// out only when emit is true.
func (s *pairs) process(m *inMsg, emit bool, out *sink, now time.Time) {
	s.now = now
	if m.ts.After(s.logClock) {
		s.logClock = m.ts
	}
	if s.logClock.Sub(s.agedAt) > s.cfg.CellIdle/16 {
		// On the log clock, a pass per sixteenth of CellIdle: a busy
		// partition never ticks.
		s.agedAt = s.logClock
		s.ageOut(emit, out, now)
	}
	defer s.evict(now)
	if m.rej != nil {
		s.deadLetter(m, m.rej, emit, out)
		return
	}
	key := string(m.key)
	ps := s.byKey[key]
	if ps == nil {
		ps = &pairState{key: key, started: map[cellKey]bool{}, buf: map[cellKey][]*inMsg{}}
		ps.p = score.NewPairer(key, s.params(ps))
		s.byKey[key] = ps
	}
	ps.touchLog, ps.touchWall = m.ts, now
	ev := m.ev
	cell := keyOf(ev)
	if st, ok := ev.(*schemas.CellStarted); ok {
		if ps.project == "" {
			ps.project, ps.campaign = st.Project, st.CampaignID
		}
		s.refreshParams(ps)
		s.add(ps, m, ev, emit, out)
		ps.started[cell], ps.hadCell = true, true
		held := ps.buf[cell]
		delete(ps.buf, cell)
		s.buffered -= len(held)
		for _, hm := range held {
			s.add(ps, hm, hm.ev, emit || hm.emit, out)
		}
	} else if ps.started[cell] {
		s.refreshParams(ps)
		s.add(ps, m, ev, emit, out)
	} else {
		if s.buffered >= s.cfg.PendingMax {
			s.m.droppedOrphan.Inc()
			return
		}
		cp := *m
		cp.emit = emit
		ps.buf[cell] = append(ps.buf[cell], &cp)
		s.buffered++
		return
	}
	if !ps.isDone && ps.hadCell && len(ps.buf) == 0 && ps.p.Done() {
		ps.isDone, ps.doneLog, ps.doneWall = true, m.ts, now
		s.done = append(s.done, ps)
	}
}

// refreshParams applies the campaign's parameters when its declaration
// arrived or changed since the last look.
func (s *pairs) refreshParams(ps *pairState) {
	if ps.campaign == "" {
		return
	}
	v := s.camps.version.Load()
	if v == ps.campVer {
		return
	}
	ps.campVer = v
	if c := s.camps.get(ps.project, ps.campaign); c != ps.camp {
		ps.camp = c
		ps.p.SetParams(s.params(ps))
	}
}

func (s *pairs) add(ps *pairState, m *inMsg, ev schemas.Event, emit bool, out *sink) {
	outs, err := ps.p.Add(ev)
	switch {
	case err == nil:
		if f, ok := ev.(*schemas.CellFinished); ok && ps.p.Finished(f.CellID) {
			s.finished = append(s.finished, finishedCell{ps: ps, cell: f.CellID, log: m.ts, wall: s.now})
		}
	case errors.Is(err, score.ErrLateBeyondWindow):
		s.deadLetter(m, lateBeyondWindow(ev, "stage B forgot the finished cell's state "+s.lateWindow().String()+" (2 x --grace) after it finished"), emit, out)
	case !errors.Is(err, score.ErrDuplicateBaseline):
		s.deadLetter(m, reject(schemas.StageSemantic, CodeScoreRejected, "%s %q: %v", ev.Type(), ev.Header().EventID, err).about(ev), emit, out)
	}
	if !emit {
		return
	}
	for _, o := range outs {
		h := o.Header()
		if h.EventID == "" {
			h.EventID = schemas.DeriveEventID(o)
		}
		b, err := schemas.Encode(o)
		if err != nil {
			// A derived event the schema refuses is a scorer bug: say so loudly.
			s.m.encodeErrors.Inc()
			s.log.Error().Err(err).Str("type", string(o.Type())).Str("event_id", h.EventID).Msg("derived event does not encode; not published")
			continue
		}
		out.msgs = append(out.msgs, kafka.Message{Topic: schemas.TopicFor(o.Type()), Key: []byte(o.PartitionKey()), Value: b, Time: m.ts})
		switch o.Type() {
		case schemas.TypeLabeledSample:
			out.samples++
			s.m.samples.Inc()
		case schemas.TypeRoundMetrics:
			out.rounds++
			s.m.roundMetrics.Inc()
		}
	}
}

func (s *pairs) deadLetter(m *inMsg, r *rejection, emit bool, out *sink) {
	if !emit {
		return
	}
	s.m.rejected(r)
	msg, err := deadLetter(m, r, s.cfg.DLQPayloadCap)
	if err != nil {
		s.m.encodeErrors.Inc()
		return
	}
	out.msgs = append(out.msgs, msg)
	out.rejected++
}

func (s *pairs) expiredOn(logT, wallT, now time.Time) bool {
	return logT.Add(s.cfg.Grace).Before(s.logClock) || wallT.Add(s.cfg.Grace).Before(now)
}

// evict forgets the finished cells whose late window passed, and drops
// the done pairers whose late window passed, on either clock.
func (s *pairs) evict(now time.Time) {
	w := s.lateWindow()
	k := 0
	for _, f := range s.finished {
		if !f.log.Add(w).Before(s.logClock) && !f.wall.Add(w).Before(now) {
			break
		}
		if s.byKey[f.ps.key] == f.ps {
			f.ps.p.Forget(f.cell)
		}
		k++
	}
	if k > 0 {
		clear(s.finished[:k])
		s.finished = s.finished[k:]
	}
	n := 0
	for _, ps := range s.done {
		if !ps.p.Done() || len(ps.buf) > 0 {
			// Another cell of the key started since: keep it, and queue it
			// again when it is done again.
			ps.isDone = false
			n++
			continue
		}
		if !ps.doneLog.Add(w).Before(s.logClock) && !ps.doneWall.Add(w).Before(now) {
			break
		}
		if cur := s.byKey[ps.key]; cur == ps {
			delete(s.byKey, ps.key)
			s.m.evictedPairs.Inc()
		}
		n++
	}
	if n > 0 {
		clear(s.done[:n])
		s.done = s.done[n:]
	}
}

// ageOut drops the pairing keys that hold unfinished cells and saw no event
// for Config.CellIdle, on either clock (stage A ages such cells out, and
// their finish never comes). Counted, and logged once per batch.
func (s *pairs) ageOut(emit bool, out *sink, now time.Time) {
	for k, ps := range s.byKey {
		if !ps.hadCell || ps.p.Done() {
			continue
		}
		if !ps.touchLog.Add(s.cfg.CellIdle).Before(s.logClock) && !ps.touchWall.Add(s.cfg.CellIdle).Before(now) {
			continue
		}
		for _, b := range ps.buf {
			s.buffered -= len(b)
		}
		delete(s.byKey, k)
		if emit {
			s.m.agedOutPairs.Inc()
			out.agedOut++
		}
	}
}

// sweep drops keys that never saw a cell_started (only orphaned events) and
// were idle for the grace period, on either clock, and ages out idle keys
// (ageOut).
func (s *pairs) sweep(out *sink, now time.Time) {
	s.ageOut(true, out, now)
	for k, ps := range s.byKey {
		if !ps.hadCell && s.expiredOn(ps.touchLog, ps.touchWall, now) {
			for _, b := range ps.buf {
				s.buffered -= len(b)
				s.m.droppedOrphan.Add(float64(len(b)))
				// Stage A admits only events of cells it saw start: an
				// event whose cell_started stage B does not hold is one of
				// a cell stage B forgot (its pairer was evicted).
				for _, hm := range b {
					s.deadLetter(hm, lateBeyondWindow(hm.ev, "stage B no longer holds the cell (its pairer was evicted "+s.cfg.Grace.String()+" (--grace) after its cells finished)"), hm.emit, out)
				}
			}
			delete(s.byKey, k)
		}
	}
	s.evict(now)
}
