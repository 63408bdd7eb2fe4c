package score

import (
	"fmt"
	"math"

	"github.com/harnessflow/harnessflow/schemas"
)

// Source is the envelope source of every derived event.
const Source = "processors"

// Stats counts what a Pairer ignored, replaced or corrected, for metrics
// and tests.
type Stats struct {
	// Duplicates: events whose event_id was already seen in their cell
	// (redeliveries), and repeated cell_started of a known cell.
	Duplicates int64
	// Ignored: events of an ignored (second baseline) cell.
	Ignored int64
	// Superseded: events that share a natural key with an earlier one of
	// their cell under a new event_id (re-sends); one of them wins.
	Superseded int64
	// Late: attempts, skill events, judgments and updates for a round that
	// had already closed in the cell's order (they count: the outputs that
	// read them are corrected).
	Late int64
	// Corrections: derived events emitted again, with the same id and
	// new values, because a late or re-sent input changed them.
	Corrections int64
	// EmptyUpdates: harness updates with no artifact (not an update,
	// docs/metrics.md): no sample.
	EmptyUpdates int64
	// SkippedUpdates: updates of baseline and split_train cells, which yield no
	// sample by rule (a split_train cell's updates are measured in its
	// split_test sibling).
	SkippedUpdates int64
	// Samples and RoundMetrics count the derived events emitted,
	// corrections included.
	Samples, RoundMetrics int64
}

// Pairer pairs the cells of one pairing key and derives their labeled samples
// and round metrics. See the package documentation for the rules. A Pairer is
// not safe for concurrent use: the runtime owns one per pairing key and feeds
// it from one goroutine.
type Pairer struct {
	key    string
	params Params
	cells  map[string]*cell // held cells, finished ones until forgotten
	// gone: finished cells forgotten (Forget); ignored: second baselines.
	gone, ignored map[string]struct{}
	open          int // unfinished cells held
	base          *baseline
	baseDirty     bool
	stats         Stats
}

// NewPairer returns an empty Pairer for the pairing key (as PairingKey builds
// it; "" disables the check of cell_started against it). Zero or invalid
// fields of p take their defaults.
func NewPairer(key string, p Params) *Pairer {
	pr := &Pairer{key: key, cells: map[string]*cell{}, gone: map[string]struct{}{}, ignored: map[string]struct{}{}}
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

// Done reports that every cell of the key has finished and its outputs
// were emitted: the state can be evicted (after a grace period, since
// another evolved cell of the key may still start, and late events of the
// finished cells still correct their outputs until then).
func (p *Pairer) Done() bool {
	if p.open > 0 {
		return false
	}
	if p.baseReady() {
		return true
	}
	for _, c := range p.cells {
		if p.waitsForBase(c) {
			return false // its outputs wait for the baseline
		}
	}
	return true
}

// waitsForBase reports that c's outputs wait for the baseline to finish.
func (p *Pairer) waitsForBase(c *cell) bool {
	return !p.baseReady() && (c.kind == kindInSitu || c.kind == kindSplitTrain || c.kind == kindSplitTest)
}

// Finished reports whether the Pairer holds cellID as a finished cell.
func (p *Pairer) Finished(cellID string) bool {
	c := p.cells[cellID]
	return c != nil && c.finished
}

// Holds reports whether the Pairer holds cellID (started, not forgotten,
// not ignored).
func (p *Pairer) Holds(cellID string) bool { return p.cells[cellID] != nil }

// Forget drops a finished cell's state (the runtime's retention window for
// late events passed): its later events are refused with
// ErrLateBeyondWindow. The baseline's scores stay, frozen, for cells that
// start later. It reports whether the cell was held and finished and is
// now forgotten; a cell whose outputs still wait for the baseline is kept
// (they would be lost): the runtime asks again later.
func (p *Pairer) Forget(cellID string) bool {
	c := p.cells[cellID]
	if c == nil || !c.finished || p.waitsForBase(c) {
		return false
	}
	if p.base != nil && p.base.cell == c {
		p.base.freeze()
	}
	delete(p.cells, cellID)
	p.gone[cellID] = struct{}{}
	return true
}

// Size returns a rough count of retained items: per held cell its seen
// event ids, attempt winners, skill loads, judgments and updates; the
// frozen baseline's task → score map; one per forgotten cell id.
func (p *Pairer) Size() int {
	n := len(p.gone) + len(p.ignored)
	if p.base != nil {
		n += p.base.size()
	}
	for _, c := range p.cells {
		n += 1 + c.seen.len() + len(c.recs) + len(c.updates) + len(c.loads) + len(c.judgs)
	}
	return n
}

// Add feeds one admitted event (of any cell of this pairing key) and returns
// the derived events (*schemas.LabeledSample, *schemas.RoundMetrics) that
// became final or were corrected, sorted by cell_id, cycle, type (round
// metrics first) and event id. Events whose cell_started was not seen yet are
// an error (ErrUnknownCell), so are events of a cell forgotten after its
// retention window (ErrLateBeyondWindow); redelivered events (same
// event_id) are ignored.
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
	if _, ok := p.ignored[cellID]; ok {
		p.stats.Ignored++
		return nil, nil
	}
	if _, ok := p.gone[cellID]; ok {
		return nil, fmt.Errorf("%s %q for cell %q: %w", ev.Type(), ev.Header().EventID, cellID, ErrLateBeyondWindow)
	}
	c := p.cells[cellID]
	if c == nil {
		return nil, fmt.Errorf("%s for cell %q: %w", ev.Type(), cellID, ErrUnknownCell)
	}
	h := ev.Header()
	if h.EventID != "" && !c.seen.add(h.EventID) {
		p.stats.Duplicates++
		return nil, nil
	}
	if h.EventTime.After(c.maxTime) {
		c.maxTime = h.EventTime
	}
	switch e := ev.(type) {
	case *schemas.TaskAttempt:
		p.attempt(c, e)
	case *schemas.SkillEvent:
		p.skill(c, e)
	case *schemas.AdherenceJudgment:
		p.judgment(c, e)
	case *schemas.HarnessUpdate:
		p.update(c, e)
	case *schemas.CellFinished:
		if c.finished {
			// A second cell_finished (the runtime refuses those): nothing
			// changes.
			return nil, nil
		}
		c.finished = true
		p.open--
		// It grows by late events only now.
		c.compact()
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
	if _, ok := p.ignored[e.CellID]; ok {
		p.stats.Ignored++
		return nil
	}
	if _, ok := p.gone[e.CellID]; ok {
		return fmt.Errorf("cell_started %q for cell %q: %w", e.EventID, e.CellID, ErrLateBeyondWindow)
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
			p.ignored[e.CellID] = struct{}{}
			return fmt.Errorf("cell %q (baseline is %q): %w", e.CellID, p.base.cellID, ErrDuplicateBaseline)
		}
		p.base = &baseline{cellID: e.CellID}
	}
	// No map is sized from the event: task_count is producer input (a
	// forged 2^31 reserved megabytes per cell); the maps grow with what
	// actually arrives.
	c := &cell{
		info:    e,
		kind:    kind,
		handled: math.MinInt64,
		tip:     e.H0Version,
		arena:   arena{cell: e.CellID},
		maxTime: e.EventTime,
	}
	c.chain.put(c.names.id(e.H0Version), 0)
	if kind == kindBaseline {
		p.base.cell = c
	}
	p.open++
	if e.EventID != "" {
		c.seen.add(e.EventID)
	}
	p.cells[e.CellID] = c
	return nil
}
