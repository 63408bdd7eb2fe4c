package aevolve

import (
	"slices"
	"strconv"

	"github.com/harnessflow/harnessflow/schemas"
)

// readSB reads results.jsonl: attempt rows (attempt = cycle, round = batch)
// and final rows that mark a task's last attempt final.
func (im *importer) readSB(c *cellState) {
	const rel = "results.jsonl"
	f := &FileReport{Path: im.rel(c.fs.path(rel))}
	defer im.file(f)
	if !c.fs.exists(rel) {
		f.skip("missing")
		return
	}
	var attempts, finals []map[string]any
	im.jsonl(c.fs, rel, f, func(m map[string]any) string {
		if str(m, "task_id") == "" {
			return "no task_id"
		}
		if fin, _ := boolean(m, "final"); fin {
			finals = append(finals, m)
		} else {
			attempts = append(attempts, m)
		}
		return ""
	})
	attShift, batchShift := int32(0), int32(0)
	for _, m := range append(slices.Clone(attempts), finals...) {
		if n, ok := number(m, "cycle"); ok && n == 0 {
			attShift = 1
		}
		if n, ok := number(m, "batch"); ok && n == 0 && c.evolver != "" {
			batchShift = 1
		}
	}
	c.rep["_sb_attempt_shift"] = strconv.Itoa(int(attShift))
	seen := map[string]int32{}
	for _, m := range attempts {
		id := str(m, "task_id")
		passed, ok := boolean(m, "passed")
		if !ok {
			f.Read--
			f.skip("no passed")
			continue
		}
		att := seen[id] + 1
		n, ok, bad := count(m, "cycle")
		if ok && bad == "" {
			att = n + attShift
		}
		round := c.obsCycle[id]
		b, bok, bbad := count(m, "batch")
		if bok && bbad == "" {
			round = b + batchShift
		}
		if bad += bbad; bad != "" {
			f.Read--
			f.skip(bad)
			continue
		}
		seen[id] = att
		score, ok := number(m, "score")
		if !ok {
			if score, ok = number(m, "reward_float"); !ok {
				score = b2f(passed)
			}
		}
		status := schemas.StatusOK
		if str(m, "failure_class") == "error" {
			status = schemas.StatusError
		}
		var loaded []string
		if l, ok := m["skills_loaded"].([]any); ok {
			for _, v := range l {
				if s, ok := v.(string); ok {
					loaded = append(loaded, s)
				}
			}
		}
		d, _ := number(m, "duration_sec")
		if reason := c.add(id, att, round, status, score, passed, false, loaded, int64(d*1000)); reason != "" {
			f.Read--
			f.skip(reason)
		}
	}
	last := map[string]*row{}
	for _, r := range c.rows {
		if p := last[r.ev.TaskID]; p == nil || r.ev.Attempt > p.ev.Attempt {
			last[r.ev.TaskID] = r
		}
	}
	for _, m := range finals {
		id := str(m, "task_id")
		passed, _ := boolean(m, "passed")
		if r := last[id]; r != nil {
			r.ev.Final = true
			continue
		}
		// A task with only its final row: one synthesized attempt.
		round := c.obsCycle[id]
		n, ok, bad := count(m, "batch")
		if bad != "" {
			f.Read--
			f.skip(bad)
			continue
		}
		if ok {
			round = n + batchShift
		}
		if reason := c.add(id, 1, round, schemas.StatusOK, b2f(passed), passed, true, nil, 0); reason != "" {
			f.Read--
			f.skip(reason)
		}
	}
}
