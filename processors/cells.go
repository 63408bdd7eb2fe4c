package processors

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/harnessflow/harnessflow/processors/score"
	"github.com/harnessflow/harnessflow/schemas"
)

// cells is stage A's state for one assigned partition number: the cells whose
// events live on that partition of the raw cell topics, and the pending
// buffer. It is used by one goroutine.
type cells struct {
	log      zerolog.Logger // set by the processor; zero value logs nothing
	cfg      *Config
	m        *metrics
	byID     map[cellKey]*cellState
	pending  pendingBuf
	finished []*cellState // eviction queue, in finishing order
	logClock time.Time
	// holds are admissible cell_finished events waiting out
	// Config.FinishHold, in merge order.
	holds []*pendItem
}

// cellKey identifies a cell: its project and its cell id. Two projects
// that use the same cell id have two cells, whose events never meet.
type cellKey struct {
	project, cell string
}

// keyOf returns the cell key of a cell event (zero for other events).
func keyOf(ev schemas.Event) cellKey {
	return cellKey{project: ev.Header().Project, cell: cellOf(ev)}
}

// cellState is what stage A knows about one started cell.
type cellState struct {
	id      cellKey
	key     []byte // pairing key
	current string // current harness version
	known   map[string]struct{}
	hashes  map[string]struct{}
	ids     map[string]struct{} // admitted update ids (a redelivered update is skipped, not a duplicate_content)
	// attempts are the admitted task_attempt ids: a cell_finished waits until
	// their count reaches its attempts field. Dropped when the cell finishes.
	attempts map[string]struct{}
	// heldFinish: a cell_finished waits in the pending buffer.
	// finishTimedOut: it waited the pending timeout and is admitted with
	// the attempts it got (the rest never came, or were dead-lettered).
	heldFinish     bool
	finishTimedOut bool
	// holdID is the event id of the cell_finished in holds; holdDone: its
	// hold is over, the finish is admitted when processed again.
	holdID   string
	holdDone bool

	startedID    string
	finishedID   string
	finished     bool
	finishedLog  time.Time
	finishedWall time.Time
	evicted      bool
}

func newCells(cfg *Config, m *metrics) *cells {
	return &cells{cfg: cfg, m: m, byID: map[cellKey]*cellState{}, pending: pendingBuf{byCell: map[cellKey][]*pendItem{}}}
}

// size is the number of cells held plus the pending events.
func (c *cells) size() int { return len(c.byID) + c.pending.live }

// cellOf returns the cell id of a cell event.
func cellOf(ev schemas.Event) string {
	switch e := ev.(type) {
	case *schemas.CellStarted:
		return e.CellID
	case *schemas.TaskAttempt:
		return e.CellID
	case *schemas.SkillEvent:
		return e.CellID
	case *schemas.HarnessUpdate:
		return e.CellID
	case *schemas.AdherenceJudgment:
		return e.CellID
	case *schemas.CellFinished:
		return e.CellID
	}
	return ""
}

// process validates one merged input message. Outputs go to out only when
// emit is true (rebuilding state from the log runs with emit false). now is
// the wall clock, for evictions.
func (c *cells) process(m *inMsg, emit bool, out *sink, now time.Time) {
	if m.ts.After(c.logClock) {
		c.logClock = m.ts
	}
	switch {
	case m.rej != nil:
		c.deadLetter(m, m.rej, emit, out)
	default:
		if r := checkSyntax(m.topic, m.ev, c.cfg.Limits); r != nil {
			c.deadLetter(m, r, emit, out)
		} else {
			c.semantic(m, emit, out, now)
		}
	}
	c.expire(func(p *pendItem) bool { return p.sinceLog.Add(c.cfg.PendingTimeout).Before(c.logClock) }, emit, out)
	c.releaseHolds(func(p *pendItem) bool { return p.sinceLog.Add(c.cfg.FinishHold).Before(c.logClock) }, emit, out, now)
	c.evict(now)
}

// releaseHolds admits the held cell_finished events that due says are over
// their hold, oldest first.
func (c *cells) releaseHolds(due func(*pendItem) bool, emit bool, out *sink, now time.Time) {
	for len(c.holds) > 0 && due(c.holds[0]) {
		p := c.holds[0]
		c.holds[0] = nil
		c.holds = c.holds[1:]
		cs := c.byID[p.cell]
		if cs == nil || cs.finished {
			continue
		}
		cs.holdDone = true
		c.semantic(p.m, emit || p.m.emit, out, now)
	}
}

// commitFrom returns, per topic, the offset of the oldest message still
// waiting in memory (a pending event, or a held cell_finished): stage A
// commits a topic only up to it. A commit past a waiting message would
// make the next incarnation (another merge order, after a rebalance or a
// broker restart) treat it as already emitted, and it would be lost.
// Topics with nothing waiting are absent.
func (c *cells) commitFrom() map[string]int64 {
	var out map[string]int64
	note := func(m *inMsg) {
		if out == nil {
			out = map[string]int64{}
		}
		if o, ok := out[m.topic]; !ok || m.offset < o {
			out[m.topic] = m.offset
		}
	}
	if len(c.holds) > 0 {
		note(c.holds[0].m)
	}
	if c.pending.live == 0 {
		return out
	}
	// Not only the first of each topic: an event released and then made to
	// wait again (a cell_started released it, its version is unknown) is
	// queued behind younger ones.
	for _, p := range c.pending.queue {
		if p != nil && !p.done {
			note(p.m)
		}
	}
	return out
}

// drain admits every held cell_finished: on a clean stop nothing waits in
// memory (a finish admitted early is what FinishHold 0 would do).
func (c *cells) drain(out *sink, now time.Time) {
	c.releaseHolds(func(*pendItem) bool { return true }, true, out, now)
}

// tick runs the wall-clock timeouts of an idle partition.
//
// A held cell_finished is over its hold once FinishHold has passed since it
// was read, or since the log time it was held at: on a partition at its end,
// the next message a producer writes is stamped no earlier than now, so now
// stands in for the log clock the busy path uses (process). The second
// condition is what ends the holds at once when a backlog drains: finishes
// read late were stamped long ago, and their late siblings had the whole
// backlog's time to reach the log. Producer clocks behind this one's
// shorten the hold by their skew, as they already do on the log clock.
func (c *cells) tick(out *sink, now time.Time) {
	c.expire(func(p *pendItem) bool { return p.sinceWall.Add(c.cfg.PendingTimeout).Before(now) }, true, out)
	c.releaseHolds(func(p *pendItem) bool {
		return p.sinceWall.Add(c.cfg.FinishHold).Before(now) || p.sinceLog.Add(c.cfg.FinishHold).Before(now)
	}, true, out, now)
	c.evict(now)
}

func (c *cells) deadLetter(m *inMsg, r *rejection, emit bool, out *sink) {
	if !emit {
		return
	}
	c.m.rejected(r)
	msg, err := deadLetter(m, r, c.cfg.DLQPayloadCap)
	if err != nil {
		c.m.encodeErrors.Inc()
		c.log.Error().Err(err).Str("topic", m.topic).Msg("dead letter does not encode; not published")
		return
	}
	out.msgs = append(out.msgs, msg)
	out.rejected++
}

func (c *cells) admit(cs *cellState, m *inMsg, emit bool, out *sink) {
	switch m.ev.Type() {
	case schemas.TypeHarnessUpdate:
		cs.ids[m.ev.Header().EventID] = struct{}{}
	case schemas.TypeTaskAttempt:
		if cs.attempts != nil {
			cs.attempts[m.ev.Header().EventID] = struct{}{}
		}
	}
	if !emit {
		return
	}
	c.m.admitted.Inc()
	out.addOutcome(cs.key, m.value, m.ts, c.cfg.OutcomeBatch)
	out.admitted = append(out.admitted, evEntry{value: m.value, ev: m.ev})
}

// semantic runs the semantic checks of one syntactically valid cell event
// against its cell's state, and admits it, dead-letters it or makes it wait
// (pending buffer, finish hold). Outputs go to out only when emit is true.
func (c *cells) semantic(m *inMsg, emit bool, out *sink, now time.Time) {
	id := keyOf(m.ev)
	cs := c.byID[id]
	if st, ok := m.ev.(*schemas.CellStarted); ok {
		c.started(cs, id, st, m, emit, out, now)
		return
	}
	if cs == nil {
		c.addPending(&pendItem{m: m, cell: id, sinceLog: m.ts, sinceWall: now}, emit, out)
		return
	}
	switch ev := m.ev.(type) {
	case *schemas.TaskAttempt:
		c.attempt(cs, id, ev, m, emit, out, now)
	case *schemas.HarnessUpdate:
		c.update(cs, id, ev, m, emit, out, now)
	case *schemas.CellFinished:
		c.finish(cs, id, ev, m, emit, out, now)
	default:
		c.admit(cs, m, emit, out)
	}
}

// started handles the cell_started st of cell id (cs: the cell's state,
// nil when the cell is not started yet): it starts the cell and processes
// the events of the same project and cell id that waited for it; a redelivery is a duplicate, a second
// cell_started a dead letter.
func (c *cells) started(cs *cellState, id cellKey, st *schemas.CellStarted, m *inMsg, emit bool, out *sink, now time.Time) {
	if cs != nil {
		if cs.startedID == st.EventID {
			c.m.duplicates.Inc()
			return
		}
		c.deadLetter(m, reject(schemas.StageSemantic, CodeDuplicateCell,
			"second cell_started %q (the cell is already started)", st.EventID), emit, out)
		return
	}
	cs = &cellState{
		id: id, key: []byte(score.PairingKey(st.Project, st)), current: st.H0Version,
		known:  map[string]struct{}{st.H0Version: {}},
		hashes: map[string]struct{}{}, ids: map[string]struct{}{},
		// Sized from the declared task count (capped: producer input).
		attempts:  make(map[string]struct{}, min(max(st.TaskCount, 0), 4096)),
		startedID: st.EventID,
	}
	c.byID[id] = cs
	c.admit(cs, m, emit, out)
	for _, p := range c.pending.take(id, "") {
		c.semantic(p.m, emit || p.m.emit, out, now)
	}
}

// attempt handles a task_attempt of the started cell cs: admitted when its
// harness version is known (which may release a held finish), else it waits
// for the update that introduces it, or is a dead letter once the cell
// finished.
func (c *cells) attempt(cs *cellState, id cellKey, ev *schemas.TaskAttempt, m *inMsg, emit bool, out *sink, now time.Time) {
	if _, ok := cs.known[ev.HarnessVersion]; !ok {
		if cs.finished {
			c.deadLetter(m, unknownVersion(ev, "the cell finished"), emit, out)
			return
		}
		c.addPending(&pendItem{m: m, cell: id, version: ev.HarnessVersion, sinceLog: m.ts, sinceWall: now}, emit, out)
		return
	}
	c.admit(cs, m, emit, out)
	if cs.heldFinish {
		c.releaseFinish(id, emit, out, now)
	}
}

// update handles a harness_update of the started cell cs: it must chain from
// the current version, add no content the cell already has and name its
// evidence. An accepted update introduces its version, which releases the
// attempts (and the finish) waiting for it.
func (c *cells) update(cs *cellState, id cellKey, ev *schemas.HarnessUpdate, m *inMsg, emit bool, out *sink, now time.Time) {
	if _, dup := cs.ids[ev.EventID]; dup {
		c.m.duplicates.Inc()
		return
	}
	if ev.FromVersion != cs.current {
		c.deadLetter(m, reject(schemas.StageSemantic, CodeVersionChain,
			"from_version %q does not chain to the current version %q", ev.FromVersion, cs.current), emit, out)
		return
	}
	for i := range ev.Artifacts {
		a := &ev.Artifacts[i]
		if a.Op == schemas.OpRemove {
			continue
		}
		if _, ok := cs.hashes[artifactHash(a)]; ok {
			c.deadLetter(m, reject(schemas.StageSemantic, CodeDuplicateContent,
				"artifact %q (%s) repeats content already in the cell (sha256 %s)", a.Name, a.Kind, artifactHash(a)), emit, out)
			return
		}
	}
	if len(ev.EvidenceTaskIDs) == 0 {
		c.deadLetter(m, reject(schemas.StageSemantic, CodeNoEvidence,
			"the update names no evidence task ids"), emit, out)
		return
	}
	for i := range ev.Artifacts {
		if ev.Artifacts[i].Op != schemas.OpRemove {
			cs.hashes[artifactHash(&ev.Artifacts[i])] = struct{}{}
		}
	}
	c.admit(cs, m, emit, out)
	if ev.Accepted {
		cs.known[ev.ToVersion] = struct{}{}
		if !ev.RolledBack {
			cs.current = ev.ToVersion
		}
		for _, p := range c.pending.take(id, ev.ToVersion) {
			c.semantic(p.m, emit || p.m.emit, out, now)
		}
		c.releaseFinish(id, emit, out, now)
	}
}

// finish handles a cell_finished of the started cell cs. It waits in the
// pending buffer while attempts of the cell are not all admitted, then for
// Config.FinishHold (holds); then it is admitted and finishes the cell, and
// the attempts still waiting for a version are dead letters. A redelivery is
// a duplicate, a second cell_finished a dead letter.
func (c *cells) finish(cs *cellState, id cellKey, ev *schemas.CellFinished, m *inMsg, emit bool, out *sink, now time.Time) {
	if !cs.finished && !cs.finishTimedOut && (c.pending.hasVersionWaiters(id) || int64(len(cs.attempts)) < ev.Attempts) {
		// Attempts of the cell have not all been admitted: some wait for
		// the update that introduces their version, or are still on their
		// way on hf.attempts (each topic reaches the broker on its own).
		// Hold the finish behind them so that hf.outcomes keeps the
		// cell's order; releaseFinish or the pending timeout lets it go.
		cs.heldFinish = true
		c.addPending(&pendItem{m: m, cell: id, version: finishVersion, sinceLog: m.ts, sinceWall: now}, emit, out)
		return
	}
	if cs.finished && cs.finishedID == ev.EventID {
		c.m.duplicates.Inc()
		return
	}
	if cs.finished {
		c.deadLetter(m, reject(schemas.StageSemantic, CodeDuplicateCell,
			"second cell_finished %q (the cell is already finished)", ev.EventID), emit, out)
		return
	}
	if c.cfg.FinishHold > 0 && !cs.holdDone {
		if cs.holdID == ev.EventID {
			c.m.duplicates.Inc()
			return
		}
		if cs.holdID != "" {
			c.deadLetter(m, reject(schemas.StageSemantic, CodeDuplicateCell,
				"second cell_finished %q (the cell is already finishing)", ev.EventID), emit, out)
			return
		}
		cp := *m
		cs.holdID = ev.EventID
		c.holds = append(c.holds, &pendItem{m: &cp, cell: id, sinceLog: c.logClock, sinceWall: now})
		return
	}
	c.admit(cs, m, emit, out)
	cs.finished, cs.finishedID, cs.finishedLog, cs.finishedWall = true, ev.EventID, m.ts, now
	cs.attempts, cs.heldFinish = nil, false
	c.finished = append(c.finished, cs)
	for _, p := range c.pending.takeVersions(id) {
		c.deadLetter(p.m, unknownVersion(p.m.ev.(*schemas.TaskAttempt), "the cell finished"), emit || p.m.emit, out)
	}
}

func unknownVersion(a *schemas.TaskAttempt, why string) *rejection {
	return reject(schemas.StageSemantic, CodeUnknownVersion,
		"attempt %q runs harness version %q, which no accepted update of the cell introduced before %s",
		a.EventID, a.HarnessVersion, why)
}

func (c *cells) addPending(p *pendItem, emit bool, out *sink) {
	// Fetchers allocate a fetch's messages together: hold a copy, so that a
	// long wait does not keep the whole fetch's messages alive.
	cp := *p.m
	p.m = &cp
	if c.pending.live >= c.cfg.PendingMax {
		if old := c.pending.popOldest(); old != nil {
			c.expired(old, "the pending buffer was full", emit || old.m.emit, out)
		}
	}
	c.pending.add(p)
}

// expire dead-letters pending events, oldest first, while due says so.
func (c *cells) expire(due func(*pendItem) bool, emit bool, out *sink) {
	for {
		p := c.pending.oldest()
		if p == nil || !due(p) {
			return
		}
		c.pending.popOldest()
		c.expired(p, "the pending timeout "+c.cfg.PendingTimeout.String()+" passed", emit || p.m.emit, out)
	}
}

func (c *cells) expired(p *pendItem, why string, emit bool, out *sink) {
	if p.version == finishVersion {
		// The finish waited long enough: process it, without waiting
		// again (it would be due again at once, forever); it dead-letters
		// the attempts still waiting for a version.
		if cs := c.byID[p.cell]; cs != nil {
			cs.finishTimedOut = true
		}
		c.semantic(p.m, emit, out, p.sinceWall)
		return
	}
	if p.version != "" {
		c.deadLetter(p.m, unknownVersion(p.m.ev.(*schemas.TaskAttempt), why), emit, out)
		c.releaseFinish(p.cell, emit, out, p.sinceWall)
		return
	}
	c.deadLetter(p.m, reject(schemas.StageSemantic, CodeUnknownCell,
		"%s %q: the cell_started of cell %q did not arrive before %s", p.m.ev.Type(), p.m.ev.Header().EventID, p.cell.cell, why), emit, out)
}

// evict drops finished cells whose grace passed on either clock.
func (c *cells) evict(now time.Time) {
	n := 0
	for _, cs := range c.finished {
		if !cs.finishedLog.Add(c.cfg.Grace).Before(c.logClock) && !cs.finishedWall.Add(c.cfg.Grace).Before(now) {
			break
		}
		delete(c.byID, cs.id)
		n++
	}
	if n > 0 {
		clear(c.finished[:n])
		c.finished = c.finished[n:]
		c.m.evictedCells.Add(float64(n))
	}
}

// pendItem is an event waiting for its cell_started (version == "") or for
// the update that introduces version.
type pendItem struct {
	m         *inMsg
	cell      cellKey
	version   string
	sinceLog  time.Time
	sinceWall time.Time
	done      bool
}

// pendingBuf keeps pending events in arrival order (for timeouts and the
// bound) and by cell (for release).
type pendingBuf struct {
	queue  []*pendItem
	byCell map[cellKey][]*pendItem
	live   int
	// added and addedVersion count every item ever added (all, and those
	// waiting for a version), for tests and logs.
	added, addedVersion int
}

func (b *pendingBuf) add(p *pendItem) {
	b.queue = append(b.queue, p)
	b.byCell[p.cell] = append(b.byCell[p.cell], p)
	b.live++
	b.added++
	if p.version != "" {
		b.addedVersion++
	}
}

// oldest returns the oldest live item, dropping resolved ones.
func (b *pendingBuf) oldest() *pendItem {
	for len(b.queue) > 0 && b.queue[0].done {
		b.queue[0] = nil
		b.queue = b.queue[1:]
	}
	if len(b.queue) == 0 {
		b.queue = nil
		return nil
	}
	return b.queue[0]
}

func (b *pendingBuf) popOldest() *pendItem {
	p := b.oldest()
	if p == nil {
		return nil
	}
	b.queue[0] = nil
	b.queue = b.queue[1:]
	b.resolve(p)
	return p
}

// resolve marks p done and removes it from its cell's list.
func (b *pendingBuf) resolve(p *pendItem) {
	p.done = true
	b.live--
	list := b.byCell[p.cell]
	for i, q := range list {
		if q == p {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(b.byCell, p.cell)
	} else {
		b.byCell[p.cell] = list
	}
}

// take resolves and returns, in arrival order, the cell's items waiting for
// version ("" = waiting for cell_started).
func (b *pendingBuf) take(cell cellKey, version string) []*pendItem {
	return b.takeIf(cell, func(p *pendItem) bool { return p.version == version })
}

// takeIf resolves and returns, in arrival order, the cell's items that match,
// in one pass over the cell's list (resolve per item would be quadratic in a
// cell's pending events).
func (b *pendingBuf) takeIf(cell cellKey, match func(*pendItem) bool) []*pendItem {
	list, ok := b.byCell[cell]
	if !ok {
		return nil
	}
	var out []*pendItem
	kept := list[:0]
	for _, p := range list {
		if match(p) {
			p.done = true
			b.live--
			out = append(out, p)
		} else {
			kept = append(kept, p)
		}
	}
	clear(list[len(kept):])
	if len(kept) == 0 {
		delete(b.byCell, cell)
	} else {
		b.byCell[cell] = kept
	}
	return out
}

// finishVersion marks a held cell_finished in the pending buffer.
const finishVersion = "\x00finish"

// releaseFinish processes the cell's held cell_finished once no attempt of
// the cell waits for a version any more.
func (c *cells) releaseFinish(cell cellKey, emit bool, out *sink, now time.Time) {
	cs := c.byID[cell]
	if cs == nil || !cs.heldFinish || c.pending.hasVersionWaiters(cell) {
		return
	}
	for _, p := range c.pending.byCell[cell] {
		if f, ok := p.m.ev.(*schemas.CellFinished); ok && p.version == finishVersion && int64(len(cs.attempts)) < f.Attempts {
			return
		}
	}
	cs.heldFinish = false
	for _, p := range c.pending.take(cell, finishVersion) {
		c.semantic(p.m, emit || p.m.emit, out, now)
	}
}

// hasVersionWaiters reports whether an attempt of cell waits for a version.
func (b *pendingBuf) hasVersionWaiters(cell cellKey) bool {
	for _, p := range b.byCell[cell] {
		if p.version != "" && p.version != finishVersion {
			return true
		}
	}
	return false
}

// takeVersions resolves and returns the cell's items waiting for a version.
func (b *pendingBuf) takeVersions(cell cellKey) []*pendItem {
	return b.takeIf(cell, func(p *pendItem) bool { return p.version != "" && p.version != finishVersion })
}
