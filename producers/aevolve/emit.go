package aevolve

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/harnessflow/harnessflow/schemas"
)

// emitCell emits the cell's events in order.
func (im *importer) emitCell(c *cellState) error {
	seq := 0
	at := func(t time.Time) time.Time {
		seq++
		if t.IsZero() {
			return c.base.Add(time.Duration(seq) * time.Millisecond)
		}
		return t
	}
	sort.SliceStable(c.rows, func(i, j int) bool {
		a, b := c.rows[i].ev, c.rows[j].ev
		if a.Cycle != b.Cycle {
			return a.Cycle < b.Cycle
		}
		if a.StreamIdx != b.StreamIdx {
			return a.StreamIdx < b.StreamIdx
		}
		return a.Attempt < b.Attempt
	})
	tasks := map[string]bool{}
	maxAtt := int32(1)
	batch := 0
	perCycle := map[int32]int{}
	for _, r := range c.rows {
		tasks[r.ev.TaskID] = true
		maxAtt = max(maxAtt, r.ev.Attempt)
		if r.ev.Attempt == 1 {
			perCycle[r.ev.Cycle]++
			batch = max(batch, perCycle[r.ev.Cycle])
		}
	}
	cr := CellReport{CellID: c.id, Benchmark: c.bm, Agent: c.agent, Evolver: c.evolver, Route: c.route(), Seed: c.seed,
		AgentModelID: c.rep["solver_model_id"], EvolverModelID: c.rep["evolver_model_id"], Done: c.done(), Tasks: len(tasks)}
	if err := im.out(&schemas.CellStarted{CampaignID: im.cfg.Campaign, CellID: c.id, Benchmark: c.bm, AgentModel: c.agent,
		EvolverModel: c.evolver, Seed: c.seed, Route: cr.Route, H0Version: "evo-0", BatchSize: int32(batch),
		MaxAttempts: maxAtt, TaskCount: int32(len(tasks))}, at(time.Time{})); err != nil {
		return err
	}
	skills := map[string][]*schemas.SkillEvent{}
	for _, s := range c.skillEvents {
		k := s.TaskID + "\x00" + strconv.Itoa(int(s.Attempt))
		skills[k] = append(skills[k], s)
	}
	for _, u := range c.updates {
		ids := []string{}
		for _, r := range c.rows {
			if r.ev.Cycle == u.Cycle && r.ev.Attempt == 1 {
				ids = append(ids, r.ev.TaskID)
			}
		}
		u.EvidenceTaskIDs = ids
	}
	emitted := map[int32]bool{}
	flushUpdates := func(upTo int32) error {
		for _, u := range c.updates {
			if u.Cycle <= upTo && !emitted[u.Cycle] {
				emitted[u.Cycle] = true
				if err := im.out(u, at(c.updateTime[u.UpdateID])); err != nil {
					return err
				}
				cr.Updates++
			}
		}
		return nil
	}
	for _, r := range c.rows {
		if err := flushUpdates(r.ev.Cycle - 1); err != nil {
			return err
		}
		if err := im.out(r.ev, at(r.at)); err != nil {
			return err
		}
		cr.Attempts++
		for _, s := range skills[r.ev.TaskID+"\x00"+strconv.Itoa(int(r.ev.Attempt))] {
			if err := im.out(s, at(time.Time{})); err != nil {
				return err
			}
			cr.SkillEvents++
		}
	}
	if err := flushUpdates(1 << 30); err != nil {
		return err
	}
	// Skill events whose (task, attempt) has no row: there is no attempt for
	// them to belong to, so they are not emitted; the report says so rather
	// than counting them as read and dropping them in silence.
	emittedFor := map[string]bool{}
	for _, r := range c.rows {
		emittedFor[r.ev.TaskID+"\x00"+strconv.Itoa(int(r.ev.Attempt))] = true
	}
	var orphans *FileReport
	for k, ss := range skills {
		if !emittedFor[k] {
			if orphans == nil {
				orphans = &FileReport{Path: im.rel(c.dir) + " (skill events)"}
			}
			task, att, _ := strings.Cut(k, "\x00")
			for range ss {
				orphans.skip(fmt.Sprintf("no attempt row for task %s attempt %s", task, att))
			}
		}
	}
	if orphans != nil {
		im.file(orphans)
	}
	if cr.Done {
		if err := im.out(&schemas.CellFinished{CellID: c.id, Status: schemas.CellCompleted, Attempts: int64(cr.Attempts)}, at(time.Time{})); err != nil {
			return err
		}
	}
	im.sum.Cells = append(im.sum.Cells, cr)
	return nil
}
