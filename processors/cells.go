package processors

import (
	"bytes"
	"crypto/sha256"
	"slices"
	"strconv"
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
	part     int // the partition number, for dead letters made without a message
	// holds are admissible cell_finished events waiting out
	// Config.FinishHold, in merge order.
	holds []*pendItem
	// projects is each project's use of the partition's state bounds
	// (Config.MaxOpenCells, Config.MaxStateBytes); an entry goes when its
	// project holds nothing.
	projects map[string]*projUse
	// idle lists the unfinished cells, least recently touched first
	// (Config.CellIdle); idleTail is the most recent.
	idle, idleTail *cellState
	// forgotten remembers, per project, the finished cells evicted after
	// their retention window (Config.Grace), at most tombstoneCap each, the
	// oldest going first: their later events are late_beyond_window, not
	// unknown_cell (the cell_started did arrive). tombQ lists them all in
	// eviction order: each is dropped Config.CellIdle after (on either
	// clock), so that the projects that stopped sending leave nothing
	// behind.
	forgotten map[string]*tombstones
	tombQ     []tombstone
}

// tombstone is a forgotten cell and when it was evicted.
type tombstone struct {
	id        cellKey
	log, wall time.Time
}

// tombstones is one project's forgotten cells on a partition, in
// eviction order.
type tombstones struct {
	set   map[string]struct{}
	queue []string
}

// tombstoneCap is how many forgotten cells stage A remembers per project
// and partition: four times Config.MaxOpenCells (at least 64); a cell id
// costs about its length plus 50 bytes.
func (c *cells) tombstoneCap() int { return max(64, 4*c.cfg.MaxOpenCells) }

// forget remembers that the finished cell id was evicted (now: the wall
// clock).
func (c *cells) forget(id cellKey, now time.Time) {
	ts := c.forgotten[id.project]
	if ts == nil {
		ts = &tombstones{set: map[string]struct{}{}}
		c.forgotten[id.project] = ts
	}
	if _, ok := ts.set[id.cell]; ok {
		return
	}
	if len(ts.queue) >= c.tombstoneCap() {
		delete(ts.set, ts.queue[0])
		ts.queue[0] = ""
		ts.queue = ts.queue[1:]
	}
	ts.set[id.cell] = struct{}{}
	ts.queue = append(ts.queue, id.cell)
	c.tombQ = append(c.tombQ, tombstone{id: id, log: c.logClock, wall: now})
}

// expireTombstones drops the forgotten cells evicted longer than
// Config.CellIdle ago, on either clock: a later event of one waits for its
// cell_started and is unknown_cell.
func (c *cells) expireTombstones(now time.Time) {
	n := 0
	for _, t := range c.tombQ {
		if !t.log.Add(c.cfg.CellIdle).Before(c.logClock) && !t.wall.Add(c.cfg.CellIdle).Before(now) {
			break
		}
		n++
		ts := c.forgotten[t.id.project]
		if ts == nil || len(ts.queue) == 0 || ts.queue[0] != t.id.cell {
			continue // the per-project cap dropped it already
		}
		delete(ts.set, t.id.cell)
		ts.queue[0] = ""
		ts.queue = ts.queue[1:]
		if len(ts.queue) == 0 {
			delete(c.forgotten, t.id.project)
		}
	}
	if n > 0 {
		clear(c.tombQ[:n])
		c.tombQ = c.tombQ[n:]
	}
}

// wasForgotten reports that id is a finished cell evicted after its
// retention window.
func (c *cells) wasForgotten(id cellKey) bool {
	ts := c.forgotten[id.project]
	if ts == nil {
		return false
	}
	_, ok := ts.set[id.cell]
	return ok
}

// lateBeyondWindow is the rejection of an event of a cell that finished and
// was forgotten after its retention window for late events.
func lateBeyondWindow(ev schemas.Event, why string) *rejection {
	return reject(schemas.StageLimit, CodeLateBeyondWindow,
		"%s %q of cell %q arrived after the cell's retention window for late events: %s; it is not counted in any derived figure (the views leave it out too)",
		ev.Type(), ev.Header().EventID, cellOf(ev), why)
}

// projUse is one project's share of a partition's stage A state.
type projUse struct {
	name  string
	open  int   // unfinished cells
	bytes int64 // state bytes charged (stateCharge) by its cells
	cells int   // cells held, finished ones included
}

// Charges of the state estimate behind Config.MaxStateBytes: a cell's fixed
// cost in both stages (stage A's cellState and maps, stage B's cell and
// pairer; BenchmarkCellAttack measures about 9 KiB of live heap per open
// cell of a pairing key of its own, stage B's share of the evCache
// included), and each admitted event's: while its cell is open, eventCharge
// on top of its encoded size (its id in stage A's set of the cell's
// attempts, the evCache, the scorer's row); what the scorer keeps of it
// once its cell finished, keptCharge.
const (
	cellCharge  = 8192
	eventCharge = 128
)

// What the scorer keeps of a finished cell's events (processors/score,
// compact.go; TestRetainedFinishedStateIsCompact measures it), beyond the
// strings keptCharge adds: a task_attempt's id hash, winner row, slot,
// index entry and round entry (about 70 bytes); a skill_event's or
// judgment's id hash and row, and its slot when its attempt has none
// (about 35 to 80 bytes); a cell_finished's id hash. Other events (cell
// started, harness updates: their text, evidence and fields) keep about
// what they do while open.
const (
	attemptKept  = 80
	skillKept    = 64
	judgmentKept = 80
	finishKept   = 16
)

// keptCharge is what the scorer keeps of m once its cell finished (the
// retention window for late events), an upper estimate: its constant
// part, plus the strings it may keep whole (the event id, usually kept in
// a few bytes; the task id, the task input, names).
func keptCharge(m *inMsg) int64 {
	switch e := m.ev.(type) {
	case *schemas.TaskAttempt:
		return attemptKept + int64(len(e.EventID)+len(e.TaskID)+len(e.TaskInput))
	case *schemas.SkillEvent:
		return skillKept + int64(len(e.EventID)+len(e.TaskID)+len(e.SkillName))
	case *schemas.AdherenceJudgment:
		return judgmentKept + int64(len(e.EventID)+len(e.TaskID)+len(e.SkillName)+len(e.JudgeModel))
	case *schemas.CellFinished:
		return finishKept
	}
	return stateCharge(m)
}

// charge is what admitting m charges the cell cs: stateCharge while it is
// open, keptCharge once it finished.
func charge(cs *cellState, m *inMsg) int64 {
	if cs.finished {
		return keptCharge(m)
	}
	return stateCharge(m)
}

// strSet is a set of a cell's strings: a map while the cell is open;
// once it finished (freeze), the sorted 128-bit digests (SHA-256) of its
// strings, which late events are checked against. SHA-256 is collision
// resistant, so no two strings a producer sends share a digest (chance
// about n²/2^129 for n strings): the decisions are the map's, and still a
// function of the log.
type strSet struct {
	m      map[string]struct{}
	d      [][16]byte
	frozen bool
}

func digest(s string) [16]byte {
	h := sha256.Sum256([]byte(s))
	return [16]byte(h[:16])
}

func (s *strSet) has(x string) bool {
	if !s.frozen {
		_, ok := s.m[x]
		return ok
	}
	_, ok := slices.BinarySearchFunc(s.d, digest(x), func(a, b [16]byte) int { return bytes.Compare(a[:], b[:]) })
	return ok
}

func (s *strSet) add(x string) {
	if !s.frozen {
		if s.m == nil {
			s.m = map[string]struct{}{}
		}
		s.m[x] = struct{}{}
		return
	}
	d := digest(x)
	i, ok := slices.BinarySearchFunc(s.d, d, func(a, b [16]byte) int { return bytes.Compare(a[:], b[:]) })
	if !ok {
		s.d = slices.Insert(s.d, i, d)
	}
}

// freeze turns the map into sorted digests.
func (s *strSet) freeze() {
	if s.frozen {
		return
	}
	s.frozen = true
	if len(s.m) == 0 {
		s.m = nil
		return
	}
	s.d = make([][16]byte, 0, len(s.m))
	for x := range s.m {
		s.d = append(s.d, digest(x))
	}
	slices.SortFunc(s.d, func(a, b [16]byte) int { return bytes.Compare(a[:], b[:]) })
	s.m = nil
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
	// known are the versions attempts may run (h0, accepted updates'
	// to_version), hashes the artifacts' content hashes, ids the admitted
	// update event ids (a redelivered update is skipped, not a
	// duplicate_content).
	known, hashes, ids strSet
	// updateIDs are the admitted updates' update_id (their natural key): a
	// re-send under a new event id is passed on, unchecked (the scorer
	// keeps the winner), and changes no version.
	updateIDs strSet
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

	// proj is the cell's project's use; bytes is what the cell is charged
	// of it, keep the part it keeps once finished (cellCharge, its updates
	// and the late events admitted after it finished).
	proj        *projUse
	bytes, keep int64
	// lastLog and lastWall are when an event of the unfinished cell was
	// last admitted (log clock, wall clock); prev and next link the cells
	// list (cells.idle).
	lastLog, lastWall time.Time
	prev, next        *cellState
	// startOff and startTime are the coordinates of the cell's cell_started
	// on hf.cells (its aged-out dead letter's).
	startOff  int64
	startTime time.Time

	startedID    string
	finishedID   string
	finished     bool
	finishedLog  time.Time
	finishedWall time.Time
	evicted      bool
}

func newCells(cfg *Config, m *metrics) *cells {
	return &cells{cfg: cfg, m: m, byID: map[cellKey]*cellState{}, projects: map[string]*projUse{}, forgotten: map[string]*tombstones{},
		pending: pendingBuf{byCell: map[cellKey][]*pendItem{}, byProject: map[string]*pendProject{}}}
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
	c.ageOut(emit, out, now)
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
	c.ageOut(true, out, now)
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

func (c *cells) admit(cs *cellState, m *inMsg, emit bool, out *sink, now time.Time) {
	t := m.ev.Type()
	switch t {
	case schemas.TypeHarnessUpdate:
		cs.ids.add(m.ev.Header().EventID)
		cs.updateIDs.add(m.ev.(*schemas.HarnessUpdate).UpdateID)
	case schemas.TypeTaskAttempt:
		if cs.attempts != nil {
			cs.attempts[m.ev.Header().EventID] = struct{}{}
		}
	}
	if t != schemas.TypeCellFinished {
		ch := charge(cs, m)
		cs.bytes += ch
		cs.proj.bytes += ch
		if t == schemas.TypeHarnessUpdate || cs.finished {
			// Kept once finished: updates, and a finished cell's late
			// events (until the cell is evicted, Config.Grace after it
			// finished).
			cs.keep += ch
		}
		if !cs.finished {
			c.touch(cs, now)
		}
	}
	if !emit {
		return
	}
	c.m.admitted.Inc()
	if cs.finished && t != schemas.TypeCellFinished {
		c.m.afterFinish.Observe(max(m.ts.Sub(cs.finishedLog), 0).Seconds())
	}
	v := m.outcomeValue()
	out.addOutcome(cs.key, v, m.ts, c.cfg.OutcomeBatch)
	out.admitted = append(out.admitted, evEntry{value: v, ev: m.ev})
}

// semantic runs the semantic checks of one syntactically valid cell event
// against its cell's state, and admits it, dead-letters it or makes it wait
// (pending buffer, finish hold). Outputs go to out only when emit is true.
func (c *cells) semantic(m *inMsg, emit bool, out *sink, now time.Time) {
	id := keyOf(m.ev)
	cs := c.byID[id]
	if cs == nil && c.wasForgotten(id) {
		c.deadLetter(m, lateBeyondWindow(m.ev, "the cell finished and its state was dropped "+c.cfg.Grace.String()+" (--grace) after its cell_finished"), emit, out)
		return
	}
	if st, ok := m.ev.(*schemas.CellStarted); ok {
		c.started(cs, id, st, m, emit, out, now)
		return
	}
	if cs == nil {
		c.addPending(&pendItem{m: m, cell: id, sinceLog: m.ts, sinceWall: now}, emit, out)
		return
	}
	// A finished cell's late events are charged too (admit): stage B keeps
	// them with the cell's inputs for its retention window, so a flood of
	// them must meet the cap as an open cell's events do.
	if m.ev.Type() != schemas.TypeCellFinished && cs.proj.bytes+charge(cs, m) > c.cfg.MaxStateBytes && !c.redelivered(cs, m) {
		c.deadLetter(m, c.overBytes(cs.proj, m), emit, out)
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
		c.admit(cs, m, emit, out, now)
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
	pu := c.projects[id.project]
	if pu == nil {
		pu = &projUse{name: id.project}
		c.projects[id.project] = pu
	}
	var r *rejection
	switch {
	case pu.open >= c.cfg.MaxOpenCells:
		r = reject(schemas.StageLimit, CodeOpenCellsCap,
			"project %q already has %d unfinished cells on partition %d, the cap (--max-open-cells %d): finish or abandon cells (cell_finished) before starting more",
			id.project, pu.open, m.partition, c.cfg.MaxOpenCells)
	case pu.bytes+cellCharge+stateCharge(m) > c.cfg.MaxStateBytes:
		r = c.overBytes(pu, m)
	}
	if r != nil {
		c.dropProject(pu)
		c.deadLetter(m, r, emit, out)
		// What waited for this cell_started would wait in vain.
		for _, p := range c.pending.take(id, "") {
			c.deadLetter(p.m, r, emit || p.m.emit, out)
		}
		return
	}
	// No map is sized from the event: task_count and batch_size are
	// producer input (a forged 2^31 would reserve megabytes per cell).
	cs = &cellState{
		id: id, key: []byte(score.PairingKey(st.Project, st)), current: st.H0Version,
		attempts:  map[string]struct{}{},
		startedID: st.EventID,
		proj:      pu, bytes: cellCharge, keep: cellCharge,
		startOff: m.offset, startTime: m.ts,
	}
	cs.known.add(st.H0Version)
	pu.open++
	pu.cells++
	pu.bytes += cellCharge
	c.byID[id] = cs
	c.admit(cs, m, emit, out, now)
	for _, p := range c.pending.take(id, "") {
		c.semantic(p.m, emit || p.m.emit, out, now)
	}
}

// attempt handles a task_attempt of the started cell cs: admitted when its
// harness version is known or empty (the cell's current version, as the
// scorer reads it: score/doc.go), which may release a held finish; else it
// waits for the update that introduces it, or is a dead letter once the
// cell finished.
func (c *cells) attempt(cs *cellState, id cellKey, ev *schemas.TaskAttempt, m *inMsg, emit bool, out *sink, now time.Time) {
	if !cs.known.has(ev.HarnessVersion) && ev.HarnessVersion != "" {
		if cs.finished {
			c.deadLetter(m, unknownVersion(ev, "the cell finished"), emit, out)
			return
		}
		c.addPending(&pendItem{m: m, cell: id, version: ev.HarnessVersion, sinceLog: m.ts, sinceWall: now}, emit, out)
		return
	}
	c.admit(cs, m, emit, out, now)
	if cs.heldFinish {
		c.releaseFinish(id, emit, out, now)
	}
}

// update handles a harness_update of the started cell cs: it must chain from
// the current version, add no content the cell already has and name its
// evidence. An accepted update introduces its version, which releases the
// attempts (and the finish) waiting for it.
func (c *cells) update(cs *cellState, id cellKey, ev *schemas.HarnessUpdate, m *inMsg, emit bool, out *sink, now time.Time) {
	if cs.ids.has(ev.EventID) {
		c.m.duplicates.Inc()
		return
	}
	if cs.updateIDs.has(ev.UpdateID) {
		// The same update (natural key: cell, update_id) under a new event
		// id: one update, whichever copy wins (the greatest event time and
		// event id, in the scorer and the views alike). It is not checked
		// against the chain it already advanced, and changes no version.
		c.admit(cs, m, emit, out, now)
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
		if cs.hashes.has(artifactHash(a)) {
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
			cs.hashes.add(artifactHash(&ev.Artifacts[i]))
		}
	}
	c.admit(cs, m, emit, out, now)
	if ev.Accepted {
		cs.known.add(ev.ToVersion)
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
	c.admit(cs, m, emit, out, now)
	cs.finished, cs.finishedID, cs.finishedLog, cs.finishedWall = true, ev.EventID, m.ts, now
	cs.attempts, cs.heldFinish = nil, false
	// What late events are checked against, compact.
	cs.known.freeze()
	cs.hashes.freeze()
	cs.ids.freeze()
	cs.updateIDs.freeze()
	// A finished cell keeps its fixed part and its updates until evicted.
	c.unlink(cs)
	cs.proj.open--
	cs.proj.bytes -= cs.bytes - cs.keep
	cs.bytes = cs.keep
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
		if old := c.pending.popFair(p.cell.project); old != nil {
			c.expired(old, "the pending buffer was full (--pending-max "+strconv.Itoa(c.cfg.PendingMax)+
				", shared by project: the project that holds the most waiting events loses its oldest)", emit || old.m.emit, out)
			old.m = nil // it stays in the arrival queue until compacted
		}
	}
	c.pending.add(p)
}

// redelivered reports that m is an update the cell already admitted (it is
// skipped as a duplicate, not refused by the state cap).
func (c *cells) redelivered(cs *cellState, m *inMsg) bool {
	u, ok := m.ev.(*schemas.HarnessUpdate)
	if !ok {
		return false
	}
	return cs.ids.has(u.EventID)
}

// stateCharge is what admitting m charges its open cell against
// Config.MaxStateBytes.
func stateCharge(m *inMsg) int64 { return int64(len(m.value)) + eventCharge }

func (c *cells) overBytes(pu *projUse, m *inMsg) *rejection {
	return reject(schemas.StageLimit, CodeStateBytesCap,
		"project %q holds about %d bytes of state on partition %d and this %d-byte event would take it past the cap (--max-state-bytes %d): finish cells (cell_finished) to free their state (a finished cell's late events stay charged until its retention window, --grace, passed)",
		pu.name, pu.bytes, m.partition, len(m.value), c.cfg.MaxStateBytes)
}

// dropProject forgets pu once its project holds no cell.
func (c *cells) dropProject(pu *projUse) {
	if pu.cells == 0 {
		delete(c.projects, pu.name)
	}
}

// touch notes that an event of the unfinished cell cs was admitted: it moves
// cs to the end of the idle list.
func (c *cells) touch(cs *cellState, now time.Time) {
	cs.lastLog, cs.lastWall = c.logClock, now
	if c.idleTail == cs {
		return
	}
	c.unlink(cs)
	cs.prev = c.idleTail
	if c.idleTail != nil {
		c.idleTail.next = cs
	} else {
		c.idle = cs
	}
	c.idleTail = cs
}

// unlink takes cs off the idle list (a no-op when it is not on it).
func (c *cells) unlink(cs *cellState) {
	if cs.prev != nil {
		cs.prev.next = cs.next
	} else if c.idle == cs {
		c.idle = cs.next
	}
	if cs.next != nil {
		cs.next.prev = cs.prev
	} else if c.idleTail == cs {
		c.idleTail = cs.prev
	}
	cs.prev, cs.next = nil, nil
}

// ageOut drops the unfinished cells that had no admitted event for
// Config.CellIdle on either clock: each is a dead letter (limit/cell_idle,
// at its cell_started's coordinates) and its attempts that wait for a
// version are unknown_version. A cell whose finish is held is left to its
// hold or pending timeout.
func (c *cells) ageOut(emit bool, out *sink, now time.Time) {
	for cs := c.idle; cs != nil; cs = c.idle {
		if !cs.lastLog.Add(c.cfg.CellIdle).Before(c.logClock) && !cs.lastWall.Add(c.cfg.CellIdle).Before(now) {
			return
		}
		if cs.heldFinish || cs.holdID != "" {
			c.touch(cs, now)
			continue
		}
		c.unlink(cs)
		delete(c.byID, cs.id)
		cs.evicted = true
		pu := cs.proj
		pu.open--
		pu.cells--
		pu.bytes -= cs.bytes
		c.dropProject(pu)
		for _, p := range c.pending.takeVersions(cs.id) {
			c.deadLetter(p.m, unknownVersion(p.m.ev.(*schemas.TaskAttempt), "the cell aged out"), emit || p.m.emit, out)
		}
		if !emit {
			continue
		}
		c.m.agedOutCells.Inc()
		out.agedOut++
		m := &inMsg{topic: schemas.TopicCells, partition: c.part, offset: cs.startOff, ts: cs.startTime,
			ev: &schemas.CellStarted{Envelope: schemas.Envelope{EventID: cs.startedID, Project: cs.id.project}, CellID: cs.id.cell}}
		c.deadLetter(m, reject(schemas.StageLimit, CodeCellIdle,
			"the unfinished cell had no admitted event for %v (--cell-idle): its state was dropped, and its later events are unknown_cell; send cell_finished when a cell ends",
			c.cfg.CellIdle), true, out)
	}
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
	if c.wasForgotten(p.cell) {
		// It waited while the cell was still held, finished, and the cell
		// was forgotten meanwhile (an event never waits for a held cell).
		c.deadLetter(p.m, lateBeyondWindow(p.m.ev, "the cell finished and its state was dropped "+c.cfg.Grace.String()+" (--grace) after its cell_finished"), emit, out)
		return
	}
	c.deadLetter(p.m, reject(schemas.StageSemantic, CodeUnknownCell,
		"%s %q: no cell_started of cell %q reached the processors before %s", p.m.ev.Type(), p.m.ev.Header().EventID, p.cell.cell, why), emit, out)
}

// evict drops finished cells whose grace passed on either clock.
func (c *cells) evict(now time.Time) {
	n := 0
	for _, cs := range c.finished {
		if !cs.finishedLog.Add(c.cfg.Grace).Before(c.logClock) && !cs.finishedWall.Add(c.cfg.Grace).Before(now) {
			break
		}
		delete(c.byID, cs.id)
		c.forget(cs.id, now)
		cs.proj.bytes -= cs.bytes
		cs.proj.cells--
		c.dropProject(cs.proj)
		n++
	}
	if n > 0 {
		clear(c.finished[:n])
		c.finished = c.finished[n:]
		c.m.evictedCells.Add(float64(n))
	}
	if len(c.tombQ) > 0 {
		c.expireTombstones(now)
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
// bound), by cell (for release) and by project (for a fair share of the
// bound, popFair).
type pendingBuf struct {
	queue     []*pendItem
	byCell    map[cellKey][]*pendItem
	byProject map[string]*pendProject
	live      int
	// added and addedVersion count every item ever added (all, and those
	// waiting for a version), for tests and logs.
	added, addedVersion int
}

// pendProject is one project's pending events in arrival order (resolved
// ones are skipped, and compacted away) and how many are live.
type pendProject struct {
	queue []*pendItem
	live  int
}

func (b *pendingBuf) add(p *pendItem) {
	if len(b.queue) > 2*b.live+64 {
		b.queue = compactPending(b.queue)
	}
	b.queue = append(b.queue, p)
	b.byCell[p.cell] = append(b.byCell[p.cell], p)
	pp := b.byProject[p.cell.project]
	if pp == nil {
		pp = &pendProject{}
		b.byProject[p.cell.project] = pp
	} else if len(pp.queue) > 2*pp.live+64 {
		pp.queue = compactPending(pp.queue)
	}
	pp.queue = append(pp.queue, p)
	pp.live++
	b.live++
	b.added++
	if p.version != "" {
		b.addedVersion++
	}
}

// compactPending drops the resolved items of q, in place, keeping the order.
func compactPending(q []*pendItem) []*pendItem {
	kept := q[:0]
	for _, p := range q {
		if p != nil && !p.done {
			kept = append(kept, p)
		}
	}
	clear(q[len(kept):])
	return kept
}

// popFair resolves and returns the item to evict from a full buffer for a
// new item of project: the oldest of the project that holds the most live
// items, counting the new one (so a project that floods the buffer evicts
// its own, and one that holds fewer than another never loses an item to
// it); the oldest of all when that project holds none.
func (b *pendingBuf) popFair(project string) *pendItem {
	victim, most := project, 1
	if pp := b.byProject[project]; pp != nil {
		most += pp.live
	}
	for name, pp := range b.byProject {
		if pp.live > most {
			victim, most = name, pp.live
		}
	}
	pp := b.byProject[victim]
	if pp == nil || pp.live == 0 {
		return b.popOldest()
	}
	for i, p := range pp.queue {
		if !p.done {
			clear(pp.queue[:i+1])
			pp.queue = pp.queue[i+1:]
			b.resolve(p)
			return p
		}
	}
	return b.popOldest()
}

// unproject counts one item of p's project resolved.
func (b *pendingBuf) unproject(p *pendItem) {
	pp := b.byProject[p.cell.project]
	if pp == nil {
		return
	}
	if pp.live--; pp.live <= 0 {
		delete(b.byProject, p.cell.project)
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
	b.unproject(p)
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
			b.unproject(p)
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
