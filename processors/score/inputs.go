package score

import "github.com/harnessflow/harnessflow/schemas"

// attempt records an attempt row in its round of c (and, for attempt 1, the
// task's outcome, and the baseline's score when c is the baseline), then
// applies the skill loads and judgments that waited for the row.
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

// update advances c's version chain and keeps the update as a pending
// sample, unless it yields none (see Stats).
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
	u.text, u.kind = UpdateText(e.Artifacts)
	c.updates = append(c.updates, u)
}
