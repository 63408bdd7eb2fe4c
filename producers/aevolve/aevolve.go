// Package aevolve imports A-Evolve run directories (the paper's public code,
// A-EVO-Lab/a-evolve) as harnessflow events: a cell directory, or a tree of
// them, becomes cell_started, task_attempt, skill_event, harness_update and
// cell_finished events (AEVOLVE-FORMAT.md).
//
// Import is deterministic: event ids come from schemas.DeriveEventID over
// stable fields and event times from the files' own timestamps (or a fixed
// epoch), never the clock, so importing the same directory twice produces the
// same events and changes no figure downstream.
package aevolve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/harnessflow/harnessflow/schemas"
)

// Source is the envelope source of imported events.
const Source = "import:a-evolve"

// MCPSuccessScore is the claim coverage at which an MCP task counts as solved
// (the A-Evolve code's threshold).
const MCPSuccessScore = 0.75

// Epoch is the event time base of a cell with no timestamp in its files.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// DefaultAnchors are the paper's anchor agents and evolvers.
var DefaultAnchors = []string{"opus46", "sonnet46", "qwen235b"}

// maxTaskInput caps the task_input copied from observations.
const maxTaskInput = 4 << 10

// Config configures an import. Zero fields take the defaults.
type Config struct {
	// Dir is a cell directory or a tree holding cell directories. Required.
	Dir string
	// Campaign is the campaign id. Default: the base name of Dir.
	Campaign string
	// Project is the envelope's project. Default: "default".
	Project string
	// AnchorAgents and AnchorEvolvers are declared with the campaign.
	// Default: DefaultAnchors.
	AnchorAgents, AnchorEvolvers []string
	// Git is the git executable. Default: "git" (searched on PATH).
	Git string
}

func (c *Config) setDefaults() {
	if c.Campaign == "" && c.Dir != "" {
		abs, err := filepath.Abs(c.Dir)
		if err == nil {
			c.Campaign = filepath.Base(abs)
		}
	}
	if c.Project == "" {
		c.Project = "default"
	}
	if c.AnchorAgents == nil {
		c.AnchorAgents = slices.Clone(DefaultAnchors)
	}
	if c.AnchorEvolvers == nil {
		c.AnchorEvolvers = slices.Clone(DefaultAnchors)
	}
	if c.Git == "" {
		c.Git = "git"
	}
}

// Validate reports every problem of the configuration, joined.
func (c *Config) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, fmt.Errorf("%w: no directory given", ErrConfig))
	} else if st, err := os.Stat(c.Dir); err != nil || !st.IsDir() {
		errs = append(errs, fmt.Errorf("%w: %s is not a directory", ErrConfig, c.Dir))
	}
	if c.Campaign == "" {
		errs = append(errs, fmt.Errorf("%w: no campaign id", ErrConfig))
	}
	return errors.Join(errs...)
}

// FileReport says what was read from one file.
type FileReport struct {
	// Path is relative to Config.Dir.
	Path string
	// Read counts rows (lines, records, tags) turned into events or used.
	Read int
	// Skipped counts rows not used; Reasons counts them by reason.
	Skipped int
	Reasons map[string]int
}

func (f *FileReport) skip(reason string) {
	f.Skipped++
	if f.Reasons == nil {
		f.Reasons = map[string]int{}
	}
	f.Reasons[reason]++
}

// String is "path: read N rows, skipped M (reason: k, ...)".
func (f *FileReport) String() string {
	s := fmt.Sprintf("%s: read %d rows, skipped %d", f.Path, f.Read, f.Skipped)
	if len(f.Reasons) > 0 {
		keys := make([]string, 0, len(f.Reasons))
		for k := range f.Reasons {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s: %d", k, f.Reasons[k])
		}
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s
}

// CellReport describes one imported cell.
type CellReport struct {
	CellID, Benchmark, Agent, Evolver, Route string
	Seed                                     int32
	// AgentModelID and EvolverModelID are the full model ids of
	// BENCHMARK_REPORT.md (solver_model_id, evolver_model_id), when given.
	AgentModelID, EvolverModelID string
	// Done is whether the done marker exists (cell_finished was emitted).
	Done bool
	// Tasks, Attempts, SkillEvents and Updates count the emitted events.
	Tasks, Attempts, SkillEvents, Updates int
}

// Summary is what an import read and emitted.
type Summary struct {
	Campaign string
	Cells    []CellReport
	Files    []FileReport
	// Events counts emitted events.
	Events int
}

// Emitter is what Run writes events to; *producers.Producer satisfies it.
type Emitter interface {
	Emit(ctx context.Context, ev schemas.Event) error
	Flush(ctx context.Context) error
}

// Run imports cfg.Dir to em and flushes it; see Import.
func Run(ctx context.Context, cfg Config, em Emitter, report io.Writer) (Summary, error) {
	sum, err := Import(ctx, cfg, func(ev schemas.Event) error {
		if err := em.Emit(ctx, ev); err != nil {
			return fmt.Errorf("emit %s %s: %w", ev.Type(), ev.Header().EventID, err)
		}
		return nil
	}, report)
	if err != nil {
		return sum, err
	}
	if err := em.Flush(ctx); err != nil {
		return sum, fmt.Errorf("flush: %w", err)
	}
	return sum, nil
}

var cellName = regexp.MustCompile(`^(.+?)_x_(.+)_(swe|mcp|sb)_s(\d+)$`)

// ParseCellName splits an A-Evolve cell directory name
// (<solver>_x_<evolver>_<bm>_s<seed>); evolver "none" is returned as "".
func ParseCellName(name string) (agent, evolver, benchmark string, seed int32, ok bool) {
	m := cellName.FindStringSubmatch(name)
	if m == nil {
		return "", "", "", 0, false
	}
	s, err := strconv.ParseInt(m[4], 10, 32)
	if err != nil {
		return "", "", "", 0, false
	}
	evolver = m[2]
	if evolver == "none" {
		evolver = ""
	}
	return m[1], evolver, m[3], int32(s), true
}

// FindCells returns the cell directories under dir (dir itself if it is
// one), sorted by path.
func FindCells(dir string) ([]string, error) {
	if _, _, _, _, ok := ParseCellName(filepath.Base(filepath.Clean(dir))); ok {
		return []string{dir}, nil
	}
	var cells []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			// A cell linked into the tree (runs gathered from several
			// disks) is a cell; other links are not followed (no loops).
			if st, err := os.Stat(p); err == nil && st.IsDir() {
				if _, _, _, _, ok := ParseCellName(d.Name()); ok {
					cells = append(cells, p)
				}
			}
			return nil
		}
		if !d.IsDir() || p == dir {
			return nil
		}
		if d.Name() == "workspace" || d.Name() == ".git" || d.Name() == "outputs" {
			return fs.SkipDir
		}
		if _, _, _, _, ok := ParseCellName(d.Name()); ok {
			cells = append(cells, p)
			return fs.SkipDir
		}
		return nil
	})
	sort.Strings(cells)
	return cells, err
}

// Import reads cfg.Dir and calls emit for every event, in a deterministic
// order: campaign_declared, then per cell (sorted by path) cell_started, per
// round the task attempts with their skill events and the round's harness
// update, and cell_finished when the done marker exists. It writes one line
// per file read to report ("path: read N rows, skipped M (reason: k)") when
// report is not nil. It returns at the first emit error.
func Import(ctx context.Context, cfg Config, emit func(schemas.Event) error, report io.Writer) (Summary, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return Summary{}, err
	}
	cells, err := FindCells(cfg.Dir)
	if err != nil {
		return Summary{}, fmt.Errorf("scan %s: %w", cfg.Dir, err)
	}
	if len(cells) == 0 {
		return Summary{}, fmt.Errorf("%w in %s", ErrNoCells, cfg.Dir)
	}
	im := &importer{cfg: cfg, ctx: ctx, emit: emit, report: report, sum: Summary{Campaign: cfg.Campaign}}
	benches := map[string]bool{}
	for _, c := range cells {
		_, _, bm, _, _ := ParseCellName(filepath.Base(c))
		benches[bm] = true
	}
	bl := make([]string, 0, len(benches))
	for b := range benches {
		bl = append(bl, b)
	}
	sort.Strings(bl)
	err = im.out(&schemas.CampaignDeclared{CampaignID: cfg.Campaign, Benchmarks: bl,
		AnchorAgents: cfg.AnchorAgents, AnchorEvolvers: cfg.AnchorEvolvers, LabelEpsilon: 0.02, LabelAlpha: 0.05}, Epoch)
	if err != nil {
		return im.sum, err
	}
	for _, c := range cells {
		if err := ctx.Err(); err != nil {
			return im.sum, err
		}
		if err := im.cell(c); err != nil {
			return im.sum, fmt.Errorf("cell %s: %w", filepath.Base(c), err)
		}
	}
	return im.sum, nil
}

type importer struct {
	cfg    Config
	ctx    context.Context
	emit   func(schemas.Event) error
	report io.Writer
	sum    Summary
}

func (im *importer) out(ev schemas.Event, at time.Time) error {
	h := ev.Header()
	h.Project, h.Source, h.EventTime = im.cfg.Project, Source, at.UTC()
	h.EventID = schemas.DeriveEventID(ev)
	if err := im.emit(ev); err != nil {
		return err
	}
	im.sum.Events++
	return nil
}

func (im *importer) file(f *FileReport) {
	im.sum.Files = append(im.sum.Files, *f)
	if im.report != nil {
		fmt.Fprintln(im.report, f.String())
	}
}

func (im *importer) rel(p string) string {
	r, err := filepath.Rel(im.cfg.Dir, p)
	if err != nil || r == "." {
		return filepath.Base(p)
	}
	if strings.HasPrefix(r, "..") {
		return p
	}
	return filepath.Join(filepath.Base(filepath.Clean(im.cfg.Dir)), r)
}

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
	git                         *gitRepo
	skillEvents                 []*schemas.SkillEvent
	updates                     []*schemas.HarnessUpdate
	updateTime                  map[string]time.Time
}

func (c *cellState) task(id string) int {
	if i, ok := c.taskOrder[id]; ok {
		return i
	}
	c.taskOrder[id] = len(c.taskOrder)
	return c.taskOrder[id]
}

func (im *importer) cell(dir string) error {
	name := filepath.Base(filepath.Clean(dir))
	agent, evolver, bm, seed, _ := ParseCellName(name)
	c := &cellState{dir: dir, id: name, bm: bm, agent: agent, evolver: evolver, seed: seed,
		taskOrder: map[string]int{}, obsCycle: map[string]int32{}, obsTime: map[string]time.Time{},
		obsInput: map[string]string{}, skillsAt: map[int]int{}, updateTime: map[string]time.Time{}}
	c.rep = im.readReport(filepath.Join(dir, "BENCHMARK_REPORT.md"))
	im.readObservations(c)
	if err := im.readWorkspace(c); err != nil {
		return err
	}
	switch bm {
	case "swe":
		if _, err := os.Stat(filepath.Join(dir, "results.json")); err == nil {
			im.readSWE(c)
		} else {
			im.rowsFromObservations(c)
		}
	case "mcp":
		im.readMCP(c)
	case "sb":
		im.readSB(c)
		im.readTrajectories(c)
	}
	if c.base.IsZero() {
		c.base = Epoch
	}
	return im.emitCell(c)
}

// readReport parses BENCHMARK_REPORT.md's "key: value" lines.
func (im *importer) readReport(path string) map[string]string {
	rep := map[string]string{}
	f := &FileReport{Path: im.rel(path)}
	data, err := os.ReadFile(path)
	if err != nil {
		f.skip("missing")
		im.file(f)
		return rep
	}
	for _, line := range strings.Split(string(data), "\n") {
		l := strings.TrimSpace(line)
		l = strings.TrimLeft(l, "-*> ")
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			if l != "" {
				f.skip("not key: value")
			}
			continue
		}
		k = strings.ToLower(strings.Trim(strings.TrimSpace(k), "*`_ "))
		v = strings.Trim(strings.TrimSpace(v), "*` ")
		if k == "" || strings.ContainsAny(k, " \t") {
			f.skip("not key: value")
			continue
		}
		rep[k] = v
		f.Read++
	}
	im.file(f)
	return rep
}

// done reports whether the cell's done marker exists.
func (c *cellState) done() bool {
	m, ok := c.rep["done_marker"]
	if !ok || m == "" {
		return false
	}
	p := m
	if !filepath.IsAbs(p) {
		p = filepath.Join(c.dir, m)
	}
	if _, err := os.Stat(p); err == nil {
		return true
	}
	switch strings.ToLower(m) {
	case "true", "yes", "1":
		return true
	}
	return false
}

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

// jsonl reads a JSON-lines file (Python reprs accepted), calling fn with each
// object; trailer records (with _record_type) are skipped.
func (im *importer) jsonl(path string, f *FileReport, fn func(map[string]any) string) {
	file, err := os.Open(path)
	if err != nil {
		f.skip("unreadable")
		return
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if err := parseLoose(line, &m); err != nil || m == nil {
			f.skip("unparseable")
			continue
		}
		if _, ok := m["_record_type"]; ok {
			f.skip("trailer record")
			continue
		}
		if reason := fn(m); reason != "" {
			f.skip(reason)
			continue
		}
		f.Read++
	}
	if err := sc.Err(); err != nil {
		f.skip("read error: " + err.Error())
	}
}

var batchFile = regexp.MustCompile(`^batch_(\d+)\.jsonl$`)

// readObservations reads workspace/evolution/observations/batch_NNNN.jsonl:
// the round of each task, its time and its input.
func (im *importer) readObservations(c *cellState) {
	dir := filepath.Join(c.dir, "workspace", "evolution", "observations")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type bf struct {
		n    int
		path string
	}
	var files []bf
	for _, e := range ents {
		if m := batchFile.FindStringSubmatch(e.Name()); m != nil {
			n, _ := strconv.Atoi(m[1])
			files = append(files, bf{n, filepath.Join(dir, e.Name())})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].n < files[j].n })
	shift := 0
	if len(files) > 0 && files[0].n == 0 {
		shift = 1 // batch_0000 is round 1
	}
	for _, b := range files {
		f := &FileReport{Path: im.rel(b.path)}
		im.jsonl(b.path, f, func(m map[string]any) string {
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
	dir := filepath.Join(c.dir, "workspace", "evolution", "observations")
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		if batchFile.MatchString(e.Name()) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	seen := map[string]int32{}
	for _, n := range names {
		p := filepath.Join(dir, n)
		f := &FileReport{Path: im.rel(p) + " (attempts)"}
		im.jsonl(p, f, func(m map[string]any) string {
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

// readSWE reads results.json: a list of per-task results.
func (im *importer) readSWE(c *cellState) {
	p := filepath.Join(c.dir, "results.json")
	f := &FileReport{Path: im.rel(p)}
	defer im.file(f)
	data, err := os.ReadFile(p)
	if err != nil {
		f.skip("unreadable")
		return
	}
	var list []map[string]any
	if err := parseLoose(data, &list); err != nil {
		// Some runs write one object per line.
		f.Reasons = nil
		im.jsonl(p, f, func(m map[string]any) string { return c.sweRow(m) })
		return
	}
	for _, m := range list {
		if m == nil {
			f.skip("not an object")
			continue
		}
		if _, ok := m["_record_type"]; ok {
			f.skip("trailer record")
			continue
		}
		if r := c.sweRow(m); r != "" {
			f.skip(r)
			continue
		}
		f.Read++
	}
}

func (c *cellState) sweRow(m map[string]any) string {
	id := str(m, "instance_id")
	if id == "" {
		id = str(m, "task_id")
	}
	if id == "" {
		return "no instance_id"
	}
	success, ok := boolean(m, "success")
	if !ok {
		return "no success"
	}
	score, ok := number(m, "score")
	if !ok {
		score = b2f(success)
	}
	status := schemas.StatusOK
	if e := str(m, "error"); e != "" {
		status = schemas.StatusError
		if strings.Contains(strings.ToLower(e), "timeout") {
			status = schemas.StatusTimeout
		}
	}
	el, _ := number(m, "elapsed")
	return c.add(id, 1, c.obsCycle[id], status, score, success, true, nil, int64(el*1000))
}

// readMCP reads summary.csv: task_id,result,score,elapsed_s,output_len,detail[,evo_cycle].
func (im *importer) readMCP(c *cellState) {
	p := filepath.Join(c.dir, "summary.csv")
	f := &FileReport{Path: im.rel(p)}
	defer im.file(f)
	file, err := os.Open(p)
	if err != nil {
		f.skip("missing")
		return
	}
	defer file.Close()
	r := csv.NewReader(file)
	r.FieldsPerRecord = -1
	r.LazyQuotes = true
	recs, err := r.ReadAll()
	if err != nil || len(recs) == 0 {
		f.skip("unparseable csv")
		return
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[strings.TrimSpace(strings.ToLower(h))] = i
	}
	get := func(rec []string, k string) string {
		if i, ok := col[k]; ok && i < len(rec) {
			return strings.TrimSpace(rec[i])
		}
		return ""
	}
	if _, ok := col["task_id"]; !ok {
		f.skip("no task_id column")
		return
	}
	shift := int32(0)
	if _, ok := col["evo_cycle"]; ok {
		for _, rec := range recs[1:] {
			if get(rec, "evo_cycle") == "0" {
				shift = 1 // evo_cycle 0 is round 1
			}
		}
	}
	for _, rec := range recs[1:] {
		id := get(rec, "task_id")
		if id == "" {
			f.skip("no task_id")
			continue
		}
		status := schemas.StatusOK
		switch strings.ToUpper(get(rec, "result")) {
		case "PASS", "FAIL":
		case "INTERRUPTED":
			status = schemas.StatusInterrupted
		case "ERROR":
			status = schemas.StatusError
		case "TIMEOUT":
			status = schemas.StatusTimeout
		default:
			f.skip("unknown result")
			continue
		}
		score, err := strconv.ParseFloat(get(rec, "score"), 64)
		if err != nil {
			if status == schemas.StatusOK {
				f.skip("bad score")
				continue
			}
			score = 0
		}
		cycle := c.obsCycle[id]
		if ec := get(rec, "evo_cycle"); ec != "" {
			n, err := strconv.Atoi(ec)
			if err != nil {
				f.skip("bad evo_cycle")
				continue
			}
			cycle = int32(n) + shift
		}
		el, _ := strconv.ParseFloat(get(rec, "elapsed_s"), 64)
		if reason := c.add(id, 1, cycle, status, score, score >= MCPSuccessScore, true, nil, int64(el*1000)); reason != "" {
			f.skip(reason)
			continue
		}
		f.Read++
	}
}

// readSB reads results.jsonl: attempt rows (attempt = cycle, round = batch)
// and final rows that mark a task's last attempt final.
func (im *importer) readSB(c *cellState) {
	p := filepath.Join(c.dir, "results.jsonl")
	f := &FileReport{Path: im.rel(p)}
	defer im.file(f)
	if _, err := os.Stat(p); err != nil {
		f.skip("missing")
		return
	}
	var attempts, finals []map[string]any
	im.jsonl(p, f, func(m map[string]any) string {
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
		if n, ok := number(m, "cycle"); ok {
			att = int32(n) + attShift
		}
		seen[id] = att
		round := c.obsCycle[id]
		if n, ok := number(m, "batch"); ok {
			round = int32(n) + batchShift
		}
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
		if n, ok := number(m, "batch"); ok {
			round = int32(n) + batchShift
		}
		if reason := c.add(id, 1, round, schemas.StatusOK, b2f(passed), passed, true, nil, 0); reason != "" {
			f.Read--
			f.skip(reason)
		}
	}
}

var trajDir = regexp.MustCompile(`^(.+)__(.+)-cycle-(\d+)$`)

// readTrajectories reads outputs/official_like/<task>__<cell>-cycle-<N>/agent/trajectory.json
// and turns the skill_tool_events of its steps into skill events.
func (im *importer) readTrajectories(c *cellState) {
	root := filepath.Join(c.dir, "outputs", "official_like")
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	attShift, _ := strconv.Atoi(c.rep["_sb_attempt_shift"])
	for _, e := range ents {
		m := trajDir.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		p := filepath.Join(root, e.Name(), "agent", "trajectory.json")
		f := &FileReport{Path: im.rel(p)}
		data, err := os.ReadFile(p)
		if err != nil {
			f.skip("missing")
			im.file(f)
			continue
		}
		var doc any
		if err := parseLoose(data, &doc); err != nil {
			f.skip("unparseable")
			im.file(f)
			continue
		}
		var steps []any
		switch d := doc.(type) {
		case []any:
			steps = d
		case map[string]any:
			if s, ok := d["steps"].([]any); ok {
				steps = s
			} else {
				steps = []any{d}
			}
		}
		n, _ := strconv.Atoi(m[3])
		att := int32(n + attShift)
		turn := int32(0)
		for _, s := range steps {
			sm, ok := s.(map[string]any)
			if !ok {
				continue
			}
			evs, ok := sm["skill_tool_events"].([]any)
			if !ok {
				continue
			}
			for _, raw := range evs {
				ev, ok := raw.(map[string]any)
				if !ok {
					f.skip("not an object")
					continue
				}
				se := &schemas.SkillEvent{CellID: c.id, TaskID: m[1], Attempt: att, Turn: turn, Tool: str(ev, "tool"), SkillName: str(ev, "name")}
				switch se.Tool {
				case schemas.ToolListSkills:
					se.Status = schemas.SkillLoaded
					if found, ok := boolean(ev, "found"); ok && !found {
						se.Status = schemas.SkillNotFound
					}
				case schemas.ToolLoadSkill, schemas.ToolLoadSkillReference, schemas.ToolReadSkill:
					se.Status = str(ev, "status")
				default:
					f.skip("unknown tool")
					continue
				}
				if err := schemas.Validate(se, schemas.DefaultLimits()); err != nil {
					f.skip("invalid event (status " + se.Status + ")")
					continue
				}
				turn++
				c.skillEvents = append(c.skillEvents, se)
				f.Read++
			}
		}
		im.file(f)
	}
}

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

// Helpers over decoded JSON objects.

func str(m map[string]any, k string) string {
	switch v := m[k].(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return ""
}

func number(m map[string]any, k string) (float64, bool) {
	switch v := m[k].(type) {
	case float64:
		return v, true
	case bool:
		return b2f(v), true
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		return f, err == nil
	case json.Number:
		f, err := v.Float64()
		return f, err == nil
	}
	return 0, false
}

func boolean(m map[string]any, k string) (bool, bool) {
	switch v := m[k].(type) {
	case bool:
		return v, true
	case float64:
		return v != 0, true
	case string:
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "true", "1", "yes", "pass", "passed":
			return true, true
		case "false", "0", "no", "fail", "failed":
			return false, true
		}
	}
	return false, false
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// parseTime parses A-Evolve's zone-less local timestamps (read as UTC) and
// RFC 3339.
func parseTime(s string) (time.Time, bool) {
	if s == "" {
		return time.Time{}, false
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05", "2006-01-02 15:04:05"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}
