package score

import (
	"slices"

	"github.com/harnessflow/harnessflow/schemas"
)

// attempt records a task_attempt under its natural key (task_id, cycle,
// attempt) in c: it becomes the key's winner when it beats the current one
// by (event time in ms, event_id), and its round is computed again if it
// was already emitted.
func (p *Pairer) attempt(c *cell, e *schemas.TaskAttempt) {
	c.bump(e.Cycle)
	s := c.slotOf(e.TaskID, e.Attempt)
	ms := e.EventTime.UnixMilli()
	head := c.slots[s].att
	prev := int32(0)
	for i := head; i != 0; i = c.recs[i-1].next {
		if c.recs[i-1].cycle == e.Cycle {
			prev = i
			break
		}
	}
	if prev != 0 {
		p.stats.Superseded++
		if old := &c.recs[prev-1]; !c.beats(ms, e.EventID, old.ms, old.id, s) {
			return
		}
	}
	if int64(e.Cycle) <= c.closedThrough() {
		p.stats.Late++
	}
	hv := e.HarnessVersion
	if hv == "" {
		// The cell's current version when the attempt arrives in the
		// cell's order (h0, then the to_version of the last accepted update
		// that was not rolled back): what the validator admits it under.
		hv = c.tip
	}
	rec := attemptRec{ms: ms, id: c.putID(e.EventID, e.TaskID), vf: c.names.id(hv) & recVersion, cycle: e.Cycle}
	if e.SkillsAvailable > 0 {
		rec.vf |= recOffered
	}
	if e.Status == schemas.StatusOK {
		rec.score = e.Score
		if e.Success {
			rec.vf |= recSuccess
		}
	}
	at := prev - 1
	if prev != 0 {
		rec.next = c.recs[at].next
		c.recs[at] = rec
	} else {
		rec.next = head
		c.recs = append(c.recs, rec)
		at = int32(len(c.recs) - 1)
		c.slots[s].att = at + 1
		r := c.round(e.Cycle)
		r.keys = append(r.keys, s)
		if head != 0 && c.recs[head-1].next == 0 {
			c.multi++
		}
	}
	if e.TaskInput != "" {
		if c.inputs == nil {
			c.inputs = map[int32]sref{}
		}
		c.inputs[at] = c.arena.put(e.TaskInput)
	} else if c.inputs != nil {
		delete(c.inputs, at)
	}
	c.touch(e.Cycle)
	if c.multi > 0 && c.multiCycle(s) {
		// The skill events and judgments of the slot may belong to another
		// of its attempts now.
		c.touchSlot(s)
	}
	if e.Attempt == 1 && c.kind == kindBaseline && p.base != nil && p.base.cell == c && p.base.finished {
		p.baseChanged()
	}
}

// skill records a load_skill skill_event under its natural key (task_id,
// attempt, turn, skill_name; the tool is load_skill) in c. Other tools are
// not an input of any output.
func (p *Pairer) skill(c *cell, e *schemas.SkillEvent) {
	if e.Tool != schemas.ToolLoadSkill {
		return
	}
	s := c.slotOf(e.TaskID, e.Attempt)
	skill := c.names.id(e.SkillName) & loadSkill
	ms := e.EventTime.UnixMilli()
	rec := loadRec{ms: ms, sl: skill, turn: e.Turn}
	if e.Status == schemas.SkillLoaded {
		rec.sl |= loadLoaded
	}
	for i := c.slots[s].load; i != 0; i = c.loads[i-1].next {
		prev := &c.loads[i-1]
		if prev.turn == e.Turn && prev.sl&loadSkill == skill {
			p.stats.Superseded++
			if !c.beats(ms, e.EventID, prev.ms, prev.id, s) {
				return
			}
			rec.id, rec.next = c.putID(e.EventID, e.TaskID), prev.next
			*prev = rec
			p.attached(c, s, ms)
			return
		}
	}
	rec.id, rec.next = c.putID(e.EventID, e.TaskID), c.slots[s].load
	c.loads = append(c.loads, rec)
	c.slots[s].load = int32(len(c.loads))
	p.attached(c, s, ms)
}

// judgment records an adherence_judgment under its natural key (task_id,
// attempt, skill_name, judge_model) in c.
func (p *Pairer) judgment(c *cell, e *schemas.AdherenceJudgment) {
	s := c.slotOf(e.TaskID, e.Attempt)
	pair := c.pairOf(e.SkillName, e.JudgeModel)
	ms := e.EventTime.UnixMilli()
	rec := judgRec{ms: ms, sf: pair & judgPair}
	if e.HarnessLoaded != nil {
		rec.loaded = *e.HarnessLoaded
		rec.sf |= judgLoaded
	}
	if e.FinalValidation != nil {
		rec.fin = *e.FinalValidation
		rec.sf |= judgFin
	}
	for i := c.slots[s].judg; i != 0; i = c.judgs[i-1].next {
		prev := &c.judgs[i-1]
		if prev.pair() == pair {
			p.stats.Superseded++
			if !c.beats(ms, e.EventID, prev.ms, prev.id, s) {
				return
			}
			rec.id, rec.next = c.putID(e.EventID, e.TaskID), prev.next
			*prev = rec
			p.attached(c, s, ms)
			return
		}
	}
	rec.id, rec.next = c.putID(e.EventID, e.TaskID), c.slots[s].judg
	c.judgs = append(c.judgs, rec)
	c.slots[s].judg = int32(len(c.judgs))
	p.attached(c, s, ms)
}

// attached notes a skill load or judgment of slot s: its attempt's round
// is computed again if it was emitted. One whose attempt has not arrived
// waits for it (counted once the attempt arrives; never when it does not).
func (p *Pairer) attached(c *cell, s int32, at int64) {
	cy, ok := c.owner(s, at)
	if !ok {
		return
	}
	if int64(cy) <= c.closedThrough() {
		p.stats.Late++
	}
	if c.multiCycle(s) {
		// A re-send may move it from one of the slot's attempts to another.
		c.touchSlot(s)
		return
	}
	c.touch(cy)
}

// update advances c's version chain and keeps the update under its natural
// key (update_id) for its sample, unless it yields none (see Stats).
func (p *Pairer) update(c *cell, e *schemas.HarnessUpdate) {
	// An update does not advance the cell's rounds: only attempts (and the
	// finish) close them. Updates travel on their own topic and can overtake
	// the cell's earlier attempts, while an attempt never overtakes the update
	// whose version it runs (the processors hold it until that update).
	ms := e.EventTime.UnixMilli()
	if prev, _ := c.byUpdate.get(e.UpdateID); prev != nil {
		// A re-send under a new event id: one update whatever the arrival
		// order. Its fields are the winner's (the greatest version); its
		// artifacts those of the greatest copy that has any, so that it
		// yields a sample when any copy has artifacts, in any order.
		p.stats.Superseded++
		changed := false
		won := c.beats(ms, e.EventID, prev.verMs, prev.verID, -1)
		if won {
			p.fill(c, prev, e)
			changed = true
		}
		if len(e.Artifacts) > 0 && (!prev.hasArts || c.beats(ms, e.EventID, prev.artMs, prev.artID, -1)) {
			prev.text, prev.kind = UpdateText(e.Artifacts)
			prev.artMs, prev.artID = ms, prev.verID
			if !won {
				prev.artID = c.arena.putID(e.EventID)
			}
			changed = true
			if !prev.hasArts {
				prev.hasArts = true
				if prev.samples {
					c.updates = append(c.updates, prev)
				}
			}
		}
		if changed && prev.samples && prev.hasArts {
			if prev.out.done {
				prev.dirty = true
			}
			c.dirty = true
		}
		return
	}
	to := c.names.id(e.ToVersion)
	idx, ok := c.chain.get(to)
	if !ok {
		c.chainLen++
		idx = c.chainLen
		c.chain.put(to, idx)
	}
	if e.Accepted && !e.RolledBack {
		// Only an accepted update that was not rolled back changes the
		// version the cell runs (as the validator's current version).
		c.tip = e.ToVersion
	}
	u := &pendingUpdate{versionIdx: idx}
	p.fill(c, u, e)
	c.byUpdate.put(e.UpdateID, u)
	if c.kind == kindBaseline || c.kind == kindSplitTrain {
		p.stats.SkippedUpdates++
		return
	}
	u.samples = true
	if int64(e.Cycle) <= c.closedThrough() {
		p.stats.Late++
	}
	if len(e.Artifacts) == 0 {
		p.stats.EmptyUpdates++
		return
	}
	u.text, u.kind = UpdateText(e.Artifacts)
	u.hasArts, u.artMs, u.artID = true, u.verMs, u.verID
	c.updates = append(c.updates, u)
	if int64(u.cycle)+1 <= c.closedThrough() {
		// Both its rounds closed (the cell may have finished): nothing
		// else would look at the updates again.
		c.dirty = true
	}
}

// fill sets u's fields but its artifacts from e, the winner of its natural
// key so far.
func (p *Pairer) fill(c *cell, u *pendingUpdate, e *schemas.HarnessUpdate) {
	u.verMs, u.verID = e.EventTime.UnixMilli(), c.arena.putID(e.EventID)
	u.updateID = e.UpdateID
	u.from, u.to, u.evolver = c.names.id(e.FromVersion), c.names.id(e.ToVersion), c.names.id(e.EvolverModel)
	u.cycle, u.rolledBack = e.Cycle, e.RolledBack
	u.evidence = u.evidence[:0]
	for _, id := range e.EvidenceTaskIDs {
		// The task's attempt 1 usually holds the id already.
		if s := c.findSlot(id, 1); s >= 0 {
			u.evidence = append(u.evidence, c.slots[s].task)
		} else {
			u.evidence = append(u.evidence, c.arena.put(id))
		}
	}
	u.evidence = slices.Clip(u.evidence)
	u.summary = e.EvidenceSummary
	if idx, ok := c.chain.get(u.to); ok {
		u.versionIdx = idx
	}
}

// baseChanged marks every emitted output that reads the baseline dirty: a
// late attempt of the finished baseline changed its scores.
func (p *Pairer) baseChanged() {
	p.baseDirty = true
	for _, c := range p.cells {
		if c.kind != kindBaseline && c.kind != kindProduction {
			c.touchAll()
		}
	}
}
