package aevolve

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/harnessflow/harnessflow/schemas"
)

// TestSkillEventsWithoutAnAttemptAreReported: a trajectory's skill events
// whose (task, attempt) has no result row cannot be emitted (nothing to
// belong to); the report names them as skipped instead of counting them as
// read and dropping them in silence. The matched ones are emitted.
func TestSkillEventsWithoutAnAttemptAreReported(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "camp")
	cell := "haiku45_x_none_sb_s1"
	c := filepath.Join(root, cell)
	write(t, c, "results.jsonl", `{"task_id": "t1", "passed": true, "score": 1.0, "cycle": 1, "batch": 1, "final": true}
`)
	traj := `{"steps":[{"skill_tool_events":[{"tool":"load_skill","name":"a","status":"loaded"}]}]}`
	write(t, c, "outputs/official_like/t1__"+cell+"-cycle-1/agent/trajectory.json", traj)
	write(t, c, "outputs/official_like/t9__"+cell+"-cycle-1/agent/trajectory.json", traj)
	evs, _, rep := importAll(t, Config{Dir: root})
	var got []string
	for _, ev := range evs {
		if s, ok := ev.(*schemas.SkillEvent); ok {
			got = append(got, s.TaskID)
		}
	}
	if len(got) != 1 || got[0] != "t1" {
		t.Fatalf("skill events emitted for %v, want [t1]\n%s", got, rep)
	}
	if want := "(skill events): read 0 rows, skipped 1 (no attempt row for task t9 attempt 1: 1)"; !strings.Contains(rep, want) {
		t.Fatalf("report lacks %q:\n%s", want, rep)
	}
}

// TestRepeatedRowsBecomeOneAttempt: a results file that lists a task twice
// (a rerun appended) yields one attempt, the last row's, and cell_finished
// counts it once; before, both rows went out under the same event id (one
// attempt to the processors, the other to ClickHouse) and the finish
// counted two, which held it until the pending timeout.
func TestRepeatedRowsBecomeOneAttempt(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "camp")
	c := filepath.Join(root, "qwen235b_x_none_swe_s1")
	write(t, c, "BENCHMARK_REPORT.md", "done_marker: DONE\n")
	write(t, c, "DONE", "")
	write(t, c, "results.json", `[{"instance_id": "a", "success": false, "score": 0, "error": "crash"}, {"instance_id": "b", "success": true, "score": 1, "error": null}, {"instance_id": "a", "success": true, "score": 1, "error": null}]`)
	evs, _, rep := importAll(t, Config{Dir: root})
	var attempts []*schemas.TaskAttempt
	var finished *schemas.CellFinished
	for _, ev := range evs {
		switch e := ev.(type) {
		case *schemas.TaskAttempt:
			attempts = append(attempts, e)
		case *schemas.CellFinished:
			finished = e
		}
	}
	if len(attempts) != 2 || finished == nil || finished.Attempts != 2 {
		t.Fatalf("%d attempts, finish %+v; want 2 and a finish counting 2\n%s", len(attempts), finished, rep)
	}
	for _, a := range attempts {
		if a.TaskID == "a" && (!a.Success || a.Score != 1 || a.Status != schemas.StatusOK) {
			t.Errorf("task a: %+v, want the last row (success, score 1)", a)
		}
	}
	if !strings.Contains(rep, "repeated task and attempt (the last row kept): 1") {
		t.Errorf("report lacks the repeated row:\n%s", rep)
	}
}
