package aevolve

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/schemas"
)

// Run directories are untrusted input: these tests build hostile ones in
// t.TempDir() and check that the importer neither runs a program they name,
// nor reads outside the cell, nor reads a device, a FIFO or an unbounded
// file, and that it goes on with the rest of the run directory.

// goodCell writes a plain MCP baseline cell with two rows next to the
// hostile one, so that an import has something to import.
func goodCell(t *testing.T, root string) {
	t.Helper()
	write(t, filepath.Join(root, "sonnet46_x_none_mcp_s9"), "summary.csv",
		"task_id,result,score,elapsed_s,output_len,detail\ng1,PASS,1,1,1,\ng2,FAIL,0,1,1,\n")
}

// importWithin runs importAll, failing the test when it does not return
// within d (an importer blocked on a FIFO or reading /dev/zero).
func importWithin(t *testing.T, d time.Duration, cfg Config) ([]schemas.Event, Summary, string) {
	t.Helper()
	type res struct {
		evs []schemas.Event
		sum Summary
		rep string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		var r res
		var b strings.Builder
		r.sum, r.err = Import(context.Background(), cfg, func(ev schemas.Event) error {
			r.evs = append(r.evs, ev)
			return schemas.Validate(ev, schemas.DefaultLimits())
		}, &b)
		r.rep = b.String()
		ch <- r
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("import %s: %v\n%s", cfg.Dir, r.err, r.rep)
		}
		return r.evs, r.sum, r.rep
	case <-time.After(d):
		t.Fatalf("import of %s did not return within %s (blocked on a hostile file)", cfg.Dir, d)
	}
	return nil, Summary{}, ""
}

// attemptsOf returns the task ids of cell's task attempts.
func attemptsOf(evs []schemas.Event, cell string) []string {
	var ids []string
	for _, ev := range evs {
		if a, ok := ev.(*schemas.TaskAttempt); ok && a.CellID == cell {
			ids = append(ids, a.TaskID)
		}
	}
	return ids
}

// TestGitConfigOfTheWorkspaceRunsNoProgram: a workspace whose .git/config
// names programs (gpg.program with log.showSignature on a signed-looking
// commit, core.fsmonitor, diff.external, textconv, core.pager) must not make
// the importer run any of them; the updates are still read.
func TestGitConfigOfTheWorkspaceRunsNoProgram(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	marker := filepath.Join(base, "pwned")
	evil := filepath.Join(base, "evil.sh")
	if err := os.WriteFile(evil, []byte("#!/bin/sh\necho \"$0 $*\" >> '"+marker+"'\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "camp")
	c := filepath.Join(root, "sonnet46_x_opus46_mcp_s1")
	write(t, c, "summary.csv", "task_id,result,score,elapsed_s,output_len,detail,evo_cycle\nm1,PASS,1,1,1,,1\n")
	ws := newWS(t, filepath.Join(c, "workspace"))
	ws.commit("evo-0", map[string]string{"prompts/system.md": "v0\n", ".gitattributes": "*.md diff=evil\n"})
	ws.commit("evo-1", map[string]string{"prompts/system.md": "v1\n"})
	// Re-tag evo-1 on a copy of its commit that carries a gpgsig header, so
	// that log.showSignature asks gpg.program to verify it.
	out, err := exec.Command("git", "-C", ws.dir, "cat-file", "commit", "evo-1").Output()
	if err != nil {
		t.Fatal(err)
	}
	head, body, _ := strings.Cut(string(out), "\n\n")
	signed := head + "\ngpgsig -----BEGIN PGP SIGNATURE-----\n \n AAAA\n -----END PGP SIGNATURE-----\n\n" + body
	cmd := exec.Command("git", "-C", ws.dir, "hash-object", "-t", "commit", "-w", "--stdin")
	cmd.Stdin = strings.NewReader(signed)
	id, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	ws.git("tag", "-f", "evo-1", strings.TrimSpace(string(id)))
	f, err := os.OpenFile(filepath.Join(ws.dir, ".git", "config"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString("[log]\n\tshowSignature = true\n[gpg]\n\tprogram = " + evil + "\n[gpg \"ssh\"]\n\tprogram = " + evil +
		"\n[core]\n\tfsmonitor = " + evil + "\n\tpager = " + evil + "\n[diff]\n\texternal = " + evil +
		"\n[diff \"evil\"]\n\ttextconv = " + evil + "\n\tcommand = " + evil + "\n")
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	evs, sum, rep := importWithin(t, time.Minute, Config{Dir: root})
	if b, err := os.ReadFile(marker); err == nil {
		t.Fatalf("the workspace's git config ran %s:\n%s", evil, b)
	}
	var ups int
	for _, ev := range evs {
		if _, ok := ev.(*schemas.HarnessUpdate); ok {
			ups++
		}
	}
	if ups != 1 || len(sum.Cells) != 1 {
		t.Fatalf("%d updates, %d cells; want the evo-1 update of the one cell\n%s", ups, len(sum.Cells), rep)
	}
}

// TestLinkOutOfTheCellIsRefused: a result file linked to a file outside the
// cell directory is not imported; the report says why and the other cells
// are imported.
func TestLinkOutOfTheCellIsRefused(t *testing.T) {
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
	if err := os.Symlink(secret, filepath.Join(c, "summary.csv")); err != nil {
		t.Fatal(err)
	}
	goodCell(t, root)
	evs, sum, rep := importWithin(t, time.Minute, Config{Dir: root})
	if got := attemptsOf(evs, "sonnet46_x_none_mcp_s1"); len(got) != 0 {
		t.Fatalf("imported %v through a link out of the cell\n%s", got, rep)
	}
	if got := attemptsOf(evs, "sonnet46_x_none_mcp_s9"); len(got) != 2 {
		t.Fatalf("the good cell: %v, want its 2 rows\n%s", got, rep)
	}
	if sum.Refused != 1 || !strings.Contains(rep, "summary.csv: refused") {
		t.Fatalf("refused %d, want 1 named in the report:\n%s", sum.Refused, rep)
	}
}

// TestDeviceAndFIFOAreRefused: a result file linked to /dev/zero (inside
// the tree through a second link) or made a FIFO is refused, not read
// forever or waited on.
func TestDeviceAndFIFOAreRefused(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "camp")
	c := filepath.Join(root, "sonnet46_x_none_mcp_s1")
	if err := os.MkdirAll(c, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(c, "summary.csv")); err != nil {
		t.Fatal(err)
	}
	c2 := filepath.Join(root, "qwen235b_x_none_swe_s1")
	if err := os.MkdirAll(c2, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(c2, "results.json"), 0o644); err != nil {
		t.Fatalf("mkfifo (every Linux has FIFOs): %v", err)
	}
	goodCell(t, root)
	evs, sum, rep := importWithin(t, 20*time.Second, Config{Dir: root})
	if got := attemptsOf(evs, "sonnet46_x_none_mcp_s9"); len(got) != 2 {
		t.Fatalf("the good cell: %v, want its 2 rows\n%s", got, rep)
	}
	if sum.Refused != 2 || !strings.Contains(rep, "summary.csv: refused") || !strings.Contains(rep, "results.json: refused") {
		t.Fatalf("refused %d, want both files named:\n%s", sum.Refused, rep)
	}
}

// TestNothingButRefusedFilesIsAnError: when every result file is refused
// the import fails (wrapping ErrRefused) instead of reporting success.
func TestNothingButRefusedFilesIsAnError(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "camp")
	c := filepath.Join(root, "sonnet46_x_none_mcp_s1")
	if err := os.MkdirAll(c, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(c, "summary.csv")); err != nil {
		t.Fatal(err)
	}
	_, err := Import(context.Background(), Config{Dir: root}, func(schemas.Event) error { return nil }, nil)
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("err %v, want ErrRefused", err)
	}
}

// TestFileOverTheCapIsRefused: a result file over the byte cap is refused
// by its size, naming the cap, instead of read whole.
func TestFileOverTheCapIsRefused(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "camp")
	c := filepath.Join(root, "qwen235b_x_none_swe_s1")
	write(t, c, "results.json", "")
	if err := os.Truncate(filepath.Join(c, "results.json"), 64<<20+1); err != nil { // sparse
		t.Fatal(err)
	}
	goodCell(t, root)
	_, sum, rep := importWithin(t, time.Minute, Config{Dir: root})
	if sum.Refused != 1 || !strings.Contains(rep, "results.json: refused") || !strings.Contains(rep, "67108864-byte cap") {
		t.Fatalf("refused %d, want results.json refused naming the cap:\n%s", sum.Refused, rep)
	}
}

// TestDoneMarkerStaysInTheCell: an absolute done_marker or one that climbs
// out of the cell does not finish the cell, even where the file exists.
func TestDoneMarkerStaysInTheCell(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	write(t, base, "outside", "")
	root := filepath.Join(base, "camp")
	for cell, marker := range map[string]string{"qwen235b_x_none_swe_s1": filepath.Join(base, "outside"), "qwen235b_x_none_swe_s2": "../../outside"} {
		c := filepath.Join(root, cell)
		write(t, c, "BENCHMARK_REPORT.md", "done_marker: "+marker+"\n")
		write(t, c, "results.json", `[{"instance_id": "a", "success": true, "score": 1}]`)
	}
	evs, sum, rep := importWithin(t, time.Minute, Config{Dir: root})
	for _, ev := range evs {
		if f, ok := ev.(*schemas.CellFinished); ok {
			t.Errorf("cell %s finished by a done marker outside the cell\n%s", f.CellID, rep)
		}
	}
	if len(sum.Cells) != 2 || !strings.Contains(rep, "done_marker") {
		t.Fatalf("%d cells, want 2 and a report naming the refused done_marker:\n%s", len(sum.Cells), rep)
	}
}

// TestSummaryCSVHostileRows: a stray quote costs its own row, reported by
// line, not every row after it; a UTF-8 BOM is no part of the first column;
// an evo_cycle out of int32 range is a row error, not a wrapped cycle.
func TestSummaryCSVHostileRows(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "camp")
	c := filepath.Join(root, "sonnet46_x_opus46_mcp_s1")
	write(t, c, "summary.csv", "\ufefftask_id,result,score,elapsed_s,output_len,detail,evo_cycle\n"+
		"m1,PASS,1,1,1,,1\n"+
		"m2,\"PASS,1,1,1,,1\n"+
		"m3,PASS,1,1,1,\"two\nlines\",1\n"+
		"m4,FAIL,0,1,1,,4294967297\n"+
		"m5,FAIL,0,1,1,,-1\n"+
		"m6,PASS,1,1,1,,2\n")
	evs, _, rep := importWithin(t, time.Minute, Config{Dir: root})
	got := attemptsOf(evs, "sonnet46_x_opus46_mcp_s1")
	if strings.Join(got, ",") != "m1,m3,m6" {
		t.Fatalf("attempts %v, want m1,m3,m6\n%s", got, rep)
	}
	for _, want := range []string{"line 3", "evo_cycle out of range"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
	for _, ev := range evs {
		if a, ok := ev.(*schemas.TaskAttempt); ok && a.Cycle < 0 {
			t.Errorf("%s: cycle %d", a.TaskID, a.Cycle)
		}
	}
}

// TestSkillsBenchHostileNumbers: a SkillsBench row whose cycle or batch is
// no round number (above 2^32, fractional, negative, NaN) is skipped and
// reported, never wrapped into an int32; the other rows are kept.
func TestSkillsBenchHostileNumbers(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "camp")
	cell := "haiku45_x_opus46_sb_s1"
	write(t, filepath.Join(root, cell), "results.jsonl", ""+
		`{"task_id": "t1", "passed": true, "score": 1.0, "cycle": 1, "batch": 1, "final": false}`+"\n"+
		`{"task_id": "t2", "passed": true, "score": 1.0, "cycle": 4294967297, "batch": 1, "final": false}`+"\n"+
		`{"task_id": "t3", "passed": true, "score": 1.0, "cycle": 1.5, "batch": 1, "final": false}`+"\n"+
		`{"task_id": "t4", "passed": true, "score": 1.0, "cycle": 1, "batch": -4, "final": false}`+"\n"+
		`{"task_id": "t5", "passed": true, "score": 1.0, "cycle": "NaN", "batch": 1, "final": false}`+"\n"+
		`{"task_id": "t6", "passed": true, "score": 1.0, "cycle": 2, "batch": 2, "final": false}`+"\n"+
		`{"task_id": "t7", "passed": true, "batch": 1e12, "final": true}`+"\n")
	evs, _, rep := importWithin(t, time.Minute, Config{Dir: root})
	if got := strings.Join(attemptsOf(evs, cell), ","); got != "t1,t6" {
		t.Fatalf("attempts %s, want t1,t6\n%s", got, rep)
	}
	for _, want := range []string{"cycle out of range: 3", "batch out of range: 2"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
}
