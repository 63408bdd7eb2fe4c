package aevolve

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// write creates dir/rel with content.
func write(t *testing.T, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// gitWS is a workspace repository built commit by commit with fixed dates.
type gitWS struct {
	t   *testing.T
	dir string
	n   int
}

func newWS(t *testing.T, dir string) *gitWS {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is required for the importer's workspace fixtures: apt-get install git")
	}
	w := &gitWS{t: t, dir: dir}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w.git("init", "-q")
	return w
}

func (w *gitWS) git(args ...string) {
	w.t.Helper()
	cmd := exec.Command("git", append([]string{"-C", w.dir, "-c", "user.name=fixture", "-c", "user.email=f@example.invalid", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"}, args...)...)
	date := "2026-02-03T10:0" + string(rune('0'+w.n%10)) + ":00Z"
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_DATE="+date, "GIT_COMMITTER_DATE="+date, "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		w.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// commit writes files ("" content removes the file), commits and tags.
func (w *gitWS) commit(tag string, files map[string]string) {
	w.t.Helper()
	w.n++
	for rel, c := range files {
		if c == "" {
			os.Remove(filepath.Join(w.dir, rel))
			continue
		}
		write(w.t, w.dir, rel, c)
	}
	w.git("add", "-A")
	w.git("commit", "-q", "--allow-empty", "-m", tag)
	w.git("tag", tag)
}

func skill(name, desc, body string) string {
	return "---\nname: " + name + "\ndescription: " + desc + "\n---\n\n# " + name + "\n\n" + body + "\n"
}

func report(bm, route, done, solver, evolver string) string {
	return "# Benchmark report\n\nbenchmark: " + bm + "\nroute: " + route + "\ndone_marker: " + done +
		"\nscore_kind: pass_rate\nregion: us-east-1\nsolver_model_id: " + solver + "\nevolver_model_id: " + evolver + "\n"
}

// buildFixtures writes a campaign tree with six cells (swe, mcp, sb; baseline
// and evolved) following AEVOLVE-FORMAT.md, and returns its root.
func buildFixtures(t *testing.T) string {
	root := filepath.Join(t.TempDir(), "paper-run")

	// SWE baseline: results.json in Python repr, done.
	c := filepath.Join(root, "swe", "qwen235b_x_none_swe_s1")
	write(t, c, "BENCHMARK_REPORT.md", report("swe_verified", "unified_baseline", "DONE", "Qwen/Qwen3-235B-A22B", "none"))
	write(t, c, "DONE", "")
	write(t, c, "results.metrics.json", `{"final_score": 0.0}`)
	write(t, c, "results.json", `[{'instance_id': 'django__django-11099', 'success': True, 'score': 1.0, 'detail': 'ok', 'elapsed': 12.5, 'patch_len': 120, 'turns': 9, 'error': None},
 {'instance_id': 'sympy__sympy-20590', 'success': False, 'score': 0.0, 'detail': "it's wrong", 'elapsed': 30, 'patch_len': 0, 'turns': 30, 'error': None},
 {'instance_id': 'astropy__astropy-12907', 'success': False, 'score': 0.0, 'detail': '', 'elapsed': 600, 'patch_len': 0, 'turns': 3, 'error': 'docker timeout'},
 {'instance_id': 'pytest-dev__pytest-5103', 'success': False, 'score': 0.0, 'detail': '', 'elapsed': 44, 'patch_len': 10, 'turns': 12, 'error': None},
 {'detail': 'no id here'}]`)

	// SWE evolved: per-task rows from observations, git workspace with updates.
	c = filepath.Join(root, "swe", "qwen235b_x_qwen32b_swe_s1")
	write(t, c, "BENCHMARK_REPORT.md", report("swe_verified", "unified_evolve", "DONE", "Qwen/Qwen3-235B-A22B", "Qwen/Qwen3-32B"))
	write(t, c, "DONE", "")
	ws := newWS(t, filepath.Join(c, "workspace"))
	ws.commit("evo-0", map[string]string{"manifest.yaml": "name: swe\n", "prompts/system.md": "You fix bugs.\n", "tools/registry.yaml": "tools: []\n"})
	obs1 := `{"task_id": "django__django-11099", "task_input": "Fix the admin bug", "success": true, "score": 1.0, "timestamp": "2026-02-03T09:00:00.5"}
{"task_id": "sympy__sympy-20590", "task_input": "Slots", "success": false, "score": 0.0, "timestamp": "2026-02-03T09:01:00"}
{"_record_type": "step_metadata", "cycle": 1}
`
	obs2 := `{'task_id': 'astropy__astropy-12907', 'success': True, 'score': 1.0, 'timestamp': '2026-02-03T09:05:00', 'feedback': {'success': True, 'score': 1.0, 'detail': None}}
{"task_id": "pytest-dev__pytest-5103", "success": true, "score": 1.0, "timestamp": "2026-02-03T09:06:00"}
not json at all
{"_record_type": "step_metadata", "cycle": 2}
`
	ws.commit("pre-evo-1", map[string]string{"evolution/observations/batch_0001.jsonl": obs1})
	ws.commit("evo-1", map[string]string{"skills/reproduce-first/SKILL.md": skill("reproduce-first", "Reproduce the failure before patching.", "1. Write a failing test.")})
	ws.commit("pre-evo-2", map[string]string{"evolution/observations/batch_0002.jsonl": obs2})
	ws.commit("evo-2", map[string]string{"prompts/system.md": "You fix bugs. Load skills first.\n", "memory/lessons.jsonl": `{"lesson": "run tests"}` + "\n",
		"skills/reproduce-first/SKILL.md": skill("reproduce-first", "Reproduce the failure before patching.", "1. Write a failing test.\n2. Run it."),
		"skills/minimal-diff/SKILL.md":    skill("minimal-diff", "Keep patches small.", "Change few lines.")})
	ws.commit("pre-evo-3", map[string]string{})
	ws.commit("evo-3", map[string]string{"manifest.yaml": "name: swe\nversion: 3\n"}) // not a harness artifact: no update
	write(t, c, "workspace/evolution/unified_steps.jsonl", `{"cycle": 1, "mutated": True, "unified_reports": [{"operator_name": "skill_writer", "count": 1, "details": {"skills_added": ["reproduce-first"], "skills_removed": []}}], "unified_verdict": {"accept": True, "rollback": False, "reason": "score improved"}}
{"cycle": 2, "mutated": False, "unified_reports": [], "unified_verdict": {"accept": True, "rollback": False, "reason": "kept"}}
`)
	write(t, c, "workspace/evolution/history.jsonl", `{"cycle": 1, "score": 0.5, "mutated": true, "timestamp": "2026-02-03T09:02:00"}`+"\n")

	// MCP baseline: summary.csv with every result kind.
	c = filepath.Join(root, "mcp", "sonnet46_x_none_mcp_s2")
	write(t, c, "BENCHMARK_REPORT.md", report("mcp_atlas", "baseline", "DONE", "claude-sonnet-4-6", "none"))
	write(t, c, "DONE", "")
	write(t, c, "summary.csv", "task_id,result,score,elapsed_s,output_len,detail\n"+
		"mcp-001,PASS,0.80,10.5,1200,ok\n"+
		"mcp-002,FAIL,0.50,11,800,\"missed, two claims\"\n"+
		"mcp-003,INTERRUPTED,0.90,3,0,killed\n"+
		"mcp-004,ERROR,,1,0,tool crashed\n"+
		"mcp-005,PASS,0.75,9,700,\n"+
		"mcp-006,WEIRD,0.1,1,1,\n")
	// MCP evolved: evo_cycle column (0-based), not done.
	c = filepath.Join(root, "mcp", "sonnet46_x_opus46_mcp_s2")
	write(t, c, "BENCHMARK_REPORT.md", report("mcp_atlas", "evolve", "DONE", "claude-sonnet-4-6", "claude-opus-4-6"))
	write(t, c, "summary.csv", "task_id,result,score,elapsed_s,output_len,detail,evo_cycle\n"+
		"mcp-001,PASS,1.0,10,1,,0\nmcp-002,PASS,0.75,10,1,,0\nmcp-003,FAIL,0.70,10,1,,1\nmcp-004,PASS,0.9,10,1,,1\nmcp-005,FAIL,0.25,10,1,,1\n")

	// SkillsBench baseline: attempts with retries and final rows.
	c = filepath.Join(root, "sb", "haiku45_x_none_sb_s1")
	write(t, c, "BENCHMARK_REPORT.md", report("skillsbench", "unified_baseline", "DONE", "claude-haiku-4-5", "none"))
	write(t, c, "DONE", "")
	write(t, c, "results.jsonl", `{"task_id": "csv-clean", "passed": false, "score": 0.0, "reward_float": 0.0, "failure_class": "tests_failed", "tests_passed": 1, "tests_failed": 2, "skills_loaded": [], "cycle": 1, "batch": 1, "category": "data", "difficulty": "easy", "duration_sec": 30.0, "detail": "", "final": false}
{"task_id": "csv-clean", "passed": true, "score": 1.0, "reward_float": 1.0, "failure_class": None, "tests_passed": 3, "tests_failed": 0, "skills_loaded": [], "cycle": 2, "batch": 1, "category": "data", "difficulty": "easy", "duration_sec": 20.0, "detail": "", "final": False}
{"task_id": "csv-clean", "passed": true, "cycles_used": 2, "batch": 1, "category": "data", "difficulty": "easy", "final": true}
{"task_id": "pdf-table", "passed": true, "score": 1.0, "failure_class": null, "skills_loaded": [], "cycle": 1, "batch": 1, "duration_sec": 50, "final": false}
{"task_id": "pdf-table", "passed": true, "cycles_used": 1, "batch": 1, "final": true}
{"task_id": "git-rebase", "passed": false, "score": 0.0, "failure_class": "error", "skills_loaded": [], "cycle": 1, "batch": 1, "duration_sec": 5, "final": false}
{"task_id": "git-rebase", "passed": false, "score": 0.0, "failure_class": "tests_failed", "skills_loaded": [], "cycle": 2, "batch": 1, "duration_sec": 5, "final": false}
{"task_id": "git-rebase", "passed": false, "cycles_used": 2, "batch": 1, "final": true}
{"_record_type": "run_trailer", "tasks": 3}
`)
	// SkillsBench evolved: rounds from batch, trajectories with skill tool events.
	c = filepath.Join(root, "sb", "haiku45_x_sonnet46_sb_s1")
	write(t, c, "BENCHMARK_REPORT.md", report("skillsbench", "unified_evolve", "DONE", "claude-haiku-4-5", "claude-sonnet-4-6"))
	write(t, c, "DONE", "")
	write(t, c, "results.jsonl", `{"task_id": "csv-clean", "passed": true, "score": 1.0, "skills_loaded": [], "cycle": 1, "batch": 1, "duration_sec": 30.0, "final": false}
{"task_id": "csv-clean", "passed": true, "cycles_used": 1, "batch": 1, "final": true}
{"task_id": "pdf-table", "passed": false, "score": 0.0, "skills_loaded": ["table-extract"], "cycle": 1, "batch": 2, "duration_sec": 50, "final": false}
{"task_id": "pdf-table", "passed": true, "score": 1.0, "skills_loaded": ["table-extract"], "cycle": 2, "batch": 2, "duration_sec": 50, "final": false}
{"task_id": "pdf-table", "passed": true, "cycles_used": 2, "batch": 2, "final": true}
{"task_id": "git-rebase", "passed": true, "score": 1.0, "skills_loaded": [], "cycle": 1, "batch": 2, "final": false}
{"task_id": "git-rebase", "passed": true, "cycles_used": 1, "batch": 2, "final": true}
`)
	cell := "haiku45_x_sonnet46_sb_s1"
	write(t, c, "outputs/official_like/pdf-table__"+cell+"-cycle-1/agent/trajectory.json", `{"steps": [{"step": 1}, {"step": 2, "skill_tool_events": [
 {"tool": "list_skills", "found": true, "skills": ["table-extract"]},
 {"tool": "load_skill", "name": "table_extract", "status": "not_found"},
 {"tool": "load_skill", "name": "table-extract", "status": "loaded"},
 {"tool": "load_skill_reference", "name": "table-extract/ref.md", "status": "loaded"},
 {"tool": "teleport", "name": "x", "status": "loaded"}]}]}`)
	write(t, c, "outputs/official_like/pdf-table__"+cell+"-cycle-1/result.json", `{"reward": 0}`)
	write(t, c, "outputs/official_like/pdf-table__"+cell+"-cycle-2/agent/trajectory.json", `[{'step': 1, 'skill_tool_events': [{'tool': 'load_skill', 'name': 'table-extract', 'status': 'loaded'}]}]`)
	ws = newWS(t, filepath.Join(c, "workspace"))
	ws.commit("evo-0", map[string]string{"prompts/system.md": "Solve the task.\n"})
	ws.commit("pre-evo-1", map[string]string{})
	ws.commit("evo-1", map[string]string{"skills/table-extract/SKILL.md": skill("table-extract", "Extract tables from PDFs.", "Use pdfplumber.")})
	ws.commit("pre-evo-2", map[string]string{})
	ws.commit("evo-2", map[string]string{"skills/table-extract/SKILL.md": "", "skills/pdf-tables/SKILL.md": skill("pdf-tables", "Tables from PDFs, renamed.", "Use pdfplumber.")})
	return root
}
