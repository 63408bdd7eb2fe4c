package chddl_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chdb"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/testenv"
)

// Messy campaigns at the views level (issue 42): one project per case, each
// injecting one kind of mess into otherwise clean events, loaded into one
// database; every case's expected figures are computed in its comment from
// the definitions (docs/metrics.md, docs/analysts.md's rules), never from the
// pipeline. The same rows are checked on ClickHouse 18.16, on chDB 26.7
// (TestMessyCampaignsViews) and on the 2 × 2 cluster
// (TestMessyCampaignsViewsCluster). Agreement with round_metrics and labels,
// which need the processors, is tested in stack/messy_test.go.

// ev is a raw event row of project p with its own id and event time.
func ev(p, id string, ms int64) row {
	return row{"event_id": id, "project": p, "event_time_ms": ms, "event_time": time.UnixMilli(ms).UTC()}
}

func (r row) with(kv ...any) row {
	for i := 0; i+1 < len(kv); i += 2 {
		r[kv[i].(string)] = kv[i+1]
	}
	return r
}

func mCampaign(p, id string, ms int64, agents, evolvers []string) row {
	return ev(p, id, ms).with("campaign_id", "c1", "benchmarks", []string{"swe"}, "anchor_agents", agents,
		"anchor_evolvers", evolvers, "label_epsilon", 0.02, "label_alpha", 0.05)
}

func mCell(p, id string, ms int64, cell, agent, evolver, route string) row {
	return ev(p, id, ms).with("kind", "started", "cell_id", cell, "campaign_id", "c1", "benchmark", "swe",
		"agent_model", agent, "evolver_model", evolver, "seed", int32(1), "route", route, "h0_version", "h0",
		"status", "", "attempts", int64(0))
}

// mAttempt is an attempt of task in cell; pass sets success (status ok),
// final it is the task's final row.
func mAttempt(p, id string, ms int64, cell, task string, attempt int32, status string, pass, final bool, avail int32, score float64) row {
	b := func(x bool) uint8 {
		if x {
			return 1
		}
		return 0
	}
	return ev(p, id, ms).with("cell_id", cell, "task_id", task, "cycle", int32(1), "attempt", attempt, "status", status,
		"success", b(pass), "final", b(final), "skills_available", avail, "score", score)
}

func mSkill(p, id string, ms int64, cell, task string, attempt, turn int32, tool, status string) row {
	return ev(p, id, ms).with("cell_id", cell, "task_id", task, "attempt", attempt, "turn", turn,
		"tool", tool, "skill_name", "skillX", "status", status)
}

func mJudgment(p, id string, ms int64, cell, task string, attempt int32, judge string, f, vc, vo, ru int32, hl, fv *float64) row {
	return ev(p, id, ms).with("cell_id", cell, "task_id", task, "attempt", attempt, "skill_name", "skillX",
		"judge_model", judge, "followed", f, "violated_commission", vc, "violated_omission", vo,
		"required_unobserved", ru, "not_applicable", int32(0), "harness_loaded", hl, "first_action", hl,
		"midpoint", hl, "pre_final", fv, "final_validation", fv)
}

// mLate is the dead letter of event id of project p refused for reason.
func mLate(p, eventID, reason string) row {
	return ev(p, "dl-"+p+"-"+eventID+"-"+reason, 5000).with("stage", "semantic", "reason_code", reason,
		"message", "refused", "source_topic", "hf.attempts", "source_partition", int32(0), "source_offset", int64(0),
		"payload", "", "source_event_id", eventID)
}

// messyCheck is one expected answer: query ({p}: the case's project, quoted)
// and its one row.
type messyCheck struct {
	project, query string
	want           []string
}

// baseline adds to f project p's campaign (anchors A1 / E1 unless the case
// declares its own), its A1 baseline cell with t1 passed and t2 failed
// (pass rate 50), and cell X of (A1, E1).
func baseline(f fixture, p string, campaign bool) {
	if campaign {
		f.add("campaigns", mCampaign(p, p+"-camp", 1, []string{"A1"}, []string{"E1"}))
	}
	f.add("cells", mCell(p, p+"-cb", 1, "base", "A1", "", "baseline"))
	f.add("cells", mCell(p, p+"-cx", 1, "X", "A1", "E1", "in_situ"))
	f.add("task_attempts", mAttempt(p, p+"-b1", 10, "base", "t1", 1, "ok", true, true, 0, 1))
	f.add("task_attempts", mAttempt(p, p+"-b2", 10, "base", "t2", 1, "ok", false, true, 0, 0))
}

// messyFixture returns the cases' rows and their expected answers. Rows are
// inserted in the order added (their _version grows in that order), which
// for the winner cases is the opposite of their event time.
func messyFixture() (fixture, []messyCheck) {
	f := fixture{}
	var checks []messyCheck
	check := func(p, q string, want ...string) { checks = append(checks, messyCheck{p, q, want}) }
	cellQ := "SELECT n_tasks, pass_rate, pass_rate_final, mean_score FROM v_cell_scores WHERE project = {p} AND cell_id = "

	// skill_resend: a load_skill call re-sent under a new event id counts
	// once (key: cell, task, attempt, turn, tool, skill_name). X: t1, t2
	// offered skills; t1 loaded (twice sent), t2 not_found. Load success =
	// loaded calls / calls = 1/2 (not 2/3); SLR = loaded offered attempts /
	// offered attempts = 1/2; LPR = 100 × passed loaded / loaded = 100.
	p := "skill_resend"
	baseline(f, p, true)
	f.add("task_attempts", mAttempt(p, p+"-x1", 10, "X", "t1", 1, "ok", true, true, 2, 1))
	f.add("task_attempts", mAttempt(p, p+"-x2", 10, "X", "t2", 1, "ok", false, true, 2, 0))
	f.add("skill_events", mSkill(p, p+"-s1", 20, "X", "t1", 1, 1, "load_skill", "loaded"))
	f.add("skill_events", mSkill(p, p+"-s2", 20, "X", "t2", 1, 1, "load_skill", "not_found"))
	f.add("skill_events", mSkill(p, p+"-s1-resent", 30, "X", "t1", 1, 1, "load_skill", "loaded"))
	check(p, "SELECT attempts, skill_load_rate, loaded_pass_rate, skill_load_success_rate, loaded_attempts FROM v_skill_activation WHERE project = {p}",
		"4", "0.5", "100", "0.5", "1")

	// judgment_resend: a judgment re-sent under a new event id counts once
	// (key: cell, task, attempt, skill_name, judge_model). X: t1 judged
	// F3 VC1, loaded 0.8, final 0.4 (sent twice); t2 F1 VO1, loaded 0.6,
	// final 0.4. judgments 2; harness_loaded (0.8 + 0.6) / 2 = 0.7; final
	// 0.4; drift -0.3; decay (0.7 − 0.4) / 0.7 = 0.428571; HFR = mean of
	// 3/4 and 1/2 = 0.625.
	p = "judgment_resend"
	baseline(f, p, true)
	f.add("task_attempts", mAttempt(p, p+"-x1", 10, "X", "t1", 1, "ok", true, true, 2, 1))
	f.add("task_attempts", mAttempt(p, p+"-x2", 10, "X", "t2", 1, "ok", true, true, 2, 1))
	f.add("adherence_judgments", mJudgment(p, p+"-j1", 20, "X", "t1", 1, "judge", 3, 1, 0, 0, fp(0.8), fp(0.4)))
	f.add("adherence_judgments", mJudgment(p, p+"-j2", 20, "X", "t2", 1, "judge", 1, 0, 1, 0, fp(0.6), fp(0.4)))
	f.add("adherence_judgments", mJudgment(p, p+"-j1-resent", 30, "X", "t1", 1, "judge", 3, 1, 0, 0, fp(0.8), fp(0.4)))
	check(p, "SELECT judgments, harness_loaded, final_validation, drift, round(decay_rate, 6) FROM v_adherence WHERE project = {p}",
		"2", "0.7", "0.4", "-0.3", "0.428571")
	check(p, "SELECT hfr, judged_skills FROM v_skill_activation WHERE project = {p}", "0.625", "2")

	// judgment_corrected: t1's judgment scored the midpoint 0.5 (1000) and
	// was corrected without a midpoint score (2000, the winner, arriving
	// first); t2's judgment scored it 0.9. midpoint = mean of the winners'
	// non-NULL scores = 0.9 (the superseded 0.5 must not show through the
	// winner's NULL: 0.7).
	p = "judgment_corrected"
	baseline(f, p, true)
	f.add("task_attempts", mAttempt(p, p+"-x1", 10, "X", "t1", 1, "ok", true, true, 2, 1))
	f.add("task_attempts", mAttempt(p, p+"-x2", 10, "X", "t2", 1, "ok", true, true, 2, 1))
	f.add("adherence_judgments", mJudgment(p, p+"-j1-fix", 2000, "X", "t1", 1, "judge", 1, 0, 0, 0, fp(0.8), fp(0.4)).with("midpoint", (*float64)(nil)))
	f.add("adherence_judgments", mJudgment(p, p+"-j1", 1000, "X", "t1", 1, "judge", 1, 0, 0, 0, fp(0.8), fp(0.4)).with("midpoint", fp(0.5)))
	f.add("adherence_judgments", mJudgment(p, p+"-j2", 1000, "X", "t2", 1, "judge", 1, 0, 0, 0, fp(0.8), fp(0.4)).with("midpoint", fp(0.9)))
	check(p, "SELECT judgments, midpoint FROM v_adherence WHERE project = {p}", "2", "0.9")

	// hfr_pooled: HFR pools one (cell, task, skill)'s judgments over its
	// attempts and judges: t1 attempt 1 by judge A F3 VC1, attempt 2 by A
	// F1 VO1, attempt 1 by B F0 RU2: (3 + 1 + 0) / (4 + 2 + 2) = 0.5 (the
	// mean of the ratios would be 0.4167).
	p = "hfr_pooled"
	baseline(f, p, true)
	f.add("task_attempts", mAttempt(p, p+"-x1", 10, "X", "t1", 1, "ok", true, true, 2, 1))
	f.add("adherence_judgments", mJudgment(p, p+"-j1", 20, "X", "t1", 1, "A", 3, 1, 0, 0, fp(1), fp(1)))
	f.add("adherence_judgments", mJudgment(p, p+"-j2", 20, "X", "t1", 2, "A", 1, 0, 1, 0, fp(1), fp(1)))
	f.add("adherence_judgments", mJudgment(p, p+"-j3", 20, "X", "t1", 1, "B", 0, 0, 0, 2, fp(1), fp(1)))
	check(p, "SELECT hfr, judged_skills FROM v_skill_activation WHERE project = {p}", "0.5", "1")

	// attempt_corrected: X's t1 attempt 1 failed (event time 1000, id
	// "z-orig"), then was corrected to a pass (time 2000, id "a-fix"), the
	// correction arriving first (a lower _version) and with the smaller id:
	// the winner is the greatest (event_time_ms, event_id), the correction.
	// t2 passed. X: 2 tasks, strict 100, retry 100, mean score 100; Δ over
	// the baseline's 50 = +50 (taking the last to arrive would give 50 / 0).
	p = "attempt_corrected"
	baseline(f, p, true)
	f.add("task_attempts", mAttempt(p, "a-fix", 2000, "X", "t1", 1, "ok", true, true, 0, 1))
	f.add("task_attempts", mAttempt(p, "z-orig", 1000, "X", "t1", 1, "ok", false, true, 0, 0))
	f.add("task_attempts", mAttempt(p, p+"-x2", 10, "X", "t2", 1, "ok", true, true, 0, 1))
	check(p, cellQ+"'X'", "2", "100", "100", "100")
	check(p, "SELECT delta_pp FROM v_pair_gain WHERE project = {p}", "50")
	check(p, "SELECT delta_update_pp FROM v_update_gain WHERE project = {p}", "50")
	check(p, "SELECT delta_benefit_pp FROM v_benefit_gain WHERE project = {p}", "50")

	// event_id_tie: two events of t1 attempt 1 at the same event time: the
	// greater event id ("t-b", a pass, arriving first) wins: 100.
	p = "event_id_tie"
	baseline(f, p, true)
	f.add("task_attempts", mAttempt(p, "t-b", 1000, "X", "t1", 1, "ok", true, true, 0, 1))
	f.add("task_attempts", mAttempt(p, "t-a", 1000, "X", "t1", 1, "ok", false, true, 0, 0))
	check(p, cellQ+"'X'", "1", "100", "100", "100")

	// same_id_resend: copies of one event id collapse first (the highest
	// _version), then the natural key's winner is chosen. t1 attempt 1:
	// "s-1" sent as a pass at 1000, re-sent under the same id as a fail at
	// 500 (the newer copy); "s-0", a fail at 800. s-1 is its newest copy
	// (500, fail); the winner is s-0 (800): 0. (Ranking every copy by event
	// time would let the superseded copy win: 100.)
	p = "same_id_resend"
	baseline(f, p, true)
	f.add("task_attempts", mAttempt(p, "s-1", 1000, "X", "t1", 1, "ok", true, true, 0, 1))
	f.add("task_attempts", mAttempt(p, "s-0", 800, "X", "t1", 1, "ok", false, true, 0, 0))
	f.add("task_attempts", mAttempt(p, "s-1", 500, "X", "t1", 1, "ok", false, true, 0, 0))
	check(p, cellQ+"'X'", "1", "0", "0", "0")

	// retry_corrected: the retry reading takes the final row among the
	// attempts' winners: t1 attempt 1 failed and was first sent as final
	// (1000), then corrected as not final (2000) because attempt 2 passed
	// (final); the superseded row arrives last. Strict 0, retry 100 (the
	// superseded final row must not count).
	p = "retry_corrected"
	baseline(f, p, true)
	f.add("task_attempts", mAttempt(p, p+"-a1-fix", 2000, "X", "t1", 1, "ok", false, false, 0, 0))
	f.add("task_attempts", mAttempt(p, p+"-a2", 2100, "X", "t1", 2, "ok", true, true, 0, 1))
	f.add("task_attempts", mAttempt(p, p+"-a1", 1000, "X", "t1", 1, "ok", false, true, 0, 0))
	check(p, cellQ+"'X'", "1", "0", "100", "0")

	// late_refused: events the processors refused as late_beyond_window
	// are left out: X's t3 attempt (a fail) and t2's load_skill call. A
	// dead letter for another reason (t4: cell_idle) and one of another
	// project with t1's id leave their events in. X: t1, t2, t4 pass: 3
	// tasks, 100; SLR = 1/3 (t1 of t1, t2, t4 offered), load success 1/1.
	p = "late_refused"
	baseline(f, p, true)
	f.add("task_attempts", mAttempt(p, p+"-x1", 10, "X", "t1", 1, "ok", true, true, 1, 1))
	f.add("task_attempts", mAttempt(p, p+"-x2", 10, "X", "t2", 1, "ok", true, true, 1, 1))
	f.add("task_attempts", mAttempt(p, p+"-x3", 10, "X", "t3", 1, "ok", false, true, 1, 0))
	f.add("task_attempts", mAttempt(p, p+"-x4", 10, "X", "t4", 1, "ok", true, true, 1, 1))
	f.add("skill_events", mSkill(p, p+"-s1", 20, "X", "t1", 1, 1, "load_skill", "loaded"))
	f.add("skill_events", mSkill(p, p+"-s2", 20, "X", "t2", 1, 1, "load_skill", "loaded"))
	f.add("rejected_events", mLate(p, p+"-x3", "late_beyond_window"))
	f.add("rejected_events", mLate(p, p+"-s2", "late_beyond_window"))
	f.add("rejected_events", mLate(p, p+"-x4", "cell_idle"))
	f.add("rejected_events", mLate("another_project", p+"-x1", "late_beyond_window"))
	check(p, cellQ+"'X'", "3", "100", "100", "100")
	check(p, "SELECT skill_load_rate, skill_load_success_rate FROM v_skill_activation WHERE project = {p}", "0.3333333333", "1")

	// cell_resend: cell_started of X sent twice under new ids, the later
	// one (time 2000, route in_situ) arriving first, the earlier (1000,
	// route split) last: one row, route in_situ.
	p = "cell_resend"
	baseline(f, p, true)
	f.add("cells", mCell(p, p+"-cx-later", 2000, "X", "A1", "E1", "in_situ"))
	f.add("cells", mCell(p, p+"-cx-earlier", 1000, "X", "A1", "E1", "split"))
	f.add("task_attempts", mAttempt(p, p+"-x1", 3000, "X", "t1", 1, "ok", true, true, 0, 1))
	check(p, "SELECT count(), any(route) FROM v_cell_scores WHERE project = {p} AND cell_id = 'X'", "1", "in_situ")

	// campaign_resend: the campaign declared twice under new ids: anchor
	// agents [A1, A2] at 1000 (arriving last), [A1] at 2000 (arriving
	// first). The winner is [A1]: Δupdate(E1) = Δ(A1, E1) = 100 − 50 = 50
	// over 1 anchor agent (with [A1, A2] it would be NULL: A2 has no cell).
	p = "campaign_resend"
	f.add("campaigns", mCampaign(p, p+"-later", 2000, []string{"A1"}, []string{"E1"}))
	f.add("campaigns", mCampaign(p, p+"-earlier", 1000, []string{"A1", "A2"}, []string{"E1"}))
	baseline(f, p, false)
	f.add("task_attempts", mAttempt(p, p+"-x1", 10, "X", "t1", 1, "ok", true, true, 0, 1))
	f.add("task_attempts", mAttempt(p, p+"-x2", 10, "X", "t2", 1, "ok", true, true, 0, 1))
	check(p, "SELECT delta_update_pp, n_anchor_agents, seeds FROM v_update_gain WHERE project = {p}", "50", "1", "1")

	// missing_anchors: anchors A1, A2 / E1, E2; only (A1, E1) has an
	// evolved cell (+50). Δupdate(E1) is NULL (A2's pair is missing:
	// seeds 0, seeds_seen 1); Δbenefit(A1) is the max over the anchor
	// evolvers that have a pair, E1 alone: 50, evolvers 1 of 2.
	p = "missing_anchors"
	f.add("campaigns", mCampaign(p, p+"-camp", 1, []string{"A1", "A2"}, []string{"E1", "E2"}))
	baseline(f, p, false)
	f.add("task_attempts", mAttempt(p, p+"-x1", 10, "X", "t1", 1, "ok", true, true, 0, 1))
	f.add("task_attempts", mAttempt(p, p+"-x2", 10, "X", "t2", 1, "ok", true, true, 0, 1))
	check(p, "SELECT delta_update_pp, seeds, seeds_seen FROM v_update_gain WHERE project = {p}", "NULL", "0", "1")
	check(p, "SELECT delta_benefit_pp, evolvers, n_anchor_evolvers FROM v_benefit_gain WHERE project = {p}", "50", "1", "2")

	// partial_credit: X scores 0.5 (ok, not a success), 1 (success) and
	// 0.25 with status error (a failure: 0). mean_score = 100 × (0.5 + 1 +
	// 0) / 3 = 50; pass_rate = 100 × 1/3.
	p = "partial_credit"
	baseline(f, p, true)
	f.add("task_attempts", mAttempt(p, p+"-x1", 10, "X", "t1", 1, "ok", false, true, 0, 0.5))
	f.add("task_attempts", mAttempt(p, p+"-x2", 10, "X", "t2", 1, "ok", true, true, 0, 1))
	f.add("task_attempts", mAttempt(p, p+"-x3", 10, "X", "t3", 1, "error", false, true, 0, 0.25))
	check(p, cellQ+"'X'", "3", "33.3333333333", "33.3333333333", "50")

	// split_cycles: a split_test cell solves its held-out task t1 in every
	// cycle: attempt 1 of cycle 1 failed (1000), attempt 1 of cycle 2
	// passed (2000), the later arriving first. Two attempts (the key holds
	// the cycle); the task's strict reading is its latest attempt-1 winner,
	// cycle 2's: 100.
	p = "split_cycles"
	baseline(f, p, true)
	f.add("task_attempts", mAttempt(p, p+"-c2", 2000, "X", "t1", 1, "ok", true, true, 0, 1).with("cycle", int32(2)))
	f.add("task_attempts", mAttempt(p, p+"-c1", 1000, "X", "t1", 1, "ok", false, true, 0, 0))
	check(p, cellQ+"'X'", "1", "100", "100", "100")
	check(p, "SELECT attempts FROM v_skill_activation WHERE project = {p}", "4")

	// zero_tasks: X started and sent no attempt: no v_cell_scores row, no
	// pair, no Δupdate or Δbenefit row (absent, not 0).
	p = "zero_tasks"
	baseline(f, p, true)
	check(p, "SELECT count() FROM v_cell_scores WHERE project = {p} AND cell_id = 'X'", "0")
	check(p, "SELECT count() FROM v_pair_gain WHERE project = {p}", "0")
	check(p, "SELECT count() FROM v_update_gain WHERE project = {p}", "0")
	check(p, "SELECT count() FROM v_benefit_gain WHERE project = {p}", "0")
	return f, checks
}

// messyRecomputed are the cells whose cell_scores summaries are recomputed
// after loading (the others are computed live by v_cell_scores): a summary
// must give what the live computation gives.
var messyRecomputed = []string{"X"}

// runMessyChecks runs every check through query and reports mismatches.
func runMessyChecks(t *testing.T, engine string, checks []messyCheck, query func(string) ([][]string, error)) {
	t.Helper()
	for _, msg := range messyFailures(checks, query) {
		t.Errorf("%s: %s", engine, msg)
	}
}

// messyFailures runs every check through query and returns, per case
// (project) that fails, what differs.
func messyFailures(checks []messyCheck, query func(string) ([][]string, error)) map[string]string {
	out := map[string]string{}
	for _, c := range checks {
		q := strings.ReplaceAll(c.query, "{p}", chddl.QuoteString(c.project))
		rows, err := query(q)
		switch {
		case err != nil:
			out[c.project] += fmt.Sprintf("%s: %v\n", q, err)
		case len(rows) != 1:
			out[c.project] += fmt.Sprintf("%s: %d rows %v, want 1\n", q, len(rows), rows)
		case !sameFigures(rows[0], c.want):
			out[c.project] += fmt.Sprintf("%s\n got: %v\nwant: %v\n", q, rows[0], c.want)
		}
	}
	return out
}

// sameFigures compares a row with its expected text, numbers to 1e-9
// relative, NULL (18.16's "NULL", chDB's chdb.Null) as "NULL".
func sameFigures(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		g := got[i]
		if g == chdb.Null || g == "\\N" {
			g = "NULL"
		}
		if g == want[i] {
			continue
		}
		a, err1 := strconv.ParseFloat(g, 64)
		b, err2 := strconv.ParseFloat(want[i], 64)
		if err1 != nil || err2 != nil || math.Abs(a-b) > 1e-9*math.Max(1, math.Abs(b)) {
			return false
		}
	}
	return true
}

// TestMessyCampaignsViews loads the messy cases into ClickHouse 18.16
// (twice: redelivered copies of every row, in parts that have not merged),
// recomputes X's cell_scores summaries, copies the rows to chDB 26.7,
// recomputes there too, and checks every case's figures on both engines,
// then the same with every summary dropped (live computation only).
func TestMessyCampaignsViews(t *testing.T) {
	old, cur := migrated(t), currentMigrated(t)
	ctx := context.Background()
	f, checks := messyFixture()
	f.insert(t, old.Conn, 1)
	// Redelivered copies, same event ids, higher versions: for same_id_resend
	// the order of s-1's copies is kept (its newest copy stays the fail).
	f.insert(t, old.Conn, 1000)
	if err := chddl.RecomputeCellScores(ctx, chx.Session(old.Conn), old.Database, messyRecomputed); err != nil {
		t.Fatalf("recompute on 18.16: %v", err)
	}
	testenv.CopyTables(t, old, cur, "campaigns", "cells", "task_attempts", "skill_events", "adherence_judgments", "rejected_events", "cell_scores")
	if err := chddl.RecomputeCellScores(ctx, cur, cur.Database, messyRecomputed); err != nil {
		t.Fatalf("recompute on %s: %v", cur.Version, err)
	}
	q18 := func(q string) ([][]string, error) {
		_, rows, err := chx.QueryStrings(ctx, old.Conn, q)
		return rows, err
	}
	qcur := func(q string) ([][]string, error) {
		_, rows, err := cur.QueryStrings(ctx, q)
		return rows, err
	}
	// The summaries exist and are the new rules' (the view reads them).
	if n := one(t, old.Conn, fmt.Sprintf("SELECT count() FROM cell_scores WHERE _version >= %d", chddl.NaturalKeyBase)); n == "0" {
		t.Fatal("no cell_scores summary computed under the natural-key rules")
	}
	runMessyChecks(t, "18.16", checks, q18)
	runMessyChecks(t, "chDB "+cur.Version, checks, qcur)
	for _, v := range viewNames {
		a, b, err := testenv.QueryBoth(old, cur, "SELECT * FROM "+v)
		if err != nil {
			t.Errorf("%s: %v", v, err)
		} else if d := testenv.Diff("18.16", a, "chDB", b, false); d != "" {
			t.Errorf("%s differs between 18.16 and %s:\n%s", v, cur.Version, d)
		}
	}
	// Live only: the same figures.
	if err := old.Conn.Exec(ctx, "TRUNCATE TABLE cell_scores"); err != nil {
		t.Fatal(err)
	}
	if err := cur.Exec(ctx, "TRUNCATE TABLE cell_scores"); err != nil {
		t.Fatal(err)
	}
	runMessyChecks(t, "18.16 live", checks, q18)
	runMessyChecks(t, "chDB live", checks, qcur)
}

// TestMessyLateRefusalRecomputes: a late_beyond_window dead letter that
// arrives after its attempt (the summary was computed with it) is taken
// into account by the next recomputation, whose version is higher (one more
// refusal seen); VerifyCells holds the cell unsettled while the dead letter
// is not read, and settled once the summary has seen it.
func TestMessyLateRefusalRecomputes(t *testing.T) {
	old := migrated(t)
	ctx := context.Background()
	s := chx.Session(old.Conn)
	p := "late_after"
	f := fixture{}
	baseline(f, p, true)
	f.add("task_attempts", mAttempt(p, "la-1", 10, "X", "t1", 1, "ok", true, true, 0, 1))
	f.add("task_attempts", mAttempt(p, "la-2", 10, "X", "t2", 1, "ok", false, true, 0, 0))
	f.insert(t, old.Conn, 1)
	key := []chddl.CellKey{{Project: p, CellID: "X"}}
	if err := chddl.RecomputeCells(ctx, s, old.Database, key); err != nil {
		t.Fatal(err)
	}
	q := "SELECT n_tasks, pass_rate, toString(_version) FROM cell_scores WHERE project = 'late_after' ORDER BY _version DESC LIMIT 1"
	expect(t, old.Conn, q, "2", "50", strconv.FormatUint(chddl.NaturalKeyBase+2, 10))
	// A check that la-2 was refused is not settled while rejected_events,
	// as read, lacks its dead letter (a replica that has not fetched it).
	check := []chddl.CellCheck{{Key: key[0], EventIDs: []string{"la-1", "la-2"}, RefusedIDs: []string{"la-2"}}}
	if unsettled, err := chddl.VerifyCells(ctx, s, old.Database, check); err != nil || len(unsettled) != 1 || unsettled[0] != key[0] {
		t.Fatalf("verify before the dead letter is read: %v %v, want the cell unsettled", unsettled, err)
	}
	late := fixture{}
	late.add("rejected_events", mLate(p, "la-2", "late_beyond_window"))
	late.insert(t, old.Conn, 1)
	if err := chddl.RecomputeCells(ctx, s, old.Database, key); err != nil {
		t.Fatal(err)
	}
	expect(t, old.Conn, q, "1", "100", strconv.FormatUint(chddl.NaturalKeyBase+3, 10))
	expect(t, old.Conn, "SELECT n_tasks, pass_rate FROM v_cell_scores WHERE project = 'late_after' AND cell_id = 'X'", "1", "100")
	unsettled, err := chddl.VerifyCells(ctx, s, old.Database, check)
	if err != nil || len(unsettled) != 0 {
		t.Fatalf("verify after the recomputation: %v %v, want settled", unsettled, err)
	}
}

// TestMessyOldSummariesIgnored: a cell_scores summary written under the
// rules before 0009 (version below NaturalKeyBase) is not read: the view
// computes the cell live until the sink recomputes it.
func TestMessyOldSummariesIgnored(t *testing.T) {
	old := migrated(t)
	ctx := context.Background()
	p := "old_summary"
	f := fixture{}
	baseline(f, p, true)
	f.add("task_attempts", mAttempt(p, "os-1", 10, "X", "t1", 1, "ok", true, true, 0, 1))
	f.insert(t, old.Conn, 1)
	b, err := old.Conn.PrepareBatch(ctx, "INSERT INTO cell_scores (project, cell_id, n_tasks, pass_rate, _version)")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Append(p, "X", uint64(9), 12.5, chddl.VersionBase+9); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	expect(t, old.Conn, "SELECT n_tasks, pass_rate FROM v_cell_scores WHERE project = 'old_summary' AND cell_id = 'X'", "1", "100")
}

// TestMessyChecksFailOnOldViews is the mutation check of the cases: with
// the views as they were before 0009 (0002–0004: the last by _version per
// attempt, every event id counted, no late refusals), every case that
// injects a mess the natural keys, the winner rule or the late refusals
// fix fails; the cases that check definitions already held hold.
func TestMessyChecksFailOnOldViews(t *testing.T) {
	old := migrated(t)
	ctx := context.Background()
	f, checks := messyFixture()
	f.insert(t, old.Conn, 1)
	f.insert(t, old.Conn, 1000)
	for _, file := range chddl.Files()[1:4] {
		for _, s := range file.Statements(old.Database, chddl.Legacy) {
			if err := old.Conn.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v", file.Name, err)
			}
		}
	}
	fails := messyFailures(checks, func(q string) ([][]string, error) {
		_, rows, err := chx.QueryStrings(ctx, old.Conn, q)
		return rows, err
	})
	for _, p := range []string{"skill_resend", "judgment_resend", "judgment_corrected", "attempt_corrected", "event_id_tie",
		"retry_corrected", "split_cycles", "late_refused", "cell_resend", "campaign_resend"} {
		if fails[p] == "" {
			t.Errorf("%s holds on the views before 0009: the case cannot fail", p)
		} else {
			t.Logf("%s on the views before 0009:\n%s", p, fails[p])
		}
	}
	for _, p := range []string{"same_id_resend", "hfr_pooled", "missing_anchors", "partial_credit", "zero_tasks"} {
		if fails[p] != "" {
			t.Errorf("%s fails on the views before 0009 (it checks a rule they already followed):\n%s", p, fails[p])
		}
	}
}

// TestMessyCampaignsViewsCluster checks the messy cases on the 2-shard ×
// 2-replica cluster: migrated ON CLUSTER, every row written twice through
// one node's Distributed tables (redelivered copies), X's summaries
// recomputed through the cluster, then every case read through a replica
// of each shard. The late refusals live on other shards than the events
// they refuse (rejected_events is sharded by its own event id): the views'
// anti-joins are GLOBAL.
func TestMessyCampaignsViewsCluster(t *testing.T) {
	cl := testenv.ClickHouseCluster(t)
	ctx, cancel := testenv.Context(t)
	defer cancel()
	const db = "messy"
	open := func(i int, database string) driver.Conn {
		t.Helper()
		conn, err := chx.Open(ctx, cl.Nodes()[i].Addr(), database, chx.Cluster())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	if _, err := chddl.MigrateCluster(ctx, chx.Session(open(0, "")), db, cl.Name()); err != nil {
		t.Fatal(err)
	}
	writer := open(0, db)
	f, checks := messyFixture()
	f.insert(t, writer, 1)
	f.insert(t, writer, 1000)
	sync := func(tables ...string) {
		for i := range cl.Nodes() {
			s := chx.Session(open(i, ""))
			for _, tb := range tables {
				if err := s.Exec(ctx, "SYSTEM SYNC REPLICA "+chddl.QuoteIdent(db)+"."+tb+chddl.LocalSuffix); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	sync("campaigns", "cells", "task_attempts", "skill_events", "adherence_judgments", "rejected_events")
	// Every cell with attempts is behind its (missing) summary until it is
	// recomputed; after, the cells left out of the recomputation still are.
	cellsWith := func(cond string) int {
		t.Helper()
		_, rows, err := chx.QueryStrings(ctx, writer, "SELECT count() FROM (SELECT DISTINCT project, cell_id FROM task_attempts WHERE "+cond+")")
		if err != nil || len(rows) != 1 {
			t.Fatalf("count cells: %v %v", rows, err)
		}
		n, _ := strconv.Atoi(rows[0][0])
		return n
	}
	behind := func() int {
		t.Helper()
		n, err := chddl.SummariesBehind(ctx, chx.Session(writer), db, "c1")
		if err != nil {
			t.Fatalf("summaries behind through the cluster: %v", err)
		}
		return n
	}
	if got, want := behind(), cellsWith("1"); got != want || want == 0 {
		t.Errorf("before any recomputation: %d cells behind, want %d (every cell with attempts)", got, want)
	}
	if err := chddl.RecomputeCellScores(ctx, chx.Session(writer), db, messyRecomputed); err != nil {
		t.Fatalf("recompute through the cluster: %v", err)
	}
	sync("cell_scores")
	if got, want := behind(), cellsWith("cell_id NOT IN ('"+strings.Join(messyRecomputed, "','")+"')"); got != want {
		t.Errorf("after recomputing %v: %d cells behind, want %d (the others)", messyRecomputed, got, want)
	}
	for _, i := range []int{1, 2} {
		r := open(i, db)
		runMessyChecks(t, cl.Nodes()[i].Name(), checks, func(q string) ([][]string, error) {
			_, rows, err := chx.QueryStrings(ctx, r, q)
			return rows, err
		})
	}
}

// TestMigrate0009BackfillsSummaries: applying 0009 to a database with
// attempts recomputes every cell's summary under the natural-key rules
// (an earlier release's summary, below NaturalKeyBase, would otherwise be
// ignored and the cell computed live until its next attempt), on 18.16 and
// on the current engine.
func TestMigrate0009BackfillsSummaries(t *testing.T) {
	ctx := context.Background()
	for _, e := range bothEngines(t) {
		t.Run(e.name, func(t *testing.T) {
			if _, err := chddl.Migrate(ctx, e.s, e.db); err != nil {
				t.Fatal(err)
			}
			e.exec(t, "INSERT INTO {db}.cells (event_id, project, kind, cell_id, campaign_id, benchmark, agent_model, evolver_model, seed, route, _version) "+
				"SELECT 'bf-c', 'bf', 'started', 'X', 'c1', 'swe', 'A1', '', toInt32(1), 'baseline', toUInt64(1)")
			e.exec(t, "INSERT INTO {db}.task_attempts (event_id, event_time_ms, project, cell_id, task_id, attempt, status, success, final, score, _version) "+
				"SELECT 'bf-1', toInt64(1000), 'bf', 'X', 't1', toInt32(1), 'ok', toUInt8(0), toUInt8(1), toFloat64(0), toUInt64(1)")
			e.exec(t, "INSERT INTO {db}.task_attempts (event_id, event_time_ms, project, cell_id, task_id, attempt, status, success, final, score, _version) "+
				"SELECT 'bf-2', toInt64(2000), 'bf', 'X', 't1', toInt32(1), 'ok', toUInt8(1), toUInt8(1), toFloat64(1), toUInt64(2)")
			// The summary an earlier release wrote (the last row by _version: 0).
			e.exec(t, fmt.Sprintf("INSERT INTO {db}.cell_scores (project, cell_id, n_tasks, pass_rate, _version) SELECT 'bf', 'X', toUInt64(1), toFloat64(0), toUInt64(%d)", chddl.VersionBase+2))
			files := chddl.Files()
			last := files[len(files)-1]
			if last.Version != 9 {
				t.Fatalf("the newest migration is %s: this test re-applies 0009", last.Name)
			}
			e.exec(t, fmt.Sprintf("INSERT INTO {db}.schema_migrations (version, name, checksum, applied_at) SELECT toUInt32(9), '%s', 'older', now() + 60", last.Name))
			res, err := chddl.Migrate(ctx, e.s, e.db)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(res.Applied, ",") != last.Name {
				t.Fatalf("applied %v, want %s", res.Applied, last.Name)
			}
			if got, want := e.one(t, "SELECT concat(toString(argMax(n_tasks, _version)), ' ', toString(argMax(pass_rate, _version)), ' ', toString(max(_version))) FROM {db}.cell_scores WHERE project = 'bf'"),
				fmt.Sprintf("1 100 %d", chddl.NaturalKeyBase+2); got != want {
				t.Errorf("cell_scores after 0009: %s, want %s (the corrected attempt wins)", got, want)
			}
			if got := e.one(t, "SELECT pass_rate FROM {db}.v_cell_scores WHERE project = 'bf'"); got != "100" {
				t.Errorf("v_cell_scores: %s, want 100", got)
			}
		})
	}
}

// TestSummariesBehind: a campaign's cell whose attempts (or late refusals)
// are newer than its summary is behind until the next recomputation, one
// without any summary too; cells of other campaigns do not count. On 18.16
// and the current engine.
func TestSummariesBehind(t *testing.T) {
	ctx := context.Background()
	for _, e := range bothEngines(t) {
		t.Run(e.name, func(t *testing.T) {
			if _, err := chddl.Migrate(ctx, e.s, e.db); err != nil {
				t.Fatal(err)
			}
			behind := func(campaign string) int {
				t.Helper()
				n, err := chddl.SummariesBehind(ctx, e.s, e.db, campaign)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			cell := func(id, cellID, campaign string) {
				e.exec(t, "INSERT INTO {db}.cells (event_id, project, kind, cell_id, campaign_id, benchmark, agent_model, evolver_model, seed, route, _version) "+
					"SELECT '"+id+"', 'sb', 'started', '"+cellID+"', '"+campaign+"', 'swe', 'A1', '', toInt32(1), 'baseline', toUInt64(1)")
			}
			attempt := func(id, cellID, task string) {
				e.exec(t, "INSERT INTO {db}.task_attempts (event_id, event_time_ms, project, cell_id, task_id, attempt, status, success, final, score, _version) "+
					"SELECT '"+id+"', toInt64(1000), 'sb', '"+cellID+"', '"+task+"', toInt32(1), 'ok', toUInt8(1), toUInt8(1), toFloat64(1), toUInt64(1)")
			}
			recompute := func(cells ...string) {
				t.Helper()
				var keys []chddl.CellKey
				for _, c := range cells {
					keys = append(keys, chddl.CellKey{Project: "sb", CellID: c})
				}
				if err := chddl.RecomputeCells(ctx, e.s, e.db, keys); err != nil {
					t.Fatal(err)
				}
			}
			cell("c-x", "X", "camp")
			cell("c-y", "Y", "camp")
			cell("c-o", "O", "other")
			if n := behind("camp"); n != 0 {
				t.Fatalf("cells without attempts: %d behind, want 0", n)
			}
			attempt("x1", "X", "t1")
			attempt("y1", "Y", "t1")
			attempt("y2", "Y", "t2")
			attempt("o1", "O", "t1")
			if n := behind("camp"); n != 2 {
				t.Fatalf("two cells with attempts and no summary: %d behind, want 2", n)
			}
			recompute("X", "Y")
			if n := behind("camp"); n != 0 {
				t.Fatalf("after the recomputation: %d behind, want 0", n)
			}
			attempt("x2", "X", "t2")
			attempt("x2", "X", "t2") // a redelivered copy is no new attempt
			if n := behind("camp"); n != 1 {
				t.Fatalf("a new attempt of X: %d behind, want 1", n)
			}
			recompute("X")
			attempt("y1", "Y", "t1") // a copy of an attempt the summary saw
			if n := behind("camp"); n != 0 {
				t.Fatalf("after recomputing X, with a copy of Y's attempt: %d behind, want 0", n)
			}
			e.exec(t, "INSERT INTO {db}.rejected_events (event_id, project, stage, reason_code, message, source_topic, source_partition, source_offset, payload, source_event_id, _version) "+
				"SELECT 'dl-y1', 'sb', 'limit', 'late_beyond_window', 'late', 'hf.attempts', toInt32(0), toInt64(0), '', 'y1', toUInt64(1)")
			if n := behind("camp"); n != 1 {
				t.Fatalf("a late refusal of Y's attempt: %d behind, want 1", n)
			}
			recompute("Y")
			if n := behind("camp"); n != 0 {
				t.Fatalf("after recomputing Y: %d behind, want 0", n)
			}
			if n := behind("other"); n != 1 {
				t.Fatalf("campaign other (O never recomputed): %d behind, want 1", n)
			}
			// A cell all of whose attempts are refused late keeps its last
			// summary (a recomputation writes no row for it): not behind,
			// or a reader waiting for 0 would wait for ever.
			cell("c-z", "Z", "camp")
			attempt("z1", "Z", "t1")
			recompute("Z")
			e.exec(t, "INSERT INTO {db}.rejected_events (event_id, project, stage, reason_code, message, source_topic, source_partition, source_offset, payload, source_event_id, _version) "+
				"SELECT 'dl-z1', 'sb', 'limit', 'late_beyond_window', 'late', 'hf.attempts', toInt32(0), toInt64(0), '', 'z1', toUInt64(1)")
			recompute("Z")
			if n := behind("camp"); n != 0 {
				t.Fatalf("a cell whose only attempt is refused late: %d behind, want 0", n)
			}
			// Another project's cell of the same id, in another campaign,
			// with an attempt and no summary, is not campaign camp's.
			e.exec(t, "INSERT INTO {db}.cells (event_id, project, kind, cell_id, campaign_id, benchmark, agent_model, evolver_model, seed, route, _version) "+
				"SELECT 'c-x2', 'sb2', 'started', 'X', 'elsewhere', 'swe', 'A1', '', toInt32(1), 'baseline', toUInt64(1)")
			e.exec(t, "INSERT INTO {db}.task_attempts (event_id, event_time_ms, project, cell_id, task_id, attempt, status, success, final, score, _version) "+
				"SELECT 'x9', toInt64(1000), 'sb2', 'X', 't9', toInt32(1), 'ok', toUInt8(1), toUInt8(1), toFloat64(1), toUInt64(1)")
			if n := behind("camp"); n != 0 {
				t.Fatalf("another project's cell X of another campaign: %d behind for camp, want 0", n)
			}
			if n := behind("elsewhere"); n != 1 {
				t.Fatalf("campaign elsewhere: %d behind, want 1", n)
			}
			if n := behind("it's none"); n != 0 {
				t.Fatalf("an unknown campaign with a quote: %d behind, want 0", n)
			}
		})
	}
}
