package sim

import (
	"math"
	"slices"

	"github.com/harnessflow/harnessflow/schemas"
)

// CellFigures are one cell's scores (docs/metrics.md "Pass rate").
type CellFigures struct {
	CampaignID, CellID, Benchmark, Agent, Evolver, Route string
	Seed                                                 int32
	// NTasks counts tasks with an attempt-1 row.
	NTasks int
	// PassRate is the strict reading: 100 × mean success of attempt 1 (an
	// attempt with status != ok is a failure).
	PassRate float64
	// PassRateFinal is the retry reading: 100 × mean success of final rows.
	PassRateFinal float64
	// MeanScore is 100 × mean score of attempt 1 (fractional reading; an
	// attempt with status != ok scores 0).
	MeanScore float64
}

// PairKey identifies an evolved cell's pairing with its baseline.
type PairKey struct {
	Benchmark, Agent, Evolver string
	Seed                      int32
}

// BenchAgent keys per-agent figures within a benchmark.
type BenchAgent struct{ Benchmark, Agent string }

// BenchEvolver keys per-evolver figures within a benchmark.
type BenchEvolver struct{ Benchmark, Evolver string }

// Benefit is an agent's harness-benefit figures over the anchor evolvers.
type Benefit struct {
	// MaxPP is Δbenefit: the max of Δ over anchor evolvers (pp), averaged
	// over seeds; nil when no anchor evolver's cell pairs.
	MaxPP *float64
	// BestEvolver is the evolver of the max (first seed's, ties: first in
	// sorted order).
	BestEvolver string
	// MeanPP is the mean of Δ over anchor evolvers (pp).
	MeanPP *float64
	// Below counts anchor-evolver cells below their baseline (Δ < 0).
	Below int
}

// Activation are an agent's skill-activation figures (docs/metrics.md).
type Activation struct {
	// Attempts with skills_available > 0.
	Offered int
	// SLR is the share of offered attempts with a load_skill "loaded" event;
	// nil when none was offered.
	SLR *float64
	// LPR is the pass rate (percent) of skill-loaded attempts; nil if none.
	LPR *float64
	// HFR is the mean over judged (cell, task, skill) of F/(F+VC+VO+RU),
	// zero denominators skipped; nil when none.
	HFR *float64
	// LoadSuccessRate is the tutorial's 技能加载率: loaded / attempted
	// load_skill calls; nil when none was attempted.
	LoadSuccessRate *float64
}

// Adherence are an agent's phase means, drift and decay (docs/metrics.md).
type Adherence struct {
	HarnessLoaded, FirstAction, Midpoint, PreFinal, FinalValidation *float64
	// Drift = FinalValidation − HarnessLoaded.
	Drift *float64
	// Decay = (HarnessLoaded − FinalValidation) / HarnessLoaded.
	Decay *float64
}

// ExpectedFigures are docs/metrics.md's figures computed directly from events.
type ExpectedFigures struct {
	Campaign       string
	AnchorAgents   []string
	AnchorEvolvers []string
	// Cells by cell id.
	Cells map[string]CellFigures
	// Delta is Δ(f,e) = J(f,e) − M_base(f) in pp, strict reading.
	Delta map[PairKey]float64
	// Update is Δupdate per evolver: the mean of Δ over anchor agents,
	// averaged over seeds; nil unless every anchor agent's cell pairs.
	Update map[BenchEvolver]*float64
	// Benefit per agent, over anchor evolvers.
	Benefit map[BenchAgent]Benefit
	// Activation and Adherence per agent (all of the agent's cells).
	Activation map[BenchAgent]Activation
	Adherence  map[BenchAgent]Adherence
	// Updates counts harness_update events with at least one artifact.
	Updates int
}

// Expected computes ExpectedFigures from events (any order; duplicates by
// event id count once). It uses the first campaign_declared's anchors.
func Expected(events []schemas.Event) ExpectedFigures {
	x := ExpectedFigures{Update: map[BenchEvolver]*float64{}, Benefit: map[BenchAgent]Benefit{}}
	in := x.collect(events)
	x.Cells = cellFigures(in.cells, in.attempts)
	x.Delta = pairDeltas(x.Cells)
	// Per seed, then averaged over seeds.
	g := gainKeysOf(x.Delta)
	for bm := range g.benches {
		for ev := range g.evolvers {
			x.Update[BenchEvolver{bm, ev}] = x.update(bm, ev, g.seeds)
		}
		for a := range g.agents {
			x.Benefit[BenchAgent{bm, a}] = x.benefit(bm, a, g.seeds)
		}
	}
	x.Activation = in.activation()
	x.Adherence = in.adherence()
	return x
}

// expectedEvents are the events Expected reads, deduplicated by event id and
// grouped by type.
type expectedEvents struct {
	cells     map[string]*schemas.CellStarted
	attempts  []*schemas.TaskAttempt
	skillEvs  []*schemas.SkillEvent
	judgments []*schemas.AdherenceJudgment
}

// collect deduplicates events by event id (events without one are all
// kept), takes the campaign and anchors from the first campaign_declared,
// counts harness updates with artifacts into x, and groups the rest.
func (x *ExpectedFigures) collect(events []schemas.Event) *expectedEvents {
	in := &expectedEvents{cells: map[string]*schemas.CellStarted{}}
	seen := map[string]bool{}
	for _, ev := range events {
		id := ev.Header().EventID
		if id != "" {
			if seen[id] {
				continue
			}
			seen[id] = true
		}
		switch e := ev.(type) {
		case *schemas.CampaignDeclared:
			if x.Campaign == "" {
				x.Campaign, x.AnchorAgents, x.AnchorEvolvers = e.CampaignID, e.AnchorAgents, e.AnchorEvolvers
			}
		case *schemas.CellStarted:
			in.cells[e.CellID] = e
		case *schemas.TaskAttempt:
			in.attempts = append(in.attempts, e)
		case *schemas.SkillEvent:
			in.skillEvs = append(in.skillEvs, e)
		case *schemas.AdherenceJudgment:
			in.judgments = append(in.judgments, e)
		case *schemas.HarnessUpdate:
			if len(e.Artifacts) > 0 {
				x.Updates++
			}
		}
	}
	return in
}

// cellTally counts one cell's attempt-1 rows (n, pass, their score sum)
// and final rows (fn, fpass).
type cellTally struct {
	n, pass, fn, fpass int
	score              float64
}

// cellFigures are the pass rates of every started cell: an attempt passes
// when it succeeded with status ok; an attempt with another status scores 0.
func cellFigures(cells map[string]*schemas.CellStarted, attempts []*schemas.TaskAttempt) map[string]CellFigures {
	per := map[string]*cellTally{}
	for _, a := range attempts {
		g := per[a.CellID]
		if g == nil {
			g = &cellTally{}
			per[a.CellID] = g
		}
		ok := a.Success && a.Status == schemas.StatusOK
		if a.Attempt == 1 {
			g.n++
			if a.Status == schemas.StatusOK {
				g.score += a.Score
			}
			if ok {
				g.pass++
			}
		}
		if a.Final {
			g.fn++
			if ok {
				g.fpass++
			}
		}
	}
	out := map[string]CellFigures{}
	for id, c := range cells {
		g := per[id]
		if g == nil {
			g = &cellTally{}
		}
		f := CellFigures{CampaignID: c.CampaignID, CellID: id, Benchmark: c.Benchmark, Agent: c.AgentModel,
			Evolver: c.EvolverModel, Route: c.Route, Seed: c.Seed, NTasks: g.n}
		if g.n > 0 {
			f.PassRate = 100 * float64(g.pass) / float64(g.n)
			f.MeanScore = 100 * g.score / float64(g.n)
		}
		if g.fn > 0 {
			f.PassRateFinal = 100 * float64(g.fpass) / float64(g.fn)
		}
		out[id] = f
	}
	return out
}

// pairDeltas are the pairwise gains Δ(f,e) = J(f,e) − M_base(f): every
// evolved cell against the baseline cell of its benchmark, agent and seed.
func pairDeltas(cells map[string]CellFigures) map[PairKey]float64 {
	base := map[PairKey]float64{}
	for _, f := range cells {
		if f.Evolver == "" {
			base[PairKey{f.Benchmark, f.Agent, "", f.Seed}] = f.PassRate
		}
	}
	delta := map[PairKey]float64{}
	for _, f := range cells {
		if f.Evolver == "" {
			continue
		}
		if b, ok := base[PairKey{f.Benchmark, f.Agent, "", f.Seed}]; ok {
			delta[PairKey{f.Benchmark, f.Agent, f.Evolver, f.Seed}] = f.PassRate - b
		}
	}
	return delta
}

// gainKeys are the benchmarks, agents, evolvers and seeds (sorted) that
// occur in the pairwise gains.
type gainKeys struct {
	benches, agents, evolvers map[string]bool
	seeds                     []int32
}

// gainKeysOf collects the keys of delta.
func gainKeysOf(delta map[PairKey]float64) gainKeys {
	g := gainKeys{benches: map[string]bool{}, agents: map[string]bool{}, evolvers: map[string]bool{}}
	seeds := map[int32]bool{}
	for k := range delta {
		seeds[k.Seed] = true
		g.benches[k.Benchmark], g.agents[k.Agent], g.evolvers[k.Evolver] = true, true, true
	}
	for s := range seeds {
		g.seeds = append(g.seeds, s)
	}
	slices.Sort(g.seeds)
	return g
}

// update is Δupdate of evolver ev on benchmark bm: for each seed where every
// anchor agent's cell pairs, the mean of Δ over the anchor agents; averaged
// over those seeds. It is nil when no seed qualifies.
func (x *ExpectedFigures) update(bm, ev string, seeds []int32) *float64 {
	var sum float64
	var n int
	for _, s := range seeds {
		var t float64
		all := len(x.AnchorAgents) > 0
		for _, a := range x.AnchorAgents {
			d, ok := x.Delta[PairKey{bm, a, ev, s}]
			if !ok {
				all = false
				break
			}
			t += d
		}
		if all {
			sum += t / float64(len(x.AnchorAgents))
			n++
		}
	}
	if n == 0 {
		return nil
	}
	v := sum / float64(n)
	return &v
}

// benefit is agent's harness benefit on benchmark bm: per seed the max and
// mean of Δ over the anchor evolvers that pair (sorted, so that ties go to
// the first), averaged over seeds.
func (x *ExpectedFigures) benefit(bm, agent string, seeds []int32) Benefit {
	var b Benefit
	var maxSum, meanSum float64
	var n int
	anchors := slices.Clone(x.AnchorEvolvers)
	slices.Sort(anchors)
	for _, s := range seeds {
		best, bestE, sum, m := math.Inf(-1), "", 0.0, 0
		for _, e := range anchors {
			d, ok := x.Delta[PairKey{bm, agent, e, s}]
			if !ok {
				continue
			}
			if d > best {
				best, bestE = d, e
			}
			sum += d
			m++
			if d < 0 {
				b.Below++
			}
		}
		if m > 0 {
			maxSum += best
			meanSum += sum / float64(m)
			n++
			if b.BestEvolver == "" {
				b.BestEvolver = bestE
			}
		}
	}
	if n > 0 {
		mx, mn := maxSum/float64(n), meanSum/float64(n)
		b.MaxPP, b.MeanPP = &mx, &mn
	}
	return b
}

// benchAgent is the benchmark and agent of a started cell; false for a cell
// without cell_started.
func (in *expectedEvents) benchAgent(cellID string) (BenchAgent, bool) {
	c, ok := in.cells[cellID]
	if !ok {
		return BenchAgent{}, false
	}
	return BenchAgent{c.Benchmark, c.AgentModel}, true
}

// attemptKey identifies an attempt across event types.
type attemptKey struct {
	cell, task string
	att        int32
}

// skillLoads counts load_skill calls (calls) and loaded ones (ok) per agent,
// and marks the attempts that loaded a skill.
func (in *expectedEvents) skillLoads() (calls, ok map[BenchAgent]int, loaded map[attemptKey]bool) {
	calls, ok, loaded = map[BenchAgent]int{}, map[BenchAgent]int{}, map[attemptKey]bool{}
	for _, s := range in.skillEvs {
		if s.Tool != schemas.ToolLoadSkill {
			continue
		}
		k, started := in.benchAgent(s.CellID)
		if !started {
			continue
		}
		calls[k]++
		if s.Status == schemas.SkillLoaded {
			ok[k]++
			loaded[attemptKey{s.CellID, s.TaskID, s.Attempt}] = true
		}
	}
	return calls, ok, loaded
}

// offerTally counts an agent's attempts offered skills, those that loaded
// one, and those of them that passed.
type offerTally struct{ offered, loaded, loadedPass int }

// offers tallies the attempts with skills available per agent.
func (in *expectedEvents) offers(loaded map[attemptKey]bool) map[BenchAgent]*offerTally {
	acts := map[BenchAgent]*offerTally{}
	for _, a := range in.attempts {
		k, ok := in.benchAgent(a.CellID)
		if !ok || a.SkillsAvailable <= 0 {
			continue
		}
		g := acts[k]
		if g == nil {
			g = &offerTally{}
			acts[k] = g
		}
		g.offered++
		if loaded[attemptKey{a.CellID, a.TaskID, a.Attempt}] {
			g.loaded++
			if a.Success && a.Status == schemas.StatusOK {
				g.loadedPass++
			}
		}
	}
	return acts
}

// meanTally is a sum and its count.
type meanTally struct {
	sum float64
	n   int
}

// hfrTallies sums F/(F+VC+VO+RU) of the judgments per agent, zero
// denominators skipped.
func (in *expectedEvents) hfrTallies() map[BenchAgent]*meanTally {
	hfrs := map[BenchAgent]*meanTally{}
	for _, j := range in.judgments {
		k, ok := in.benchAgent(j.CellID)
		if !ok {
			continue
		}
		if den := j.Followed + j.ViolatedCommission + j.ViolatedOmission + j.RequiredUnobserved; den > 0 {
			h := hfrs[k]
			if h == nil {
				h = &meanTally{}
				hfrs[k] = h
			}
			h.sum += float64(j.Followed) / float64(den)
			h.n++
		}
	}
	return hfrs
}

// activation are the skill-activation figures of every agent with an
// offered attempt, a load_skill call or a judged skill.
func (in *expectedEvents) activation() map[BenchAgent]Activation {
	loadCalls, loadOK, loaded := in.skillLoads()
	acts := in.offers(loaded)
	hfrs := in.hfrTallies()
	keys := map[BenchAgent]bool{}
	for k := range acts {
		keys[k] = true
	}
	for k := range loadCalls {
		keys[k] = true
	}
	for k := range hfrs {
		keys[k] = true
	}
	out := map[BenchAgent]Activation{}
	for k := range keys {
		var a Activation
		if g := acts[k]; g != nil {
			a.Offered = g.offered
			if g.offered > 0 {
				a.SLR = ptr(float64(g.loaded) / float64(g.offered))
			}
			if g.loaded > 0 {
				a.LPR = ptr(100 * float64(g.loadedPass) / float64(g.loaded))
			}
		}
		if h := hfrs[k]; h != nil && h.n > 0 {
			a.HFR = ptr(h.sum / float64(h.n))
		}
		if loadCalls[k] > 0 {
			a.LoadSuccessRate = ptr(float64(loadOK[k]) / float64(loadCalls[k]))
		}
		out[k] = a
	}
	return out
}

// phaseTally sums the five adherence phases (harness loaded, first action,
// midpoint, pre-final, final validation) and counts the judgments giving each.
type phaseTally struct {
	sum [5]float64
	n   [5]int
}

// adherence are the phase means, drift and decay of every agent with a
// judgment.
func (in *expectedEvents) adherence() map[BenchAgent]Adherence {
	phs := map[BenchAgent]*phaseTally{}
	for _, j := range in.judgments {
		k, ok := in.benchAgent(j.CellID)
		if !ok {
			continue
		}
		p := phs[k]
		if p == nil {
			p = &phaseTally{}
			phs[k] = p
		}
		for i, v := range []*float64{j.HarnessLoaded, j.FirstAction, j.Midpoint, j.PreFinal, j.FinalValidation} {
			if v != nil {
				p.sum[i] += *v
				p.n[i]++
			}
		}
	}
	out := map[BenchAgent]Adherence{}
	for k, p := range phs {
		var ad Adherence
		phases := []**float64{&ad.HarnessLoaded, &ad.FirstAction, &ad.Midpoint, &ad.PreFinal, &ad.FinalValidation}
		for i := range phases {
			if p.n[i] > 0 {
				*phases[i] = ptr(p.sum[i] / float64(p.n[i]))
			}
		}
		if ad.HarnessLoaded != nil && ad.FinalValidation != nil {
			ad.Drift = ptr(*ad.FinalValidation - *ad.HarnessLoaded)
			if *ad.HarnessLoaded != 0 {
				ad.Decay = ptr((*ad.HarnessLoaded - *ad.FinalValidation) / *ad.HarnessLoaded)
			}
		}
		out[k] = ad
	}
	return out
}

// ptr is a pointer to a copy of v.
func ptr(v float64) *float64 { return &v }
