package score

import (
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

type akey struct {
	task    string
	attempt int32
}

type outcome struct {
	score   float64
	success bool
	version string
	input   string
	at      time.Time
}

type attemptRec struct {
	key   akey
	cycle int32
	// round is nil once the round was evicted (its metrics went out).
	round                   *round
	offered, passed, loaded bool
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

// round is one cycle of a cell: its attempt-1 outcomes, its attempt rows
// and the inputs of its round metrics.
type round struct {
	cycle    int32
	order    []string // attempt-1 task ids, in the cell's order
	outcomes map[string]*outcome
	attempts []*attemptRec
	adhLoad  meanAcc
	adhFinal meanAcc
	maxTime  time.Time // every input of the round's metrics
	outTime  time.Time // attempt-1 rows only
	emitted  bool
}

type pendingUpdate struct {
	updateID, from, to, evolver string
	cycle                       int32
	rolledBack                  bool
	text, kind                  string
	versionIdx                  int32
	at                          time.Time // the update's event time
	// evidence and summary make the query, built when the sample is final:
	// the evidence attempts may arrive after the update (other topic).
	evidence []string
	summary  string
}

// cell is a Pairer's state of one live cell.
type cell struct {
	info      *schemas.CellStarted
	kind      cellKind
	seen      map[string]struct{}
	finished  bool
	hasCycle  bool
	maxCycle  int32
	handled   int64 // closedThrough at the last round scan
	tip       string
	chain     map[string]int32
	chainLen  int32
	rounds    map[int32]*round
	last      *round
	byAttempt map[akey]*attemptRec
	orphans   map[akey][]schemas.Event
	updates   []*pendingUpdate
	updateIDs map[string]struct{}
	maxTime   time.Time
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
	if c.last != nil && c.last.cycle == cycle {
		return c.last
	}
	r := c.rounds[cycle]
	if r == nil {
		// Sized from the previous round's events that actually arrived,
		// never from batch_size (producer input: a forged 2^31 reserved
		// megabytes per round).
		var outs, atts int
		if c.last != nil {
			outs, atts = len(c.last.order), len(c.last.attempts)
		}
		r = &round{cycle: cycle, outcomes: make(map[string]*outcome, outs), order: make([]string, 0, outs), attempts: make([]*attemptRec, 0, atts)}
		c.rounds[cycle] = r
	}
	c.last = r
	return r
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// needsRound reports that a pending update reads the round of cycle.
func (c *cell) needsRound(cycle int32) bool {
	for _, u := range c.updates {
		if u.cycle == cycle || u.cycle+1 == cycle {
			return true
		}
	}
	return false
}
