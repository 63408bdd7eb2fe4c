package aevolve

import (
	"bytes"
	"context"
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
	root := filepath.Join(t.TempDir(), "camp")
	cell := "haiku45_x_none_sb_s1"
	c := filepath.Join(root, cell)
	write(t, c, "results.jsonl", `{"task_id": "t1", "passed": true, "score": 1.0, "cycle": 1, "batch": 1, "final": true}
`)
	traj := `{"steps":[{"skill_tool_events":[{"tool":"load_skill","name":"a","status":"loaded"}]}]}`
	write(t, c, "outputs/official_like/t1__"+cell+"-cycle-1/agent/trajectory.json", traj)
	write(t, c, "outputs/official_like/t9__"+cell+"-cycle-1/agent/trajectory.json", traj)
	var evs []schemas.Event
	var rep bytes.Buffer
	if _, err := Import(context.Background(), Config{Dir: root}, func(ev schemas.Event) error {
		evs = append(evs, ev)
		return nil
	}, &rep); err != nil {
		t.Fatalf("import: %v\n%s", err, rep.String())
	}
	var got []string
	for _, ev := range evs {
		if s, ok := ev.(*schemas.SkillEvent); ok {
			got = append(got, s.TaskID)
		}
	}
	if len(got) != 1 || got[0] != "t1" {
		t.Fatalf("skill events emitted for %v, want [t1]\n%s", got, rep.String())
	}
	if want := "(skill events): read 0 rows, skipped 1 (no attempt row for task t9 attempt 1: 1)"; !strings.Contains(rep.String(), want) {
		t.Fatalf("report lacks %q:\n%s", want, rep.String())
	}
}
