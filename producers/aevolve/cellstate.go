package aevolve

import (
	"strings"
	"time"

	"github.com/harnessflow/harnessflow/schemas"
)

// row is one task attempt being built.
type row struct {
	ev *schemas.TaskAttempt

	at time.Time
}

// cellState is everything read for one cell.
type cellState struct {
	dir, id, bm, agent, evolver string
	seed                        int32
	rep                         map[string]string
	rows                        []*row
	rowAt                       map[rowKey]int // index in rows
	taskOrder                   map[string]int
	obsCycle                    map[string]int32
	obsTime                     map[string]time.Time
	obsInput                    map[string]string
	base                        time.Time
	skillsAt                    map[int]int    // harness version index -> skill count
	versionAt                   map[int]string // evo tag -> the version the agent runs after it (chain)
	git                         *gitRepo       // private copy of the workspace repository
	fs                          *cellFS
	skillEvents                 []*schemas.SkillEvent
	updates                     []*schemas.HarnessUpdate
	updateTime                  map[string]time.Time
}

// task is the stream index of task id: the order tasks were first seen.
func (c *cellState) task(id string) int {
	if i, ok := c.taskOrder[id]; ok {
		return i
	}
	c.taskOrder[id] = len(c.taskOrder)
	return c.taskOrder[id]
}

// done reports whether the cell's done marker exists.
func (c *cellState) done() bool {
	m, ok := c.rep["done_marker"]
	if !ok || m == "" {
		return false
	}
	// The marker is a path inside the cell: an absolute one or one that
	// climbs out with ".." is ignored (readReport reports it).
	if c.fs != nil && c.fs.exists(m) {
		return true
	}
	switch strings.ToLower(m) {
	case "true", "yes", "1":
		return true
	}
	return false
}

// route is the cell's route: BENCHMARK_REPORT.md's, else baseline when
// the cell has no evolver.
func (c *cellState) route() string {
	switch strings.ToLower(c.rep["route"]) {
	case "unified_baseline", "baseline":
		return schemas.RouteBaseline
	case "unified_evolve", "evolve":
		return schemas.RouteInSitu
	}
	if c.evolver == "" {
		return schemas.RouteBaseline
	}
	return schemas.RouteInSitu
}

// add appends an attempt row; it returns a skip reason or "".
func (c *cellState) add(task string, attempt, cycle int32, status string, score float64, success, final bool, loaded []string, durMs int64) string {
	if attempt < 1 {
		return "bad attempt"
	}
	if score < 0 || score > 1 || score != score {
		return "score out of [0,1]"
	}
	if status != schemas.StatusOK {
		success = false
	}
	if loaded == nil {
		loaded = []string{}
	}
	hv := "evo-0"
	if c.evolver != "" && cycle >= 1 {
		hv = c.versionFor(int(cycle - 1))
	}
	avail := c.skillsAt[0]
	if c.evolver != "" && cycle >= 1 {
		avail = c.skillsAt[int(cycle-1)]
	}
	ev := &schemas.TaskAttempt{CellID: c.id, TaskID: task, StreamIdx: int32(c.task(task)), Cycle: cycle, Attempt: attempt,
		HarnessVersion: hv, Status: status, Score: score, Success: success, Final: final,
		SkillsAvailable: int32(max(avail, len(loaded))), SkillsLoaded: loaded, DurationMs: max(durMs, 0)}
	if attempt == 1 {
		ev.TaskInput = c.obsInput[task]
	}
	if err := schemas.Validate(ev, schemas.DefaultLimits()); err != nil {
		return "invalid row"
	}
	// A task, attempt and cycle seen before is the same event (same event
	// id): a results file that lists a task twice (a rerun appended) keeps
	// its last row, so that every consumer sees one attempt with one
	// outcome, and cell_finished counts it once.
	key := rowKey{task, attempt, cycle}
	if i, dup := c.rowAt[key]; dup {
		c.rows[i] = &row{ev: ev, at: c.obsTime[task]}
		return "repeated task and attempt (the last row kept)"
	}
	if c.rowAt == nil {
		c.rowAt = map[rowKey]int{}
	}
	c.rowAt[key] = len(c.rows)
	c.rows = append(c.rows, &row{ev: ev, at: c.obsTime[task]})
	return ""
}

// rowKey is what identifies an attempt row (its event id's fields).
type rowKey struct {
	task           string
	attempt, cycle int32
}
