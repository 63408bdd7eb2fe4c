package aevolve

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
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
// "path: refused: why" for a refused file. The path and the reasons (which
// may hold names read from the run directory) are escaped as shown does.
func (f *FileReport) String() string {
	if f.Refused != "" {
		return fmt.Sprintf("%s: refused: %s", shown(f.Path), shown(f.Refused))
	}
	s := fmt.Sprintf("%s: read %d rows, skipped %d", shown(f.Path), f.Read, f.Skipped)
	if len(f.Reasons) > 0 {
		keys := make([]string, 0, len(f.Reasons))
		for k := range f.Reasons {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s: %d", shown(k), f.Reasons[k])
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

// String is the cell's line of an import summary: "cell: benchmark agent
// A (model) evolver E (model) seed S: N tasks, ...", every name escaped as
// shown does (cell ids are directory names of the run).
func (c *CellReport) String() string {
	evolver := c.Evolver
	if evolver == "" {
		evolver = "none"
	}
	return fmt.Sprintf("%s: %s agent %s (%s) evolver %s (%s) seed %d: %d tasks, %d attempts, %d skill events, %d updates, done %v",
		shown(c.CellID), shown(c.Benchmark), shown(c.Agent), shown(c.AgentModelID), shown(evolver), shown(c.EvolverModelID),
		c.Seed, c.Tasks, c.Attempts, c.SkillEvents, c.Updates, c.Done)
}

// Summary is what an import read and emitted.
type Summary struct {
	Campaign string
	Cells    []CellReport
	Files    []FileReport
	// Events counts emitted events.
	Events int
	// Refused counts the files and cell directories refused as unsafe to
	// read (a symbolic link, a file with more than one hard link, a path
	// out of the cell, not a regular file, over Config.MaxFileBytes, a git
	// workspace that cannot be copied); each has its line in Files.
	Refused int
}

// WriteText writes the summary for a person: one line per cell
// (CellReport.String) and "campaign C: produced N events from M cells",
// then, when any was refused, how many files and cell directories were.
// Names are escaped as shown does.
func (s *Summary) WriteText(w io.Writer) error {
	var b strings.Builder
	for i := range s.Cells {
		b.WriteString(s.Cells[i].String())
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "campaign %s: produced %d events from %d cells\n", shown(s.Campaign), s.Events, len(s.Cells))
	if s.Refused > 0 {
		fmt.Fprintf(&b, "refused %d unsafe files or cell directories (the report on stderr names each and why)\n", s.Refused)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// shown is s as the importer prints it: unchanged when every character is
// printable (letters, marks, numbers, punctuation, symbols and the ASCII
// space), else quoted by strconv.Quote, so that a file or directory name
// holding terminal escape codes ("\x1b[31m"), other control characters,
// bidirectional overrides or invalid UTF-8 is printed escaped, never
// written raw to a terminal or a log.
func shown(s string) string {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n <= 1 {
				return strconv.Quote(s)
			}
		}
		if !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
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
