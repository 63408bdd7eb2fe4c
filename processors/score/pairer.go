package score

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

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
	// METRICS.md): no sample.
	EmptyUpdates int64
	// SkippedUpdates: updates of baseline and split_train cells, which yield no
	// sample by rule (a split_train cell's updates are measured in its
	// split_test sibling), and repeated update_ids.
	SkippedUpdates int64
	// Samples and RoundMetrics count the derived events emitted.
	Samples, RoundMetrics int64
}

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

type baseline struct {
	cellID string
	// scores maps task_id → attempt-1 score (0 when status ≠ ok) while the
	// baseline runs; frozen holds them once it finished (scores is nil).
	scores   map[string]float64
	frozen   *scoreTable
	finished bool
	maxTime  time.Time
}

// score returns the baseline's score on a task.
func (b *baseline) score(task string) (float64, bool) {
	if b.frozen != nil {
		return b.frozen.get(task)
	}
	v, ok := b.scores[task]
	return v, ok
}

func (b *baseline) size() int {
	if b.frozen != nil {
		return b.frozen.len()
	}
	return len(b.scores)
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
		if k := PairingKey(e.Project, e); k != p.key {
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
	// Size the per-task maps from the declared task count (capped: it is
	// producer input).
	hint := int(min(max(e.TaskCount, 0), 4096))
	c := &cell{
		info:      e,
		kind:      kind,
		seen:      make(map[string]struct{}, 2*hint),
		handled:   math.MinInt64,
		tip:       e.H0Version,
		chain:     map[string]int32{e.H0Version: 0},
		rounds:    map[int32]*round{},
		byAttempt: make(map[akey]*attemptRec, hint),
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
		hint := int(min(max(c.info.BatchSize, 0), 4096))
		r = &round{cycle: cycle, outcomes: make(map[string]*outcome, hint), order: make([]string, 0, hint), attempts: make([]*attemptRec, 0, hint)}
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

func (p *Pairer) attempt(c *cell, e *schemas.TaskAttempt) {
	c.bump(e.Cycle)
	if int64(e.Cycle) <= c.closedThrough() {
		p.stats.Late++
		return
	}
	r := c.round(e.Cycle)
	k := akey{e.TaskID, e.Attempt}
	if prev := c.byAttempt[k]; prev != nil && prev.cycle == e.Cycle {
		p.stats.Late++
		return
	}
	r.maxTime = maxTime(r.maxTime, e.EventTime)
	var score float64
	success := false
	if e.Status == schemas.StatusOK {
		score, success = e.Score, e.Success
	}
	rec := &attemptRec{key: k, cycle: e.Cycle, round: r, offered: e.SkillsAvailable > 0, passed: success}
	c.byAttempt[k] = rec
	r.attempts = append(r.attempts, rec)
	if e.Attempt == 1 {
		if _, dup := r.outcomes[e.TaskID]; !dup {
			v := e.HarnessVersion
			if v == "" {
				v = c.tip
			}
			o := &outcome{score: score, success: success, version: v, input: e.TaskInput, at: e.EventTime}
			r.outcomes[e.TaskID] = o
			r.order = append(r.order, e.TaskID)
			r.outTime = maxTime(r.outTime, e.EventTime)
			if c.kind == kindBaseline {
				if _, ok := p.base.scores[e.TaskID]; !ok && p.base.scores != nil {
					p.base.scores[e.TaskID] = score
				}
			}
		}
	}
	if buf := c.orphans[k]; len(buf) > 0 {
		delete(c.orphans, k)
		for _, ev := range buf {
			p.apply(c, rec, ev)
		}
	}
}

// attach applies a skill load or a judgment to the latest attempt row with
// the same (task_id, attempt) in the cell, or buffers it until that row
// arrives.
func (p *Pairer) attach(c *cell, k akey, ev schemas.Event) {
	if rec := c.byAttempt[k]; rec != nil {
		p.apply(c, rec, ev)
		return
	}
	c.orphans[k] = append(c.orphans[k], ev)
}

// apply adds a skill load or judgment to its attempt's round, unless that
// round is closed in the cell's order (the test must not depend on whether
// the round was already emitted, which depends on other cells).
func (p *Pairer) apply(c *cell, rec *attemptRec, ev schemas.Event) {
	r := rec.round
	if r == nil || int64(rec.cycle) <= c.closedThrough() {
		p.stats.Late++
		return
	}
	r.maxTime = maxTime(r.maxTime, ev.Header().EventTime)
	switch e := ev.(type) {
	case *schemas.SkillEvent:
		rec.loaded = true
	case *schemas.AdherenceJudgment:
		r.adhLoad.add(e.HarnessLoaded)
		r.adhFinal.add(e.FinalValidation)
	}
}

func (p *Pairer) update(c *cell, e *schemas.HarnessUpdate) {
	// An update does not advance the cell's rounds: only attempts (and the
	// finish) close them. Updates travel on their own topic and can overtake
	// the cell's earlier attempts, while an attempt never overtakes the update
	// whose version it runs (the processors hold it until that update).
	idx, ok := c.chain[e.ToVersion]
	if !ok {
		c.chainLen++
		idx = c.chainLen
		c.chain[e.ToVersion] = idx
	}
	if e.RolledBack {
		c.tip = e.FromVersion
	} else {
		c.tip = e.ToVersion
	}
	if _, dup := c.updateIDs[e.UpdateID]; dup || c.kind == kindBaseline || c.kind == kindSplitTrain {
		p.stats.SkippedUpdates++
		return
	}
	if int64(e.Cycle) <= c.closedThrough() {
		// Its round closed already (cycle+2 started): the rounds it reads may
		// have been evicted, depending on other cells, so it is dropped.
		p.stats.Late++
		return
	}
	c.updateIDs[e.UpdateID] = struct{}{}
	if len(e.Artifacts) == 0 {
		p.stats.EmptyUpdates++
		return
	}
	u := &pendingUpdate{
		updateID: e.UpdateID, from: e.FromVersion, to: e.ToVersion, evolver: e.EvolverModel,
		cycle: e.Cycle, rolledBack: e.RolledBack, versionIdx: idx,
	}
	u.evidence, u.summary, u.at = e.EvidenceTaskIDs, e.EvidenceSummary, e.EventTime
	u.text, u.kind = updateText(e.Artifacts)
	c.updates = append(c.updates, u)
}

// query renders the evidence the evolver saw (see the package doc).
func (c *cell) query(u *pendingUpdate, r0 *round) (string, time.Time) {
	var b strings.Builder
	at := u.at
	for i, id := range u.evidence {
		if i > 0 {
			b.WriteByte('\n')
		}
		var o *outcome
		if r0 != nil {
			o = r0.outcomes[id]
		}
		if o == nil {
			fmt.Fprintf(&b, "task %s: no outcome in this cell", id)
			continue
		}
		verdict := "fail"
		if o.success {
			verdict = "pass"
		}
		fmt.Fprintf(&b, "task %s: %s score=%s", id, verdict, strconv.FormatFloat(o.score, 'f', -1, 64))
		if o.input != "" {
			b.WriteString("\ninput: ")
			b.WriteString(o.input)
		}
		at = maxTime(at, o.at)
	}
	if u.summary != "" {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("evidence summary: ")
		b.WriteString(u.summary)
	}
	return b.String(), at
}

// updateText renders the artifacts ("### <kind> <name> (<op>)\n<content>",
// joined by a blank line) and the sample's artifact kind: the first artifact's
// kind (the schema's kind enum has no "mixed"; every artifact's kind stays in
// the text).
func updateText(arts []schemas.Artifact) (text, kind string) {
	var b strings.Builder
	for i, a := range arts {
		if i > 0 {
			b.WriteString("\n\n")
		}
		fmt.Fprintf(&b, "### %s %s (%s)\n%s", a.Kind, a.Name, a.Op, a.Content)
	}
	return b.String(), arts[0].Kind
}

func (p *Pairer) baseReady() bool { return p.base != nil && p.base.finished }

// collect emits what became final after an event of c, sorted.
func (p *Pairer) collect(c *cell) []schemas.Event {
	var out []schemas.Event
	if c.kind == kindBaseline && c.finished && p.base.cellID == c.info.CellID && !p.base.finished {
		p.base.finished = true
		p.base.frozen, p.base.scores = freezeScores(p.base.scores), nil
		p.base.maxTime = c.maxTime
		ids := make([]string, 0, len(p.cells))
		for id := range p.cells {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			out = p.emitReady(p.cells[id], out, true)
		}
	} else {
		out = p.emitReady(c, out, false)
	}
	if len(out) > 1 {
		sortEvents(out)
	}
	return out
}

func (p *Pairer) emitReady(c *cell, out []schemas.Event, force bool) []schemas.Event {
	closed := c.closedThrough()
	needBase := c.kind != kindBaseline && c.kind != kindProduction
	if force || closed != c.handled {
		c.handled = closed
		if !needBase || p.baseReady() {
			var cycles []int32
			for cy, r := range c.rounds {
				if !r.emitted && int64(cy) <= closed {
					cycles = append(cycles, cy)
				}
			}
			sort.Slice(cycles, func(i, j int) bool { return cycles[i] < cycles[j] })
			for _, cy := range cycles {
				r := c.rounds[cy]
				out = append(out, p.metrics(c, r))
				r.emitted = true
				p.stats.RoundMetrics++
			}
		}
	}
	if len(c.updates) > 0 && (c.kind != kindInSitu || p.baseReady()) {
		kept := c.updates[:0]
		for _, u := range c.updates {
			if int64(u.cycle)+1 <= closed {
				out = append(out, p.sample(c, u))
				p.stats.Samples++
				continue
			}
			kept = append(kept, u)
		}
		for i := len(kept); i < len(c.updates); i++ {
			c.updates[i] = nil
		}
		c.updates = kept
	}
	// Evict rounds whose metrics went out and that no pending update reads.
	for cy, r := range c.rounds {
		if !r.emitted || c.needsRound(cy) {
			continue
		}
		// The attempt index keeps the rows (without their round) until the
		// cell finishes, so that a late skill event or judgment is counted as
		// late whatever the other cells did meanwhile.
		for _, rec := range r.attempts {
			rec.round = nil
		}
		delete(c.rounds, cy)
		if c.last == r {
			c.last = nil
		}
	}
	if c.finished && len(c.rounds) == 0 && len(c.updates) == 0 {
		delete(p.cells, c.info.CellID)
		p.gone[c.info.CellID] = struct{}{}
	}
	return out
}

func (c *cell) needsRound(cycle int32) bool {
	for _, u := range c.updates {
		if u.cycle == cycle || u.cycle+1 == cycle {
			return true
		}
	}
	return false
}

func hexID(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "|")))
	return hex.EncodeToString(h[:16])
}

func (p *Pairer) metrics(c *cell, r *round) *schemas.RoundMetrics {
	info := c.info
	rm := &schemas.RoundMetrics{
		CellID: info.CellID, CampaignID: info.CampaignID, Benchmark: info.Benchmark,
		AgentModel: info.AgentModel, EvolverModel: info.EvolverModel, Seed: info.Seed,
		Cycle: r.cycle, NTasks: int32(len(r.order)),
	}
	at := r.maxTime
	if n := len(r.order); n > 0 {
		var passes int
		var sum float64
		for _, id := range r.order {
			o := r.outcomes[id]
			if o.success {
				passes++
			}
			sum += o.score
		}
		rm.PassRate = 100 * float64(passes) / float64(n)
		rm.MeanScore = sum / float64(n)
	}
	if c.kind != kindBaseline && c.kind != kindProduction && p.base != nil {
		var lift meanAcc
		for _, id := range r.order {
			if b, ok := p.base.score(id); ok {
				l := r.outcomes[id].score - b
				lift.add(&l)
			}
		}
		if lift.n > 0 {
			v := 100 * lift.sum / float64(lift.n)
			rm.LiftVsBaseline = &v
		}
		at = maxTime(at, p.base.maxTime)
	}
	var offered, loaded, loadedPass int
	for _, rec := range r.attempts {
		if !rec.offered {
			continue
		}
		offered++
		if rec.loaded {
			loaded++
			if rec.passed {
				loadedPass++
			}
		}
	}
	if offered > 0 {
		v := float64(loaded) / float64(offered)
		rm.SkillLoadRate = &v
	}
	if loaded > 0 {
		v := 100 * float64(loadedPass) / float64(loaded)
		rm.LoadedPassRate = &v
	}
	rm.AdherenceLoaded = r.adhLoad.ptr()
	rm.AdherenceFinal = r.adhFinal.ptr()
	rm.Envelope = schemas.Envelope{
		EventID:   hexID("round", info.CellID, strconv.FormatInt(int64(r.cycle), 10)),
		EventTime: at, Project: p.params.Project, Source: Source,
	}
	return rm
}

// values returns the per-task values of round r solved under version v: lifts
// against the baseline (DesignLift, tasks with a baseline pair only) or scores.
func (p *Pairer) values(r *round, v string, d Design) map[string]float64 {
	if r == nil {
		return map[string]float64{}
	}
	m := make(map[string]float64, len(r.order))
	for _, id := range r.order {
		o := r.outcomes[id]
		if o.version != v {
			continue
		}
		if d == DesignLift {
			b, ok := p.base.score(id)
			if !ok {
				continue
			}
			m[id] = o.score - b
			continue
		}
		m[id] = o.score
	}
	return m
}

func (p *Pairer) sample(c *cell, u *pendingUpdate) *schemas.LabeledSample {
	info := c.info
	d := DesignLift
	switch c.kind {
	case kindSplitTest:
		d = DesignHeldOut
	case kindProduction:
		d = DesignUnpaired
	}
	r0, r1 := c.rounds[u.cycle], c.rounds[u.cycle+1]
	before, after := p.values(r0, u.from, d), p.values(r1, u.to, d)
	query, at := c.query(u, r0)
	if r0 != nil {
		at = maxTime(at, r0.outTime)
	}
	if r1 != nil {
		at = maxTime(at, r1.outTime)
	}
	if d == DesignLift {
		at = maxTime(at, p.base.maxTime)
	}
	var est Estimate
	var label, reason string
	if u.rolledBack {
		est = Estimate{Design: d, NBefore: len(before), PValue: 1}
		label, reason = schemas.LabelNeutral, ReasonRolledBack
	} else {
		est = Effect(before, after, d, p.params.Alpha)
		label = Label(est.Effect, est.PValue, min(est.NBefore, est.NAfter), p.params)
		reason = Reason(est, info.Benchmark, p.params)
	}
	id := hexID("sample", u.updateID, info.CellID)
	evolver := u.evolver
	if evolver == "" {
		evolver = info.EvolverModel
	}
	return &schemas.LabeledSample{
		Envelope: schemas.Envelope{EventID: id, EventTime: at, Project: p.params.Project, Source: Source},
		SampleID: id, UpdateID: u.updateID, CellID: info.CellID, CampaignID: info.CampaignID,
		Benchmark: info.Benchmark, AgentModel: info.AgentModel, EvolverModel: evolver,
		Cycle: u.cycle, Query: query, Update: u.text, ArtifactKind: u.kind,
		Effect: est.Effect, Label: label, NBefore: int32(est.NBefore), NAfter: int32(est.NAfter),
		CILow: est.CILow, CIHigh: est.CIHigh, PValue: est.PValue, Reason: reason,
		HarnessVersion: u.to, HarnessVersionIndex: u.versionIdx,
		Seed: info.Seed, Route: info.Route, ProducedAt: at,
	}
}

func eventOrder(ev schemas.Event) (cellID string, cycle int32, rank int) {
	switch e := ev.(type) {
	case *schemas.RoundMetrics:
		return e.CellID, e.Cycle, 0
	case *schemas.LabeledSample:
		return e.CellID, e.Cycle, 1
	}
	return "", 0, 2
}

// sortEvents orders derived events by cell_id, cycle, type (round metrics
// before samples) and event id.
func sortEvents(evs []schemas.Event) {
	sort.Slice(evs, func(i, j int) bool {
		ci, yi, ri := eventOrder(evs[i])
		cj, yj, rj := eventOrder(evs[j])
		if ci != cj {
			return ci < cj
		}
		if yi != yj {
			return yi < yj
		}
		if ri != rj {
			return ri < rj
		}
		return evs[i].Header().EventID < evs[j].Header().EventID
	})
}
