package aevolve

import (
	"fmt"
	"sort"
	"strings"
)

// FileReport says what was read from one file.
type FileReport struct {
	// Path is relative to Config.Dir.
	Path string
	// Read counts rows (lines, records, tags) turned into events or used.
	Read int
	// Skipped counts rows not used; Reasons counts them by reason.
	Skipped int
	Reasons map[string]int
	// Refused, when not empty, says why the file was not read at all
	// (see RefusedError).
	Refused string
}

func (f *FileReport) skip(reason string) {
	f.Skipped++
	if f.Reasons == nil {
		f.Reasons = map[string]int{}
	}
	f.Reasons[reason]++
}

// String is "path: read N rows, skipped M (reason: k, ...)", or
// "path: refused: why" for a refused file.
func (f *FileReport) String() string {
	if f.Refused != "" {
		return fmt.Sprintf("%s: refused: %s", f.Path, f.Refused)
	}
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
	// Refused counts the files refused as unsafe to read (a link out of
	// the cell, not a regular file, over Config.MaxFileBytes, a git
	// workspace that cannot be copied); each has its line in Files.
	Refused int
}

// file records f in the summary and writes its line to the report.
func (im *importer) file(f *FileReport) {
	im.sum.Files = append(im.sum.Files, *f)
	if im.report != nil {
		fmt.Fprintln(im.report, f.String())
	}
}

// attempts is the number of task attempts emitted over all cells.
func (s *Summary) attempts() int {
	n := 0
	for _, c := range s.Cells {
		n += c.Attempts
	}
	return n
}
