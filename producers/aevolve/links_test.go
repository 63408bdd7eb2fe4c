package aevolve

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/schemas"
)

// A run directory is untrusted input: a link in it may name any file or
// directory of the machine that imports it (another user's run, a secret).
// These tests check that a cell directory or a file that is a symbolic
// link, and a file with more than one hard link, are refused by name and
// none of their tasks imported, and that names with terminal escape codes
// are printed escaped.

// TestSymlinkedCellDirectoryIsRefused: a cell directory linked into the run
// (to a directory outside it) is refused by name, counted in the summary,
// and none of its tasks is imported; the other cells are. Before, the link
// was followed and its tasks imported.
func TestSymlinkedCellDirectoryIsRefused(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	outside := filepath.Join(base, "store", "sonnet46_x_none_mcp_s1")
	write(t, outside, "summary.csv", "task_id,result,score,elapsed_s,output_len,detail\nsecret1,PASS,1,1,1,\nsecret2,FAIL,0,1,1,\n")
	root := filepath.Join(base, "camp")
	goodCell(t, root)
	if err := os.Symlink(outside, filepath.Join(root, "sonnet46_x_none_mcp_s1")); err != nil {
		t.Fatal(err)
	}
	// A link to a cell of the run itself is refused too: a link is never
	// followed to a cell, wherever it points.
	if err := os.Symlink(filepath.Join(root, "sonnet46_x_none_mcp_s9"), filepath.Join(root, "sonnet46_x_none_mcp_s2")); err != nil {
		t.Fatal(err)
	}
	// A link to a directory that is no cell is not followed (no loops).
	if err := os.Symlink(base, filepath.Join(root, "loop")); err != nil {
		t.Fatal(err)
	}
	evs, sum, rep := importWithin(t, time.Minute, Config{Dir: root})
	for _, c := range []string{"sonnet46_x_none_mcp_s1", "sonnet46_x_none_mcp_s2"} {
		if got := attemptsOf(evs, c); len(got) != 0 {
			t.Errorf("imported %v of %s, a cell directory that is a symbolic link\n%s", got, c, rep)
		}
		if want := "camp/" + c + ": refused: is a symbolic link"; !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
	for _, ev := range evs {
		if s, ok := ev.(*schemas.CellStarted); ok && s.CellID != "sonnet46_x_none_mcp_s9" {
			t.Errorf("cell_started for %s", s.CellID)
		}
	}
	if got := attemptsOf(evs, "sonnet46_x_none_mcp_s9"); len(got) != 2 {
		t.Fatalf("the good cell: %v, want its 2 rows\n%s", got, rep)
	}
	if sum.Refused != 2 || len(sum.Cells) != 1 {
		t.Fatalf("refused %d, %d cells; want 2 refused and the good cell\n%s", sum.Refused, len(sum.Cells), rep)
	}
	cells, err := FindCells(root)
	if err != nil || len(cells) != 1 || filepath.Base(cells[0]) != "sonnet46_x_none_mcp_s9" {
		t.Fatalf("FindCells: %v, %v; want the plain s9 only", cells, err)
	}
	// The link named as the directory to import is refused as well, and
	// with nothing else to import the import fails.
	_, err = Import(context.Background(), Config{Dir: filepath.Join(root, "sonnet46_x_none_mcp_s1")}, func(schemas.Event) error { return nil }, nil)
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("import of the link itself: %v, want ErrRefused", err)
	}
}

// TestSymlinkedFileIsRefused: a result file that is a symbolic link is
// refused by name even when it points to a file of the same cell; before,
// a link inside the cell was followed.
func TestSymlinkedFileIsRefused(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "camp")
	c := filepath.Join(root, "sonnet46_x_none_mcp_s1")
	write(t, c, "real.csv", "task_id,result,score,elapsed_s,output_len,detail\nm1,PASS,1,1,1,\n")
	if err := os.Symlink("real.csv", filepath.Join(c, "summary.csv")); err != nil {
		t.Fatal(err)
	}
	goodCell(t, root)
	evs, sum, rep := importWithin(t, time.Minute, Config{Dir: root})
	if got := attemptsOf(evs, "sonnet46_x_none_mcp_s1"); len(got) != 0 {
		t.Fatalf("imported %v through a symbolic link\n%s", got, rep)
	}
	if got := attemptsOf(evs, "sonnet46_x_none_mcp_s9"); len(got) != 2 {
		t.Fatalf("the good cell: %v, want its 2 rows\n%s", got, rep)
	}
	if want := "sonnet46_x_none_mcp_s1/summary.csv: refused: is a symbolic link"; sum.Refused != 1 || !strings.Contains(rep, want) {
		t.Fatalf("refused %d, want 1 and %q in the report:\n%s", sum.Refused, want, rep)
	}
}

// TestHardLinkedFileIsRefused: a result file with a second hard link (here
// to a file outside the run, as a link to another user's file would be) is
// refused by name and its rows are not imported.
func TestHardLinkedFileIsRefused(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	secret := filepath.Join(base, "elsewhere.csv")
	if err := os.WriteFile(secret, []byte("task_id,result,score,elapsed_s,output_len,detail\nsecret,PASS,1,1,1,\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "camp")
	c := filepath.Join(root, "sonnet46_x_none_mcp_s1")
	if err := os.MkdirAll(c, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(secret, filepath.Join(c, "summary.csv")); err != nil {
		testenv.Missing(t, fmt.Sprintf("no hard links on this file system (TMPDIR): %v", err))
	}
	goodCell(t, root)
	evs, sum, rep := importWithin(t, time.Minute, Config{Dir: root})
	if got := attemptsOf(evs, "sonnet46_x_none_mcp_s1"); len(got) != 0 {
		t.Fatalf("imported %v through a hard link\n%s", got, rep)
	}
	if got := attemptsOf(evs, "sonnet46_x_none_mcp_s9"); len(got) != 2 {
		t.Fatalf("the good cell: %v, want its 2 rows\n%s", got, rep)
	}
	if want := "sonnet46_x_none_mcp_s1/summary.csv: refused: has 2 hard links"; sum.Refused != 1 || !strings.Contains(rep, want) {
		t.Fatalf("refused %d, want 1 and %q in the report:\n%s", sum.Refused, want, rep)
	}
}

// TestNamesArePrintedEscaped: names of the run directory holding terminal
// escape codes (a cell, a file, a refused link) are printed escaped in the
// report and in errors, never raw; before, "\x1b[31m" reached the terminal.
func TestNamesArePrintedEscaped(t *testing.T) {
	t.Parallel()
	const esc = "\x1b[31m"
	base := t.TempDir()
	root := filepath.Join(base, "camp")
	goodCell(t, root)
	evil := filepath.Join(root, "sonnet46"+esc+"_x_none_mcp_s1")
	write(t, evil, "summary.csv", "task_id,result,score,elapsed_s,output_len,detail\nm1,PASS,1,1,1,\nm2,\"PASS,1,1,1,\n")
	if err := os.Symlink(filepath.Join(base, "nowhere"), filepath.Join(root, "opus46"+esc+"_x_none_mcp_s3")); err != nil {
		t.Fatal(err)
	}
	_, _, rep := importWithin(t, time.Minute, Config{Dir: root, Campaign: "camp"})
	if strings.Contains(rep, "\x1b") {
		t.Errorf("report prints an escape code raw:\n%s", rep)
	}
	for _, want := range []string{`sonnet46\x1b[31m_x_none_mcp_s1/summary.csv`, `opus46\x1b[31m_x_none_mcp_s3": refused`} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q (the name escaped):\n%s", want, rep)
		}
	}
	// An error naming the directory to import escapes it too.
	only := filepath.Join(base, "run"+esc)
	if err := os.MkdirAll(only, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "nowhere"), filepath.Join(only, "opus46_x_none_mcp_s3")); err != nil {
		t.Fatal(err)
	}
	_, err := Import(context.Background(), Config{Dir: only, Campaign: "camp"}, func(schemas.Event) error { return nil }, nil)
	if err == nil || strings.Contains(err.Error(), "\x1b") || !strings.Contains(err.Error(), `run\x1b[31m`) {
		t.Fatalf("err %v: want the directory named escaped", err)
	}
	if s := (&RefusedError{Path: "a" + esc + ".csv", Reason: "is a FIFO"}).Error(); strings.Contains(s, "\x1b") {
		t.Fatalf("RefusedError prints %q raw", s)
	}
}
