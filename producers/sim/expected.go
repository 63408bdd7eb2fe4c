package sim

import (
	"math"
	"slices"

	"github.com/harnessflow/harnessflow/schemas"
)

// CellFigures are one cell's scores (METRICS.md "Pass rate").
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

// Activation are an agent's skill-activation figures (METRICS.md).
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

// Adherence are an agent's phase means, drift and decay (METRICS.md).
type Adherence struct {
	HarnessLoaded, FirstAction, Midpoint, PreFinal, FinalValidation *float64
	// Drift = FinalValidation − HarnessLoaded.
	Drift *float64
	// Decay = (HarnessLoaded − FinalValidation) / HarnessLoaded.
	Decay *float64
}

// ExpectedFigures are METRICS.md's figures computed directly from events.
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
	x := ExpectedFigures{Cells: map[string]CellFigures{}, Delta: map[PairKey]float64{}, Update: map[BenchEvolver]*float64{},
		Benefit: map[BenchAgent]Benefit{}, Activation: map[BenchAgent]Activation{}, Adherence: map[BenchAgent]Adherence{}}
	seen := map[string]bool{}
	cells := map[string]*schemas.CellStarted{}
	type agg struct {
		n, pass, fn, fpass int
		score              float64
	}
	per := map[string]*agg{}
	type attKey struct {
		cell, task string
		att        int32
	}
	var attempts []*schemas.TaskAttempt
	loadedAtt := map[attKey]bool{}
	loadCalls, loadOK := map[BenchAgent]int{}, map[BenchAgent]int{}
	var skillEvs []*schemas.SkillEvent
	var judgments []*schemas.AdherenceJudgment
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
			cells[e.CellID] = e
		case *schemas.TaskAttempt:
			attempts = append(attempts, e)
		case *schemas.SkillEvent:
			skillEvs = append(skillEvs, e)
		case *schemas.AdherenceJudgment:
			judgments = append(judgments, e)
		case *schemas.HarnessUpdate:
			if len(e.Artifacts) > 0 {
				x.Updates++
			}
		}
	}
	for _, a := range attempts {
		g := per[a.CellID]
		if g == nil {
			g = &agg{}
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
	for id, c := range cells {
		g := per[id]
		if g == nil {
			g = &agg{}
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
		x.Cells[id] = f
	}
	// Pairwise gains.
	base := map[PairKey]float64{}
	for _, f := range x.Cells {
		if f.Evolver == "" {
			base[PairKey{f.Benchmark, f.Agent, "", f.Seed}] = f.PassRate
		}
	}
	for _, f := range x.Cells {
		if f.Evolver == "" {
			continue
		}
		if b, ok := base[PairKey{f.Benchmark, f.Agent, "", f.Seed}]; ok {
			x.Delta[PairKey{f.Benchmark, f.Agent, f.Evolver, f.Seed}] = f.PassRate - b
		}
	}
	// Per seed, then averaged over seeds.
	seeds := map[int32]bool{}
	benches, agentsSet, evolversSet := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for k := range x.Delta {
		seeds[k.Seed] = true
		benches[k.Benchmark], agentsSet[k.Agent], evolversSet[k.Evolver] = true, true, true
	}
	for bm := range benches {
		for ev := range evolversSet {
			var sum float64
			var n int
			for s := range seeds {
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
			if n > 0 {
				v := sum / float64(n)
				x.Update[BenchEvolver{bm, ev}] = &v
			} else {
				x.Update[BenchEvolver{bm, ev}] = nil
			}
		}
		for a := range agentsSet {
			var b Benefit
			var maxSum, meanSum float64
			var n int
			seedList := make([]int32, 0, len(seeds))
			for s := range seeds {
				seedList = append(seedList, s)
			}
			slices.Sort(seedList)
			for _, s := range seedList {
				best, bestE, sum, m := math.Inf(-1), "", 0.0, 0
				anchors := slices.Clone(x.AnchorEvolvers)
				slices.Sort(anchors)
				for _, e := range anchors {
					d, ok := x.Delta[PairKey{bm, a, e, s}]
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
			x.Benefit[BenchAgent{bm, a}] = b
		}
	}
	// Activation.
	cellKey := func(cellID string) (BenchAgent, bool) {
		c, ok := cells[cellID]
		if !ok {
			return BenchAgent{}, false
		}
		return BenchAgent{c.Benchmark, c.AgentModel}, true
	}
	for _, s := range skillEvs {
		if s.Tool != schemas.ToolLoadSkill {
			continue
		}
		k, ok := cellKey(s.CellID)
		if !ok {
			continue
		}
		loadCalls[k]++
		if s.Status == schemas.SkillLoaded {
			loadOK[k]++
			loadedAtt[attKey{s.CellID, s.TaskID, s.Attempt}] = true
		}
	}
	type act struct{ offered, loaded, loadedPass int }
	acts := map[BenchAgent]*act{}
	for _, a := range attempts {
		k, ok := cellKey(a.CellID)
		if !ok || a.SkillsAvailable <= 0 {
			continue
		}
		g := acts[k]
		if g == nil {
			g = &act{}
			acts[k] = g
		}
		g.offered++
		if loadedAtt[attKey{a.CellID, a.TaskID, a.Attempt}] {
			g.loaded++
			if a.Success && a.Status == schemas.StatusOK {
				g.loadedPass++
			}
		}
	}
	type hfr struct {
		sum float64
		n   int
	}
	hfrs := map[BenchAgent]*hfr{}
	type phases struct {
		sum [5]float64
		n   [5]int
	}
	phs := map[BenchAgent]*phases{}
	for _, j := range judgments {
		k, ok := cellKey(j.CellID)
		if !ok {
			continue
		}
		if den := j.Followed + j.ViolatedCommission + j.ViolatedOmission + j.RequiredUnobserved; den > 0 {
			h := hfrs[k]
			if h == nil {
				h = &hfr{}
				hfrs[k] = h
			}
			h.sum += float64(j.Followed) / float64(den)
			h.n++
		}
		p := phs[k]
		if p == nil {
			p = &phases{}
			phs[k] = p
		}
		for i, v := range []*float64{j.HarnessLoaded, j.FirstAction, j.Midpoint, j.PreFinal, j.FinalValidation} {
			if v != nil {
				p.sum[i] += *v
				p.n[i]++
			}
		}
	}
	ptr := func(v float64) *float64 { return &v }
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
		x.Activation[k] = a
	}
	for k, p := range phs {
		var ad Adherence
		out := []**float64{&ad.HarnessLoaded, &ad.FirstAction, &ad.Midpoint, &ad.PreFinal, &ad.FinalValidation}
		for i := range out {
			if p.n[i] > 0 {
				*out[i] = ptr(p.sum[i] / float64(p.n[i]))
			}
		}
		if ad.HarnessLoaded != nil && ad.FinalValidation != nil {
			ad.Drift = ptr(*ad.FinalValidation - *ad.HarnessLoaded)
			if *ad.HarnessLoaded != 0 {
				ad.Decay = ptr((*ad.HarnessLoaded - *ad.FinalValidation) / *ad.HarnessLoaded)
			}
		}
		x.Adherence[k] = ad
	}
	return x
}
