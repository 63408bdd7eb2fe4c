package aevolve

import (
	"regexp"
	"sort"
	"strconv"

	"github.com/harnessflow/harnessflow/schemas"
)

// batchFile matches an observations file, batch_NNNN.jsonl.
var batchFile = regexp.MustCompile(`^batch_(\d+)\.jsonl$`)

// readObservations reads workspace/evolution/observations/batch_NNNN.jsonl:
// the round of each task, its time and its input.
func (im *importer) readObservations(c *cellState) {
	const dir = "workspace/evolution/observations"
	ents := c.fs.readDir(dir)
	type bf struct {
		n    int
		path string
	}
	var files []bf
	for _, e := range ents {
		if m := batchFile.FindStringSubmatch(e.Name()); m != nil {
			n, err := strconv.ParseInt(m[1], 10, 31)
			if err != nil {
				continue // a batch number past int32: no round
			}
			files = append(files, bf{int(n), dir + "/" + e.Name()})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].n < files[j].n })
	shift := 0
	if len(files) > 0 && files[0].n == 0 {
		shift = 1 // batch_0000 is round 1
	}
	for _, b := range files {
		f := &FileReport{Path: im.rel(c.fs.path(b.path))}
		im.jsonl(c.fs, b.path, f, func(m map[string]any) string {
			id := str(m, "task_id")
			if id == "" {
				if t, ok := m["task"].(map[string]any); ok {
					id = str(t, "id")
				}
			}
			if id == "" {
				return "no task_id"
			}
			c.obsCycle[id] = int32(b.n + shift)
			if ts, ok := parseTime(str(m, "timestamp")); ok {
				if _, seen := c.obsTime[id]; !seen {
					c.obsTime[id] = ts
				}
				if c.base.IsZero() || ts.Before(c.base) {
					c.base = ts
				}
			}
			in := str(m, "task_input")
			if in == "" {
				if t, ok := m["task"].(map[string]any); ok {
					in = str(t, "input")
				}
			}
			if in != "" {
				c.obsInput[id] = truncate(in, maxTaskInput)
			}
			return ""
		})
		im.file(f)
	}
}

// rowsFromObservations makes attempts from observation lines (an evolved SWE
// cell without results.json): one per line, attempts counted per task.
func (im *importer) rowsFromObservations(c *cellState) {
	const dir = "workspace/evolution/observations"
	ents := c.fs.readDir(dir)
	var names []string
	for _, e := range ents {
		if batchFile.MatchString(e.Name()) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	seen := map[string]int32{}
	for _, n := range names {
		p := dir + "/" + n
		f := &FileReport{Path: im.rel(c.fs.path(p)) + " (attempts)"}
		im.jsonl(c.fs, p, f, func(m map[string]any) string {
			id := str(m, "task_id")
			if id == "" {
				return "no task_id"
			}
			success, ok := boolean(m, "success")
			if !ok {
				if fb, isMap := m["feedback"].(map[string]any); isMap {
					success, ok = boolean(fb, "success")
				}
			}
			if !ok {
				return "no success"
			}
			score, ok := number(m, "score")
			if !ok {
				score = b2f(success)
			}
			seen[id]++
			return c.add(id, seen[id], c.obsCycle[id], schemas.StatusOK, score, success, true, nil, 0)
		})
		im.file(f)
	}
	// Only the last attempt of a task is final.
	last := map[string]*row{}
	for _, r := range c.rows {
		if p := last[r.ev.TaskID]; p == nil || r.ev.Attempt > p.ev.Attempt {
			last[r.ev.TaskID] = r
		}
	}
	for _, r := range c.rows {
		r.ev.Final = last[r.ev.TaskID] == r
	}
}
