package score

import (
	"fmt"
	"math"

	"github.com/harnessflow/harnessflow/schemas"
)

// Source is the envelope source of every derived event.
const Source = "processors"

// Stats counts what a Pairer ignored or skipped, for metrics and tests.
type Stats struct {
	// Duplicates: events whose event_id was already seen in their live cell
	// (redeliveries), and repeated cell_started of a known cell.
	Duplicates int64
	// Ignored: events of a cell after its cell_finished, of a cell already
	// evicted, or of an ignored (second baseline) cell.
	Ignored int64
	// Late: attempts, skill events and judgments for a round that had already
	// closed in the cell's order, and repeated attempt rows (same task,
	// attempt and cycle under a new event_id; the first one counts).
	Late int64
	// Orphans: skill events and judgments whose attempt never arrived before
	// the cell finished.
	Orphans int64
	// EmptyUpdates: harness updates with no artifact (not an update,
	// docs/metrics.md): no sample.
	EmptyUpdates int64
	// SkippedUpdates: updates of baseline and split_train cells, which yield no
	// sample by rule (a split_train cell's updates are measured in its
	// split_test sibling), and repeated update_ids.
	SkippedUpdates int64
	// Samples and RoundMetrics count the derived events emitted.
	Samples, RoundMetrics int64
}

// Pairer pairs the cells of one pairing key and derives their labeled samples
// and round metrics. See the package documentation for the rules. A Pairer is
// not safe for concurrent use: the runtime owns one per pairing key and feeds
// it from one goroutine.
type Pairer struct {
	key    string
	params Params
	cells  map[string]*cell    // live cells
	gone   map[string]struct{} // finished-and-evicted or ignored cells
	base   *baseline
	stats  Stats
}

// NewPairer returns an empty Pairer for the pairing key (as PairingKey builds
// it; "" disables the check of cell_started against it). Zero or invalid
// fields of p take their defaults.
func NewPairer(key string, p Params) *Pairer {
	pr := &Pairer{key: key, cells: map[string]*cell{}, gone: map[string]struct{}{}}
	pr.SetParams(p)
	return pr
}

// SetParams replaces the labeling parameters (when the campaign declaration
// arrives or changes). Outputs not yet emitted use the new ones. Zero or
// invalid fields take their defaults.
func (p *Pairer) SetParams(np Params) {
	np.SetDefaults()
	var d Params
	d.SetDefaults()
	if !(np.Epsilon >= 0 && np.Epsilon <= 1) {
		np.Epsilon = d.Epsilon
	}
	if !(np.Alpha > 0 && np.Alpha < 1) {
		np.Alpha = d.Alpha
	}
	if np.MinPairs < 1 {
		np.MinPairs = d.MinPairs
	}
	if !(np.Lambda >= 0) {
		np.Lambda = d.Lambda
	}
	p.params = np
}

// Params returns the parameters in use.
func (p *Pairer) Params() Params { return p.params }

// Key returns the pairing key.
func (p *Pairer) Key() string { return p.key }

// Stats returns the counters of ignored and skipped inputs.
func (p *Pairer) Stats() Stats { return p.stats }

// Done reports that every cell of the key has finished and every output was
// emitted: the state can be evicted (after a grace period, since another
// evolved cell of the key may still start; the baseline's compact
// task → score map is kept until then).
func (p *Pairer) Done() bool { return len(p.cells) == 0 }

// Size returns a rough count of retained items: per live cell its seen event
// ids, task outcomes, attempt rows, buffered skill events and judgments and
// pending updates; the baseline's task → score map; one per evicted cell id.
func (p *Pairer) Size() int {
	n := len(p.gone)
	if p.base != nil {
		n += p.base.size()
	}
	for _, c := range p.cells {
		n += 1 + len(c.seen) + len(c.byAttempt) + len(c.updates)
		for _, o := range c.orphans {
			n += len(o)
		}
		for _, r := range c.rounds {
			n += len(r.outcomes) + len(r.attempts)
		}
	}
	return n
}

// Add feeds one admitted event (of any cell of this pairing key) and returns
// the derived events (*schemas.LabeledSample, *schemas.RoundMetrics) that
// became final, sorted by cell_id, cycle, type (round metrics first) and
// event id. Events whose cell_started was not seen yet are an error
// (ErrUnknownCell); redelivered events (same event_id) are ignored.
func (p *Pairer) Add(ev schemas.Event) ([]schemas.Event, error) {
	var cellID string
	switch e := ev.(type) {
	case *schemas.CellStarted:
		return nil, p.start(e)
	case *schemas.TaskAttempt:
		cellID = e.CellID
	case *schemas.SkillEvent:
		cellID = e.CellID
	case *schemas.AdherenceJudgment:
		cellID = e.CellID
	case *schemas.HarnessUpdate:
		cellID = e.CellID
	case *schemas.CellFinished:
		cellID = e.CellID
	default:
		return nil, fmt.Errorf("pairer %s: %w: %s", p.key, ErrUnsupportedEvent, ev.Type())
	}
	if _, ok := p.gone[cellID]; ok {
		p.stats.Ignored++
		return nil, nil
	}
	c := p.cells[cellID]
	if c == nil {
		return nil, fmt.Errorf("%s for cell %q: %w", ev.Type(), cellID, ErrUnknownCell)
	}
	if c.finished {
		p.stats.Ignored++
		return nil, nil
	}
	h := ev.Header()
	if h.EventID != "" {
		// One map operation: the set grows unless the id was in it.
		n := len(c.seen)
		if c.seen[h.EventID] = struct{}{}; len(c.seen) == n {
			p.stats.Duplicates++
			return nil, nil
		}
	}
	if h.EventTime.After(c.maxTime) {
		c.maxTime = h.EventTime
	}
	switch e := ev.(type) {
	case *schemas.TaskAttempt:
		p.attempt(c, e)
	case *schemas.SkillEvent:
		if e.Tool != schemas.ToolLoadSkill || e.Status != schemas.SkillLoaded {
			return nil, nil // not an input of any output
		}
		p.attach(c, akey{e.TaskID, e.Attempt}, e)
	case *schemas.AdherenceJudgment:
		p.attach(c, akey{e.TaskID, e.Attempt}, e)
	case *schemas.HarnessUpdate:
		p.update(c, e)
	case *schemas.CellFinished:
		c.finished = true
		c.seen = nil
		for _, o := range c.orphans {
			p.stats.Orphans += int64(len(o))
		}
		c.orphans = nil
		c.byAttempt = nil
	}
	return p.collect(c), nil
}

// start adds the cell of a cell_started: the key's first baseline cell
// becomes its baseline, a second one is ignored (ErrDuplicateBaseline).
func (p *Pairer) start(e *schemas.CellStarted) error {
	if _, ok := p.cells[e.CellID]; ok {
		p.stats.Duplicates++
		return nil
	}
	if _, ok := p.gone[e.CellID]; ok {
		p.stats.Ignored++
		return nil
	}
	if p.key != "" {
		// An outcome written by an older stage A has the unescaped key
		// (the same, unless the project holds a '/' or '%').
		if k := PairingKey(e.Project, e); k != p.key && legacyPairingKey(e.Project, e) != p.key {
			return fmt.Errorf("cell %q key %q, pairer %q: %w", e.CellID, k, p.key, ErrKeyMismatch)
		}
	}
	kind := kindOf(e)
	if kind == kindBaseline {
		if p.base != nil {
			p.gone[e.CellID] = struct{}{}
			return fmt.Errorf("cell %q (baseline is %q): %w", e.CellID, p.base.cellID, ErrDuplicateBaseline)
		}
		p.base = &baseline{cellID: e.CellID, scores: map[string]float64{}}
	}
	// No map is sized from the event: task_count is producer input (a
	// forged 2^31 reserved megabytes per cell); the maps grow with what
	// actually arrives.
	c := &cell{
		info:      e,
		kind:      kind,
		seen:      map[string]struct{}{},
		handled:   math.MinInt64,
		tip:       e.H0Version,
		chain:     map[string]int32{e.H0Version: 0},
		rounds:    map[int32]*round{},
		byAttempt: map[akey]*attemptRec{},
		orphans:   map[akey][]schemas.Event{},
		updateIDs: map[string]struct{}{},
		maxTime:   e.EventTime,
	}
	if e.EventID != "" {
		c.seen[e.EventID] = struct{}{}
	}
	p.cells[e.CellID] = c
	return nil
}
