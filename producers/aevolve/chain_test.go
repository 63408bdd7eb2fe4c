package aevolve

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/harnessflow/harnessflow/schemas"
)

// checkChain follows an imported cell's events the way the processors'
// stage A does (processors/cells.go): an update must chain from the cell's
// current version; an accepted one makes its version known and, unless it
// was rolled back, current; every attempt must name a known version.
func checkChain(t *testing.T, evs []schemas.Event) (updates, attempts int) {
	t.Helper()
	current, known := "evo-0", map[string]bool{"evo-0": true}
	for _, ev := range evs {
		switch e := ev.(type) {
		case *schemas.HarnessUpdate:
			updates++
			if e.FromVersion != current {
				t.Errorf("update %s: from_version %s, the cell is at %s", e.UpdateID, e.FromVersion, current)
			}
			if e.Accepted {
				known[e.ToVersion] = true
				if !e.RolledBack {
					current = e.ToVersion
				}
			}
		case *schemas.TaskAttempt:
			attempts++
			if !known[e.HarnessVersion] {
				t.Errorf("attempt %s/%d of cycle %d: harness_version %s is not a version of the cell (known %v)", e.TaskID, e.Attempt, e.Cycle, e.HarnessVersion, known)
			}
		}
	}
	return updates, attempts
}

// TestImportKeepsTheVersionChain: tags whose diff changes no harness file,
// and updates the evolver's verdict rejected or rolled back, do not move
// the cell to their version; the next update chains from where the cell
// is, and each round's attempts name the version the agent ran. Assuming
// evo-n for every tag n broke the chain at the first such tag, and the
// processors dead-lettered every later update and attempt.
func TestImportKeepsTheVersionChain(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		evo1    map[string]string
		verdict string           // unified_steps.jsonl line of cycle 1 ("": none)
		wantHV  map[int32]string // by cycle (cycle c runs after c-1 evolutions)
		updates int
	}{
		{"all accepted", map[string]string{"prompts/system.md": "v1\n"}, "", map[int32]string{1: "evo-0", 2: "evo-1", 3: "evo-2", 4: "evo-3"}, 3},
		{"manifest only", map[string]string{"manifest.yaml": "m: 1\n"}, "", map[int32]string{1: "evo-0", 2: "evo-0", 3: "evo-2", 4: "evo-3"}, 2},
		{"rejected", map[string]string{"prompts/system.md": "v1\n"}, `{"cycle": 1, "unified_verdict": {"accept": false, "rollback": false, "reason": "worse"}}`,
			map[int32]string{1: "evo-0", 2: "evo-0", 3: "evo-2", 4: "evo-3"}, 3},
		{"rolled back", map[string]string{"prompts/system.md": "v1\n"}, `{"cycle": 1, "unified_verdict": {"accept": true, "rollback": true, "reason": "regressed"}}`,
			map[int32]string{1: "evo-0", 2: "evo-0", 3: "evo-2", 4: "evo-3"}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "camp")
			dir := filepath.Join(root, "sonnet46_x_opus46_mcp_s1")
			csv := "task_id,result,score,elapsed_s,output_len,detail,evo_cycle\n"
			for cy := 0; cy < 4; cy++ {
				csv += fmt.Sprintf("m%d,PASS,1,1,1,,%d\n", cy, cy)
			}
			write(t, dir, "summary.csv", csv)
			if c.verdict != "" {
				write(t, dir, "workspace/evolution/unified_steps.jsonl", c.verdict+"\n")
			}
			ws := newWS(t, filepath.Join(dir, "workspace"))
			ws.commit("evo-0", map[string]string{"prompts/system.md": "v0\n"})
			ws.commit("pre-evo-1", map[string]string{})
			ws.commit("evo-1", c.evo1)
			ws.commit("pre-evo-2", map[string]string{})
			ws.commit("evo-2", map[string]string{"prompts/system.md": "v2\n"})
			ws.commit("pre-evo-3", map[string]string{})
			ws.commit("evo-3", map[string]string{"prompts/system.md": "v3\n"})

			evs, _, rep := importAll(t, Config{Dir: root})
			updates, attempts := checkChain(t, evs)
			if updates != c.updates || attempts != 4 {
				t.Errorf("%d updates and %d attempts, want %d and 4\n%s", updates, attempts, c.updates, rep)
			}
			for _, ev := range evs {
				if a, ok := ev.(*schemas.TaskAttempt); ok && a.HarnessVersion != c.wantHV[a.Cycle] {
					// (a cycle outside wantHV reads "" and fails too)
					t.Errorf("attempt of cycle %d runs %s, want %s", a.Cycle, a.HarnessVersion, c.wantHV[a.Cycle])
				}
			}
		})
	}
}
