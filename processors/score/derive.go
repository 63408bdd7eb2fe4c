package score

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/harnessflow/harnessflow/schemas"
)

// query renders the evidence the evolver saw (see the package doc): each
// evidence task's attempt-1 winner in the update's own round.
func (c *cell) query(u *pendingUpdate) (string, time.Time) {
	var b strings.Builder
	at := msTime(u.verMs)
	for i, ref := range u.evidence {
		if i > 0 {
			b.WriteByte('\n')
		}
		id := c.arena.raw(ref)
		o, oi := c.attempt(id, u.cycle, 1)
		if o == nil {
			fmt.Fprintf(&b, "task %s: no outcome in this cell", id)
			continue
		}
		verdict := "fail"
		if o.success() {
			verdict = "pass"
		}
		fmt.Fprintf(&b, "task %s: %s score=%s", id, verdict, strconv.FormatFloat(o.score, 'f', -1, 64))
		if in, ok := c.inputs[oi]; ok {
			b.WriteString("\ninput: ")
			b.Write(c.arena.raw(in))
		}
		at = maxTime(at, msTime(o.ms))
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

// metrics computes the round metrics of round r of c from the winners of
// its attempts' natural keys and the skill loads and judgments attached to
// them, summed in (task_id, attempt) order.
func (p *Pairer) metrics(c *cell, r *round) *schemas.RoundMetrics {
	info := c.info
	rm := &schemas.RoundMetrics{
		CellID: info.CellID, CampaignID: info.CampaignID, Benchmark: info.Benchmark,
		AgentModel: info.AgentModel, EvolverModel: info.EvolverModel, Seed: info.Seed,
		Cycle: r.cycle,
	}
	lifted := c.kind != kindBaseline && c.kind != kindProduction && p.base != nil
	var atMs int64
	hasAt := false
	seeAt := func(ms int64) {
		if !hasAt || ms > atMs {
			atMs, hasAt = ms, true
		}
	}
	var n, passes, offered, loaded, loadedPass int
	var sum float64
	var lift, adhLoad, adhFinal meanAcc
	var sel []*judgRec
	for _, si := range c.sorted(r) {
		rec := c.rec(si, r.cycle)
		sl := &c.slots[si]
		seeAt(rec.ms)
		if sl.attempt == 1 {
			n++
			if rec.success() {
				passes++
			}
			sum += rec.score
			if lifted {
				if b, ok := p.base.score(c.taskOf(si)); ok {
					lift.add(rec.score - b)
				}
			}
		}
		multi := c.multi > 0 && c.multiCycle(si)
		isLoaded := false
		for li := sl.load; li != 0; li = c.loads[li-1].next {
			lr := &c.loads[li-1]
			if multi {
				if cy, _ := c.owner(si, lr.ms); cy != rec.cycle {
					continue
				}
			}
			seeAt(lr.ms)
			isLoaded = isLoaded || lr.sl&loadLoaded != 0
		}
		if rec.offered() {
			offered++
			if isLoaded {
				loaded++
				if rec.success() {
					loadedPass++
				}
			}
		}
		if sl.judg == 0 {
			continue
		}
		sel = sel[:0]
		for ji := sl.judg; ji != 0; ji = c.judgs[ji-1].next {
			j := &c.judgs[ji-1]
			if multi {
				if cy, _ := c.owner(si, j.ms); cy != rec.cycle {
					continue
				}
			}
			sel = append(sel, j)
		}
		if len(sel) > 1 {
			sort.Slice(sel, func(a, b int) bool {
				pa, pb := c.pairs.key(int(sel[a].pair())), c.pairs.key(int(sel[b].pair()))
				if sa, sb := c.names.str(pa.skill), c.names.str(pb.skill); sa != sb {
					return sa < sb
				}
				return c.names.str(pa.judge) < c.names.str(pb.judge)
			})
		}
		for _, j := range sel {
			seeAt(j.ms)
			if j.sf&judgLoaded != 0 {
				adhLoad.add(j.loaded)
			}
			if j.sf&judgFin != 0 {
				adhFinal.add(j.fin)
			}
		}
	}
	var at time.Time
	if hasAt {
		at = msTime(atMs)
	}
	rm.NTasks = int32(n)
	if n > 0 {
		rm.PassRate = 100 * float64(passes) / float64(n)
		rm.MeanScore = sum / float64(n)
	}
	if lifted {
		if lift.n > 0 {
			v := 100 * lift.sum / float64(lift.n)
			rm.LiftVsBaseline = &v
		}
		at = maxTime(at, p.base.maxTime())
	}
	if offered > 0 {
		v := float64(loaded) / float64(offered)
		rm.SkillLoadRate = &v
	}
	if loaded > 0 {
		v := 100 * float64(loadedPass) / float64(loaded)
		rm.LoadedPassRate = &v
	}
	rm.AdherenceLoaded = adhLoad.ptr()
	rm.AdherenceFinal = adhFinal.ptr()
	rm.Envelope = schemas.Envelope{
		EventID:   derivedID("round", p.params.Project, info.CellID, strconv.FormatInt(int64(r.cycle), 10)),
		EventTime: at, Project: p.params.Project, Source: Source,
	}
	return rm
}

// values returns the per-task values of round r of c solved under version
// v (attempt-1 winners): lifts against the baseline (DesignLift, tasks with
// a baseline pair only) or scores; and the latest event time among them.
func (p *Pairer) values(c *cell, r *round, vi uint32, d Design) (map[string]float64, time.Time) {
	var at time.Time
	if r == nil {
		return map[string]float64{}, at
	}
	m := make(map[string]float64, len(r.keys))
	for _, si := range r.keys {
		if c.slots[si].attempt != 1 {
			continue
		}
		o := c.rec(si, r.cycle)
		at = maxTime(at, msTime(o.ms))
		if o.version() != vi {
			continue
		}
		task := c.taskOf(si)
		if d == DesignLift {
			b, ok := p.base.score(task)
			if !ok {
				continue
			}
			m[string(task)] = o.score - b
			continue
		}
		m[string(task)] = o.score
	}
	return m, at
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
	rb, _ := c.rounds.get(u.cycle)
	ra, _ := c.rounds.get(u.cycle + 1)
	before, t0 := p.values(c, rb, u.from, d)
	after, t1 := p.values(c, ra, u.to, d)
	query, at := c.query(u)
	at = maxTime(maxTime(at, t0), t1)
	if d == DesignLift {
		at = maxTime(at, p.base.maxTime())
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
	evolver := c.names.str(u.evolver)
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
		HarnessVersion: c.names.str(u.to), HarnessVersionIndex: u.versionIdx,
		Seed: info.Seed, Route: info.Route, ProducedAt: at,
	}
}
