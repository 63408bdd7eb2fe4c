package score

import (
	"bytes"
	"math"
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

// msTime is the event time of a record, kept in milliseconds (the
// schema's precision).
func msTime(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// beats reports that an event (ms, id) wins over the kept winner (oldMs,
// oldID) of slot s: the greatest (event_time in milliseconds, event_id),
// whatever the order they arrived in (docs/metrics.md, "one winner").
func (c *cell) beats(ms int64, id string, oldMs int64, oldID sref, s int32) bool {
	if ms != oldMs {
		return ms > oldMs
	}
	return id > c.idStr(oldID, s)
}

// attemptRec is the winning task_attempt of one natural key of a cell:
// (task_id, attempt) is its slot (the list it is in), with the cycle the
// key. stream_idx is left out: it is a function of the task and the cycle
// (the task's place in the cell's stream). The cycle is in the key: a
// split_test cell solves the same held-out tasks in every round.
type attemptRec struct {
	ms    int64   // event time (ms): its version's, and its time
	score float64 // 0 when status is not ok
	id    sref    // event id: its version's (c.putID)
	// vf is the harness version (c.names; "" resolved to the cell's
	// current one) and the flags recSuccess, recOffered.
	vf    uint32
	cycle int32
	next  int32 // index + 1 in c.recs of the slot's attempt in another cycle
}

const (
	recSuccess = 1 << 31 // success (false when status is not ok)
	recOffered = 1 << 30 // skills_available > 0
	recVersion = recOffered - 1
)

func (r *attemptRec) success() bool   { return r.vf&recSuccess != 0 }
func (r *attemptRec) offered() bool   { return r.vf&recOffered != 0 }
func (r *attemptRec) version() uint32 { return r.vf & recVersion }

// loadRec is the winning load_skill skill_event of one natural key within
// its attempt: (turn, skill_name) (the tool is load_skill, the only tool
// read).
type loadRec struct {
	ms   int64
	id   sref
	sl   uint32 // the skill name (c.names) and the flag loadLoaded
	turn int32
	next int32 // index + 1 in c.loads of the slot's next load
}

const (
	loadLoaded = 1 << 31 // status loaded
	loadSkill  = loadLoaded - 1
)

// judgRec is the winning adherence_judgment of one natural key within its
// attempt: (skill_name, judge_model), interned together (c.names holds
// the pair's two names, sub the index of the first).
type judgRec struct {
	ms          int64
	loaded, fin float64 // harness_loaded, final_validation, when flagged
	id          sref
	// sf is the (skill_name, judge_model) pair (c.pairs) and the flags
	// judgLoaded, judgFin.
	sf   uint32
	next int32 // index + 1 in c.judgs of the slot's next judgment
}

const (
	judgLoaded = 1 << 31 // loaded is set
	judgFin    = 1 << 30 // fin is set
	judgPair   = judgFin - 1
)

func (j *judgRec) pair() uint32 { return j.sf & judgPair }

type judgPairNames struct{ skill, judge uint32 }

// pairOf returns the index of the (skill, judge) pair in c.pairs.
func (c *cell) pairOf(skill, judge string) uint32 {
	p := judgPairNames{c.names.id(skill), c.names.id(judge)}
	if i, ok := c.pairs.index(p); ok {
		return uint32(i)
	}
	return uint32(c.pairs.put(p, struct{}{}))
}

type meanAcc struct {
	sum float64
	n   int
}

func (m *meanAcc) add(x float64) {
	m.sum += x
	m.n++
}

func (m meanAcc) ptr() *float64 {
	if m.n == 0 {
		return nil
	}
	v := m.sum / float64(m.n)
	return &v
}

// round is one cycle of a cell: the slots of its attempts' natural keys
// (each once: a key holds its cycle, and a new winner replaces the old in
// place), and the round metrics last emitted for it.
type round struct {
	cycle int32
	keys  []int32 // slots
	out   emitted
	dirty bool // an input changed after out was computed
}

// rec returns slot s's attempt winner of cycle cy (nil if none).
func (c *cell) rec(s, cy int32) *attemptRec {
	for i := c.slots[s].att; i != 0; i = c.recs[i-1].next {
		if r := &c.recs[i-1]; r.cycle == cy {
			return r
		}
	}
	return nil
}

// sorted sorts r's slots in (task, attempt) order, so that every sum is
// taken in an order that does not depend on arrival, and returns them.
func (c *cell) sorted(r *round) []int32 {
	sortInt32s(r.keys, func(a, b int32) bool {
		if k := bytes.Compare(c.taskOf(a), c.taskOf(b)); k != 0 {
			return k < 0
		}
		return c.slots[a].attempt < c.slots[b].attempt
	})
	return r.keys
}

type pendingUpdate struct {
	// verMs and verID are the winning copy's event time (ms; the update's
	// time) and event id (c.arena.putID), artMs and artID those of the
	// greatest copy with artifacts.
	verMs, artMs int64
	verID, artID sref
	updateID     string
	from, to     uint32 // c.names
	evolver      uint32 // c.names
	cycle        int32
	versionIdx   int32
	text, kind   string
	// evidence (task ids in the cell's arena) and summary make the query,
	// built when the sample is computed: the evidence attempts may arrive
	// after the update.
	evidence []sref
	summary  string
	out      emitted
	// hasArts: a copy with artifacts arrived; text and kind are those of
	// the greatest such copy (artMs, artID). samples: the cell's kind
	// yields samples (not baseline, not split_train). An update is in
	// cell.updates, and yields a sample, when both hold.
	hasArts, samples bool
	rolledBack       bool
	dirty            bool
}

// cell is a Pairer's state of one cell, kept while it runs and, once it
// finished, until the runtime forgets it (Pairer.Forget): the winners of
// its inputs, compact (compact.go), so that a late event can correct what
// was emitted.
type cell struct {
	info     *schemas.CellStarted
	kind     cellKind
	seen     idSet
	finished bool
	hasCycle bool
	maxCycle int32
	handled  int64 // closedThrough at the last round scan
	tip      string
	chain    smallMap[uint32, int32] // version (c.names) → index in the version chain
	chainLen int32
	rounds   smallMap[int32, *round]
	arena    arena
	names    names
	// slots are the (task_id, attempt) pairs of the cell's attempts, skill
	// loads and judgments, found by slotIdx (open addressing on the hash
	// of the pair: index + 1, 0 empty). recs, loads and judgs are the
	// winners, in lists per slot.
	slots   []slot
	slotIdx []int32
	recs    []attemptRec
	loads   []loadRec
	judgs   []judgRec
	// inputs are the task_input of the attempt winners that carry one, by
	// index in recs; idParts counts the names interned for event ids.
	inputs  map[int32]sref
	idParts int
	// pairs are the (skill_name, judge_model) pairs of the judgments, as
	// c.names indices.
	pairs smallMap[judgPairNames, struct{}]
	// multi counts the (task_id, attempt) with attempts in several
	// cycles (held-out tasks solved every round).
	multi    int
	updates  []*pendingUpdate
	byUpdate smallMap[string, *pendingUpdate]
	dirty    bool // a round or an update was marked dirty
	maxTime  time.Time
}

// attempt returns the winner of (task, cycle, attempt), nil if none
// arrived.
func (c *cell) attempt(task []byte, cycle, attempt int32) (*attemptRec, int32) {
	s := c.findSlotBytes(task, attempt)
	if s < 0 {
		return nil, -1
	}
	for i := c.slots[s].att; i != 0; i = c.recs[i-1].next {
		if r := &c.recs[i-1]; r.cycle == cycle {
			return r, i - 1
		}
	}
	return nil, -1
}

// multiCycle reports that slot s has attempts in several cycles.
func (c *cell) multiCycle(s int32) bool {
	h := c.slots[s].att
	return h != 0 && c.recs[h-1].next != 0
}

// touchSlot marks every cycle of slot s's attempts touched.
func (c *cell) touchSlot(s int32) {
	for i := c.slots[s].att; i != 0; i = c.recs[i-1].next {
		c.touch(c.recs[i-1].cycle)
	}
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
	r, _ := c.rounds.get(cycle)
	if r == nil {
		// Sized from what actually arrived (the previous round), never
		// from batch_size (producer input).
		n := 0
		if prev, _ := c.rounds.get(cycle - 1); prev != nil {
			n = len(prev.keys)
		}
		r = &round{cycle: cycle, keys: make([]int32, 0, n)}
		c.rounds.put(cycle, r)
	}
	return r
}

// owner returns the cycle of the attempt of slot s that a skill event or
// judgment stamped at (ms) belongs to: the attempt with the latest event
// time not after it, else the earliest (ties: the higher cycle); ok false
// when the slot has no attempt. A function of the events, not of their
// arrival.
func (c *cell) owner(s int32, at int64) (int32, bool) {
	h := c.slots[s].att
	switch {
	case h == 0:
		return 0, false
	case c.recs[h-1].next == 0:
		return c.recs[h-1].cycle, true
	}
	best, bestAt, found := int32(0), int64(0), false
	first, firstAt := int32(0), int64(0)
	for i := h; i != 0; i = c.recs[i-1].next {
		r := &c.recs[i-1]
		cy, t := r.cycle, r.ms
		if i == h || t < firstAt || t == firstAt && cy > first {
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
	if r, _ := c.rounds.get(cycle); r != nil {
		// An emitted round is computed again; one never emitted (a cycle
		// that arrived after its round closed, even after cell_finished,
		// when nothing else would scan the rounds again) is emitted.
		if r.out.done {
			r.dirty = true
		}
		c.dirty = true
	}
	for _, u := range c.updates {
		if u.out.done && (u.cycle == cycle || u.cycle+1 == cycle) {
			u.dirty, c.dirty = true, true
		}
	}
}

// touchAll marks every emitted output of c dirty (the baseline changed).
func (c *cell) touchAll() {
	for i := range c.rounds.len() {
		r := c.rounds.val(i)
		if r.out.done {
			r.dirty, c.dirty = true, true
		}
	}
	for _, u := range c.updates {
		if u.out.done {
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
