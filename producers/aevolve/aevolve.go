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
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"time"

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
	cells, links, err := scanCells(cfg.Dir)
	if err != nil {
		return Summary{}, fmt.Errorf("scan %s: %w", shown(cfg.Dir), err)
	}
	if len(cells) == 0 && len(links) == 0 {
		return Summary{}, fmt.Errorf("%w in %s", ErrNoCells, shown(cfg.Dir))
	}
	im := &importer{cfg: cfg, ctx: ctx, emit: emit, report: report, sum: Summary{Campaign: cfg.Campaign}}
	benches := map[string]bool{}
	for _, c := range cells {
		_, _, bm, _, _ := ParseCellName(filepath.Base(filepath.Clean(c.path)))
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
	for _, l := range links {
		im.refuseCell(l, linkedCell)
	}
	for _, c := range cells {
		if err := ctx.Err(); err != nil {
			return im.sum, err
		}
		if err := im.cell(c); err != nil {
			return im.sum, fmt.Errorf("cell %s: %w", shown(filepath.Base(filepath.Clean(c.path))), err)
		}
	}
	if im.sum.Refused > 0 && im.sum.attempts() == 0 {
		return im.sum, fmt.Errorf("%w: %d unsafe files or cell directories of %s refused and no task attempt left to import (the report names each and why)", ErrRefused, im.sum.Refused, shown(cfg.Dir))
	}
	return im.sum, nil
}

// importer is one Import call: its configuration, where events go and
// what it has read and emitted so far.
type importer struct {
	cfg    Config
	ctx    context.Context
	emit   func(schemas.Event) error
	report io.Writer
	sum    Summary
}

// out stamps ev's envelope (project, source, time at, derived event id)
// and emits it.
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

// rel is p as the report names it: relative to the base name of Config.Dir.
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

// linkedCell is why a cell directory that is a symbolic link is refused.
const linkedCell = "is a symbolic link, not a directory of the run: not followed, none of its tasks imported " +
	"(a link could bring any directory of the machine into the run; copy the cell into the run directory to import it)"

// refuseCell reports the cell directory p as refused for reason and counts
// it in Summary.Refused: none of its files is read.
func (im *importer) refuseCell(p, reason string) {
	im.sum.Refused++
	im.file(&FileReport{Path: im.rel(p), Refused: reason})
}

// cell reads one cell directory with the readers of its benchmark and
// emits its events; a cell directory replaced since the scan is refused.
func (im *importer) cell(cd cellDir) error {
	dir := cd.path
	name := filepath.Base(filepath.Clean(dir))
	agent, evolver, bm, seed, _ := ParseCellName(name)
	c := &cellState{dir: dir, id: name, bm: bm, agent: agent, evolver: evolver, seed: seed,
		taskOrder: map[string]int{}, obsCycle: map[string]int32{}, obsTime: map[string]time.Time{},
		obsInput: map[string]string{}, skillsAt: map[int]int{}, updateTime: map[string]time.Time{}}
	fsys, err := openCell(dir, cd.info, im.cfg.MaxFileBytes)
	var re *RefusedError
	if errors.As(err, &re) {
		im.refuseCell(dir, re.Reason)
		return nil
	}
	if err != nil {
		return err
	}
	c.fs = fsys
	defer fsys.close()
	defer func() { c.git.removeCopy() }()
	c.rep = im.readReport(c)
	im.readObservations(c)
	if err := im.readWorkspace(c); err != nil {
		return err
	}
	switch bm {
	case "swe":
		if c.fs.exists("results.json") {
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
