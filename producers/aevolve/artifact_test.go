package aevolve

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/harnessflow/harnessflow/schemas"
)

// TestUnfitArtifactsAreLeftOutNotFatal: a workspace change that cannot be an
// artifact (a memory log over the 1 MiB cap, a binary file) is left out of
// its update and named in the report; the rest of the update, the rest of
// the cell and the other cells are imported, every event valid. It used to
// fail the update's event, and the import stopped there.
func TestUnfitArtifactsAreLeftOutNotFatal(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "camp")
	c := filepath.Join(root, "sonnet46_x_opus46_mcp_s1")
	write(t, c, "summary.csv", "task_id,result,score,elapsed_s,output_len,detail,evo_cycle\nm1,PASS,1,1,1,,0\nm2,PASS,1,1,1,,1\n")
	ws := newWS(t, filepath.Join(c, "workspace"))
	ws.commit("evo-0", map[string]string{"prompts/system.md": "x\n"})
	ws.commit("pre-evo-1", map[string]string{})
	ws.commit("evo-1", map[string]string{
		"prompts/system.md":     "x, and check the tests\n",
		"memory/episodes.jsonl": strings.Repeat(`{"lesson":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}`+"\n", 20000),
		"memory/blob.bin":       "\xff\xfe\x00binary",
	})
	c2 := filepath.Join(root, "sonnet46_x_qwen235b_mcp_s1")
	write(t, c2, "summary.csv", "task_id,result,score,elapsed_s,output_len,detail,evo_cycle\nm1,PASS,1,1,1,,0\n")

	evs, sum, rep := importAll(t, Config{Dir: root})
	if len(sum.Cells) != 2 {
		t.Fatalf("%d cells imported, want 2\n%s", len(sum.Cells), rep)
	}
	var u *schemas.HarnessUpdate
	for _, ev := range evs {
		if x, ok := ev.(*schemas.HarnessUpdate); ok {
			u = x
		}
	}
	if u == nil || len(u.Artifacts) != 1 || u.Artifacts[0].Kind != schemas.KindPrompt {
		t.Fatalf("update %+v: want evo-1 with only the prompt's change", u)
	}
	for _, want := range []string{"artifact memory/episodes.jsonl at evo-1 is 1", "over the 1048576-byte artifact cap: left out of its update",
		"artifact memory/blob.bin at evo-1 is not UTF-8 text: left out of its update"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
}
