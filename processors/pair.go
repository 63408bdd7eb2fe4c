package processors

import (
	"errors"
	"strconv"
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
	// window for late events passed (lateWindow), or earlier when its
	// project's finished cells hold more than Config.MaxStateBytes (fin).
	finished []*finishedCell
	// fin is, per project, the state its finished cells hold (their
	// inputs, late events included, as stage A charges them) and those
	// cells, oldest first.
	fin      map[string]*finUse
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
	key      string
	p        *score.Pairer
	project  string
	campaign string
	camp     *schemas.CampaignDeclared // the declaration whose params are applied
	campVer  uint64                    // campaignTable.version when camp was looked up
	started  map[cellKey]bool
	// acct is the state charged for each cell the Pairer holds
	// (cellCharge, and what the scorer keeps of each admitted event once
	// the cell finished, keptCharge, as stage A charges a finished cell's
	// late events), and its finishedCell once it finished.
	acct      map[cellKey]*cellAcct
	buf       map[cellKey][]*inMsg
	hadCell   bool
	isDone    bool
	doneLog   time.Time
	doneWall  time.Time
	touchLog  time.Time
	touchWall time.Time
}

// finishedCell is a cell that finished in a pairer, and when (log clock,
// wall clock); bytes is its charge, gone that it was forgotten.
type finishedCell struct {
	ps        *pairState
	cell      string
	log, wall time.Time
	bytes     int64
	gone      bool
}

// cellAcct is a held cell's charge.
type cellAcct struct {
	bytes int64
	fin   *finishedCell
}

// finUse is one project's finished cells held by stage B on a partition.
type finUse struct {
	bytes int64
	q     []*finishedCell // oldest first
}

// lateWindow is how long stage B keeps a finished cell's state for late
// events that correct its outputs: twice Config.Grace, stage A's window,
// so that what stage A admits within its window still finds the state
// when stage B's clocks run ahead of stage A's (its partitions mix the
// raw partitions). An event stage B gets after that is dead-lettered
// late_beyond_window.
func (s *pairs) lateWindow() time.Duration { return 2 * s.cfg.Grace }

func newPairs(cfg *Config, m *metrics, camps *campaignTable) *pairs {
	return &pairs{cfg: cfg, m: m, camps: camps, byKey: map[string]*pairState{}, fin: map[string]*finUse{}}
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
		ps = &pairState{key: key, started: map[cellKey]bool{}, acct: map[cellKey]*cellAcct{}, buf: map[cellKey][]*inMsg{}}
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
			// Stage A admitted it, so its cell did start: stage B no longer
			// holds the cell's state and cannot hold the event either. It
			// is refused, not dropped (the views leave it out too).
			s.m.droppedOrphan.Inc()
			s.deadLetter(m, lateBeyondWindow(ev, "stage B does not hold the cell (its pairer was evicted or aged out) and its buffer of events waiting for their cell_started is full (--pending-max "+strconv.Itoa(s.cfg.PendingMax)+")"), emit, out)
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
		s.charge(ps, m, ev)
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

// charge charges the event ev (m), which ps's Pairer took, to its cell:
// a finished cell's charge counts against its project's cap on finished
// state (Config.MaxStateBytes), past which the project's oldest finished
// cells are forgotten before their late window ends (their later events
// are refused late_beyond_window): late events kept for corrections must
// not let one project grow stage B's memory without bound.
func (s *pairs) charge(ps *pairState, m *inMsg, ev schemas.Event) {
	ck := keyOf(ev)
	a := ps.acct[ck]
	ch := keptCharge(m)
	if a == nil {
		if st, ok := ev.(*schemas.CellStarted); ok && ps.p.Holds(st.CellID) {
			ps.acct[ck] = &cellAcct{bytes: cellCharge + ch}
		}
		return
	}
	a.bytes += ch
	if f := a.fin; f != nil {
		if !f.gone {
			f.bytes += ch
			u := s.fin[ps.project]
			u.bytes += ch
			s.capFinished(u)
		}
		return
	}
	if _, ok := ev.(*schemas.CellFinished); !ok || !ps.p.Finished(ck.cell) {
		return
	}
	f := &finishedCell{ps: ps, cell: ck.cell, log: m.ts, wall: s.now, bytes: a.bytes}
	a.fin = f
	s.finished = append(s.finished, f)
	u := s.fin[ps.project]
	if u == nil {
		u = &finUse{}
		s.fin[ps.project] = u
	}
	u.bytes += f.bytes
	u.q = append(u.q, f)
	s.capFinished(u)
}

// capFinished forgets u's oldest finished cells while they hold more than
// Config.MaxStateBytes (not those whose outputs wait for the baseline).
func (s *pairs) capFinished(u *finUse) {
	for i := 0; u.bytes > s.cfg.MaxStateBytes && i < len(u.q); {
		// A forgotten f leaves the front (i == 0: the queue moves up) or
		// stays, gone, behind cells the Pairer keeps (skipped next).
		if f := u.q[i]; f.gone || !s.forget(f) {
			i++
		}
	}
}

// forget drops the finished cell f's state (score.Pairer.Forget) and its
// charge. It reports false, keeping f, when the Pairer keeps the cell
// (its outputs wait for the baseline).
func (s *pairs) forget(f *finishedCell) bool {
	if f.gone {
		return true
	}
	ps := f.ps
	if s.byKey[ps.key] == ps && !ps.p.Forget(f.cell) && ps.p.Holds(f.cell) {
		return false
	}
	f.gone = true
	delete(ps.acct, cellKey{project: ps.project, cell: f.cell})
	u := s.fin[ps.project]
	u.bytes -= f.bytes
	for len(u.q) > 0 && u.q[0].gone {
		u.q[0] = nil
		u.q = u.q[1:]
	}
	if len(u.q) == 0 {
		delete(s.fin, ps.project)
	}
	return true
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
	var kept []*finishedCell
	for _, f := range s.finished {
		if !f.gone && !f.log.Add(w).Before(s.logClock) && !f.wall.Add(w).Before(now) {
			break
		}
		if !s.forget(f) {
			// Its outputs wait for the baseline: asked again a window
			// later.
			f.log, f.wall = s.logClock, now
			kept = append(kept, f)
		}
		k++
	}
	if k > 0 {
		clear(s.finished[:k])
		s.finished = append(s.finished[k:], kept...)
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
			s.m.droppedOrphan.Add(float64(len(b)))
			// Events of other cells of the key that stage B no longer
			// holds: refused, as in sweep, not dropped.
			for _, hm := range b {
				s.deadLetter(hm, lateBeyondWindow(hm.ev, "stage B no longer holds the cell (its pairing key was aged out after "+s.cfg.CellIdle.String()+" (--cell-idle) with no event)"), hm.emit, out)
			}
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
