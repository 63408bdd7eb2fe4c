package score

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/harnessflow/harnessflow/schemas"
)

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

// UpdateText renders the artifacts ("### <kind> <name> (<op>)\n<content>",
// joined by a blank line) and the sample's artifact kind: the first artifact's
// kind (the schema's kind enum has no "mixed"; every artifact's kind stays in
// the text).
func UpdateText(arts []schemas.Artifact) (text, kind string) {
	var b strings.Builder
	for i, a := range arts {
		if i > 0 {
			b.WriteString("\n\n")
		}
		fmt.Fprintf(&b, "### %s %s (%s)\n%s", a.Kind, a.Name, a.Op, a.Content)
	}
	return b.String(), arts[0].Kind
}

// hexID is a derived event's id: the hex of the first 16 bytes of the
// sha256 of parts, each length-prefixed (so that no byte can move from one
// part to the next: a project or cell id holding a separator names no other
// event).
func hexID(parts ...string) string {
	var b []byte
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:16])
}

// derivedID is the id of a derived event of kind ("sample", "round") of
// project: hexID over kind, project and parts, so that two projects using
// the same cell and update ids derive different events. The default project
// (schemas.DefaultProject) keeps the id released before projects were hashed,
// sha256 of kind and parts joined by "|", so that a replay after the upgrade
// adds no duplicate samples; no hexID input starts as that text does (a
// length byte, not a letter), so it is no other project's id.
func derivedID(kind, project string, parts ...string) string {
	if project == schemas.DefaultProject {
		h := sha256.Sum256([]byte(kind + "|" + strings.Join(parts, "|")))
		return hex.EncodeToString(h[:16])
	}
	return hexID(append([]string{kind, project}, parts...)...)
}

// metrics builds the round metrics of round r of c.
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
		EventID:   derivedID("round", p.params.Project, info.CellID, strconv.FormatInt(int64(r.cycle), 10)),
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

// sample builds the labeled sample of update u of c from the rounds before
// (u.cycle) and after (u.cycle+1) it.
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
	id := derivedID("sample", p.params.Project, u.updateID, info.CellID)
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
