package score

import "github.com/harnessflow/harnessflow/schemas"

// attempt records a task_attempt under its natural key (task_id, cycle,
// attempt) in c: it becomes the key's winner when it beats the current one
// by (event time in ms, event_id), and its round is computed again if it
// was already emitted.
func (p *Pairer) attempt(c *cell, e *schemas.TaskAttempt) {
	c.bump(e.Cycle)
	k := akey{e.TaskID, e.Cycle, e.Attempt}
	tk := tkey{e.TaskID, e.Attempt}
	v := versionOf(&e.Envelope)
	head := c.attempts[tk]
	var prev *attemptRec
	for r := head; r != nil; r = r.next {
		if r.cycle == e.Cycle {
			prev = r
			break
		}
	}
	if prev != nil {
		p.stats.Superseded++
		if !v.beats(prev.ver) {
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
	rec := attemptRec{key: k, ver: v, cycle: e.Cycle, offered: e.SkillsAvailable > 0,
		version: hv, input: e.TaskInput, at: e.EventTime}
	if e.Status == schemas.StatusOK {
		rec.score, rec.success = e.Score, e.Success
	}
	if prev != nil {
		rec.next = prev.next
		*prev = rec
	} else {
		nr := &rec
		nr.next = head
		c.attempts[tk] = nr
		r := c.round(e.Cycle)
		r.keys = append(r.keys, nr)
		if head != nil && head.next == nil {
			c.multi++
		}
	}
	c.touch(e.Cycle)
	if c.multi > 0 {
		if cs := c.cyclesOf(tk); cs.n > 1 {
			// The skill events and judgments of tk may belong to another
			// of its attempts now.
			for j := 0; j < cs.n; j++ {
				c.touch(cs.at(j))
			}
		}
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
	k := tkey{e.TaskID, e.Attempt}
	sub := loadSub{e.Turn, e.SkillName}
	v := versionOf(&e.Envelope)
	rec := &loadRec{sub: sub, ver: v, loaded: e.Status == schemas.SkillLoaded, at: e.EventTime}
	list := c.loads[k]
	for j, prev := range list {
		if prev.sub == sub {
			p.stats.Superseded++
			if !v.beats(prev.ver) {
				return
			}
			list[j] = rec
			p.attached(c, k, v.ms)
			return
		}
	}
	c.loads[k] = append(list, rec)
	p.attached(c, k, v.ms)
}

// judgment records an adherence_judgment under its natural key (task_id,
// attempt, skill_name, judge_model) in c.
func (p *Pairer) judgment(c *cell, e *schemas.AdherenceJudgment) {
	k := tkey{e.TaskID, e.Attempt}
	sub := judgSub{e.SkillName, e.JudgeModel}
	v := versionOf(&e.Envelope)
	rec := &judgRec{sub: sub, ver: v, loaded: e.HarnessLoaded, fin: e.FinalValidation, at: e.EventTime}
	list := c.judgs[k]
	for j, prev := range list {
		if prev.sub == sub {
			p.stats.Superseded++
			if !v.beats(prev.ver) {
				return
			}
			list[j] = rec
			p.attached(c, k, v.ms)
			return
		}
	}
	c.judgs[k] = append(list, rec)
	p.attached(c, k, v.ms)
}

// attached notes a skill load or judgment of attempt k: its attempt's round
// is computed again if it was emitted. One whose attempt has not arrived
// waits for it (counted once the attempt arrives; never when it does not).
func (p *Pairer) attached(c *cell, k tkey, at int64) {
	cy, ok := c.owner(k, at)
	if !ok {
		return
	}
	if int64(cy) <= c.closedThrough() {
		p.stats.Late++
	}
	if cs := c.cyclesOf(k); cs.n > 1 {
		// A re-send may move it from one of k's attempts to another.
		for j := 0; j < cs.n; j++ {
			c.touch(cs.at(j))
		}
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
	v := versionOf(&e.Envelope)
	if prev := c.byUpdate[e.UpdateID]; prev != nil {
		// A re-send under a new event id: one update whatever the arrival
		// order. Its fields are the winner's (the greatest version); its
		// artifacts those of the greatest copy that has any, so that it
		// yields a sample when any copy has artifacts, in any order.
		p.stats.Superseded++
		changed := false
		if v.beats(prev.ver) {
			p.fill(c, prev, e, v)
			changed = true
		}
		if len(e.Artifacts) > 0 && (!prev.hasArts || v.beats(prev.artVer)) {
			prev.text, prev.kind = UpdateText(e.Artifacts)
			prev.artVer = v
			changed = true
			if !prev.hasArts {
				prev.hasArts = true
				if prev.samples {
					c.updates = append(c.updates, prev)
				}
			}
		}
		if changed && prev.samples && prev.hasArts {
			if prev.emitted != nil {
				prev.dirty = true
			}
			c.dirty = true
		}
		return
	}
	idx, ok := c.chain[e.ToVersion]
	if !ok {
		c.chainLen++
		idx = c.chainLen
		c.chain[e.ToVersion] = idx
	}
	if e.Accepted && !e.RolledBack {
		// Only an accepted update that was not rolled back changes the
		// version the cell runs (as the validator's current version).
		c.tip = e.ToVersion
	}
	u := &pendingUpdate{versionIdx: idx}
	p.fill(c, u, e, v)
	c.byUpdate[e.UpdateID] = u
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
	u.hasArts, u.artVer = true, v
	c.updates = append(c.updates, u)
	if int64(u.cycle)+1 <= c.closedThrough() {
		// Both its rounds closed (the cell may have finished): nothing
		// else would look at the updates again.
		c.dirty = true
	}
}

// fill sets u's fields but its artifacts from e, the winner of its natural
// key so far.
func (p *Pairer) fill(c *cell, u *pendingUpdate, e *schemas.HarnessUpdate, v version) {
	u.ver = v
	u.updateID, u.from, u.to, u.evolver = e.UpdateID, e.FromVersion, e.ToVersion, e.EvolverModel
	u.cycle, u.rolledBack = e.Cycle, e.RolledBack
	u.evidence, u.summary, u.at = e.EvidenceTaskIDs, e.EvidenceSummary, e.EventTime
	if idx, ok := c.chain[e.ToVersion]; ok {
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
