package score

import (
	"math"
	"sort"
	"time"

	"github.com/harnessflow/harnessflow/schemas"
)

type cellKind uint8

const (
	kindBaseline cellKind = iota
	kindInSitu
	kindSplitTrain
	kindSplitTest
	kindProduction
)

// kindOf classifies a cell: route production and the split routes as named;
// route baseline, or any other route with no evolver, is the baseline; the
// rest (in_situ) is in-situ.
func kindOf(c *schemas.CellStarted) cellKind {
	switch c.Route {
	case schemas.RouteProduction:
		return kindProduction
	case schemas.RouteSplitTrain:
		return kindSplitTrain
	case schemas.RouteSplitTest:
		return kindSplitTest
	case schemas.RouteBaseline:
		return kindBaseline
	}
	if c.EvolverModel == "" {
		return kindBaseline
	}
	return kindInSitu
}

// akey is an attempt's natural key within its cell: (task_id, cycle,
// attempt). stream_idx is left out: it is a function of the task and the
// cycle (the task's place in the cell's stream). The cycle is in it: a
// split_test cell solves the same held-out tasks in every round.
type akey struct {
	task    string
	cycle   int32
	attempt int32
}

func (a akey) less(b akey) bool {
	if a.task != b.task {
		return a.task < b.task
	}
	if a.attempt != b.attempt {
		return a.attempt < b.attempt
	}
	return a.cycle < b.cycle
}

// cycleSet is the cycles of one (task_id, attempt) of a cell, in arrival
// order: one (no allocation), rarely more.
type cycleSet struct {
	n     int
	first int32
	more  []int32
}

func (s cycleSet) at(i int) int32 {
	if i == 0 {
		return s.first
	}
	return s.more[i-1]
}

// cyclesOf returns the cycles of tk's attempts.
func (c *cell) cyclesOf(tk tkey) cycleSet {
	head := c.attempts[tk]
	if head == nil {
		return cycleSet{}
	}
	s := cycleSet{n: 1, first: head.cycle}
	for r := head.next; r != nil; r = r.next {
		s.more = append(s.more, r.cycle)
		s.n++
	}
	return s
}

// attempt returns the winner of natural key k, nil if none arrived.
func (c *cell) attempt(k akey) *attemptRec {
	for r := c.attempts[tkey{k.task, k.attempt}]; r != nil; r = r.next {
		if r.cycle == k.cycle {
			return r
		}
	}
	return nil
}

// tkey is what skill events and judgments name of their attempt:
// (task_id, attempt), no cycle.
type tkey struct {
	task    string
	attempt int32
}

// version orders the events that share a natural key: the winner is the
// one with the greatest (event_time in milliseconds, event_id), whatever
// the order they arrived in (docs/metrics.md, "one winner").
type version struct {
	ms int64
	id string
}

func versionOf(h *schemas.Envelope) version {
	return version{ms: h.EventTime.UnixMilli(), id: h.EventID}
}

// beats reports that v wins over w.
func (v version) beats(w version) bool {
	if v.ms != w.ms {
		return v.ms > w.ms
	}
	return v.id > w.id
}

// attemptRec is the winning task_attempt of one natural key of a cell.
type attemptRec struct {
	key     akey
	ver     version
	cycle   int32
	score   float64 // 0 when status is not ok
	success bool    // false when status is not ok
	offered bool    // skills_available > 0
	version string  // harness version, "" resolved to the cell's current one
	input   string
	at      time.Time
	next    *attemptRec // the same (task_id, attempt) in another cycle
}

// loadSub is a load_skill skill_event's natural key within its attempt:
// (turn, skill_name) (the tool is load_skill, the only tool read).
type loadSub struct {
	turn  int32
	skill string
}

type loadRec struct {
	sub    loadSub
	ver    version
	loaded bool // status loaded
	at     time.Time
}

// judgSub is an adherence_judgment's natural key within its attempt:
// (skill_name, judge_model).
type judgSub struct {
	skill, judge string
}

type judgRec struct {
	sub         judgSub
	ver         version
	loaded, fin *float64 // harness_loaded, final_validation
	at          time.Time
}

type meanAcc struct {
	sum float64
	n   int
}

func (m *meanAcc) add(x *float64) {
	if x != nil {
		m.sum += *x
		m.n++
	}
}

func (m meanAcc) ptr() *float64 {
	if m.n == 0 {
		return nil
	}
	v := m.sum / float64(m.n)
	return &v
}

// round is one cycle of a cell: the winners of its attempts' natural keys
// (each once: a key holds its cycle, and a new winner replaces the old in
// place), and the round metrics last emitted for it.
type round struct {
	cycle   int32
	keys    []*attemptRec
	emitted *schemas.RoundMetrics
	dirty   bool // an input changed after emitted was computed
}

// sorted sorts r's attempts in (task, attempt) order, so that every sum
// is taken in an order that does not depend on arrival, and returns them.
func (r *round) sorted() []*attemptRec {
	sort.Slice(r.keys, func(i, j int) bool { return r.keys[i].key.less(r.keys[j].key) })
	return r.keys
}

type pendingUpdate struct {
	ver                         version
	updateID, from, to, evolver string
	cycle                       int32
	rolledBack                  bool
	text, kind                  string
	// hasArts: a copy with artifacts arrived; text and kind are those of
	// the greatest such copy (artVer). samples: the cell's kind yields
	// samples (not baseline, not split_train). An update is in
	// cell.updates, and yields a sample, when both hold.
	hasArts, samples bool
	artVer           version
	versionIdx       int32
	at               time.Time // the update's event time
	// evidence and summary make the query, built when the sample is
	// computed: the evidence attempts may arrive after the update.
	evidence []string
	summary  string
	emitted  *schemas.LabeledSample
	dirty    bool
}

// cell is a Pairer's state of one cell, kept while it runs and, once it
// finished, until the runtime forgets it (Pairer.Forget): its inputs are
// kept whole so that a late event can correct what was emitted.
type cell struct {
	info     *schemas.CellStarted
	kind     cellKind
	seen     map[string]struct{}
	finished bool
	hasCycle bool
	maxCycle int32
	handled  int64 // closedThrough at the last round scan
	tip      string
	chain    map[string]int32
	chainLen int32
	rounds   map[int32]*round
	// attempts holds the winners by (task_id, attempt), a list linked by
	// next over the cycles (one, but for held-out tasks solved every
	// round).
	attempts map[tkey]*attemptRec
	loads    map[tkey][]*loadRec // per attempt, one per natural key
	judgs    map[tkey][]*judgRec
	// multi counts the (task_id, attempt) with attempts in several
	// cycles (held-out tasks solved every round).
	multi    int
	updates  []*pendingUpdate
	byUpdate map[string]*pendingUpdate
	dirty    bool // a round or an update was marked dirty
	maxTime  time.Time
}

// closedThrough is the last closed cycle of c: every cycle when c finished,
// else two below the highest cycle of an attempt seen (one round of slack for
// skill events and judgments that trail the next round's first attempts).
func (c *cell) closedThrough() int64 {
	if c.finished {
		return math.MaxInt64
	}
	if !c.hasCycle {
		return math.MinInt64
	}
	return int64(c.maxCycle) - 2
}

func (c *cell) bump(cycle int32) {
	if !c.hasCycle || cycle > c.maxCycle {
		c.maxCycle, c.hasCycle = cycle, true
	}
}

func (c *cell) round(cycle int32) *round {
	r := c.rounds[cycle]
	if r == nil {
		// Sized from what actually arrived (the previous round), never
		// from batch_size (producer input).
		n := 0
		if prev := c.rounds[cycle-1]; prev != nil {
			n = len(prev.keys)
		}
		r = &round{cycle: cycle, keys: make([]*attemptRec, 0, n)}
		c.rounds[cycle] = r
	}
	return r
}

// owner returns the cycle of the attempt of tk that a skill event or
// judgment stamped at (ms) belongs to: the attempt with the latest event
// time not after it, else the earliest (ties: the higher cycle); ok false
// when tk has no attempt. A function of the events, not of their arrival.
func (c *cell) owner(tk tkey, at int64) (int32, bool) {
	cs := c.cyclesOf(tk)
	switch cs.n {
	case 0:
		return 0, false
	case 1:
		return cs.first, true
	}
	best, bestAt, found := int32(0), int64(0), false
	first, firstAt := int32(0), int64(0)
	for i := 0; i < cs.n; i++ {
		cy := cs.at(i)
		t := c.attempt(akey{tk.task, cy, tk.attempt}).at.UnixMilli()
		if i == 0 || t < firstAt || t == firstAt && cy > first {
			first, firstAt = cy, t
		}
		if t <= at && (!found || t > bestAt || t == bestAt && cy > best) {
			best, bestAt, found = cy, t, true
		}
	}
	if found {
		return best, true
	}
	return first, true
}

// touch notes that an input of round cycle changed: an emitted round and
// the emitted samples that read it are computed again.
func (c *cell) touch(cycle int32) {
	if int64(cycle) > c.closedThrough() {
		// Neither the round nor a sample that reads it was emitted (a
		// sample is emitted once the round after its update's closed).
		return
	}
	if r := c.rounds[cycle]; r != nil {
		// An emitted round is computed again; one never emitted (a cycle
		// that arrived after its round closed, even after cell_finished,
		// when nothing else would scan the rounds again) is emitted.
		if r.emitted != nil {
			r.dirty = true
		}
		c.dirty = true
	}
	for _, u := range c.updates {
		if u.emitted != nil && (u.cycle == cycle || u.cycle+1 == cycle) {
			u.dirty, c.dirty = true, true
		}
	}
}

// touchAll marks every emitted output of c dirty (the baseline changed).
func (c *cell) touchAll() {
	for _, r := range c.rounds {
		if r.emitted != nil {
			r.dirty, c.dirty = true, true
		}
	}
	for _, u := range c.updates {
		if u.emitted != nil {
			u.dirty, c.dirty = true, true
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
