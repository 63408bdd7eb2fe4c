package stack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chdb"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/processors"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/sinks/chsink"
)

// Messy campaigns through the whole pipeline (issue 42): one project per
// case, each a small clean campaign — a baseline cell B and an evolved cell
// X of agent A and evolver E, two cycles of two tasks, one accepted update
// in X — with one kind of mess injected. The events go through the
// embedded broker and the processors into ClickHouse 18.16 and the 2 × 2
// cluster (one sink each); the tables are then copied into chDB 26.7. On
// all three, for every case, the views and the derived events must agree
// with the figures computed here from the definitions (refFigures: the
// natural keys, the winner rule, late refusals, docs/metrics.md), and with each
// other: every cell's v_cell_scores against its round_metrics summed over
// rounds.

// messyWhen is the event time of the campaigns' first event: an hour ago,
// so that the processors' clocks (log and wall) agree about what is late.
var messyWhen = time.Now().UTC().Add(-time.Hour).Truncate(time.Second)

// mc builds one case's events.
type mc struct {
	p   string
	seq int
	evs []schemas.Event
}

func (c *mc) at(sec float64) time.Time {
	return messyWhen.Add(time.Duration(sec * float64(time.Second)))
}

func (c *mc) env(id string, sec float64) schemas.Envelope {
	if id == "" {
		c.seq++
		id = fmt.Sprintf("%s-%d", c.p, c.seq)
	}
	return schemas.Envelope{EventID: id, EventTime: c.at(sec), Project: c.p, Source: "messy"}
}

func (c *mc) add(evs ...schemas.Event) { c.evs = append(c.evs, evs...) }

func (c *mc) campaign(agents, evolvers []string) {
	c.add(&schemas.CampaignDeclared{Envelope: c.env("", 0), CampaignID: "c", Benchmarks: []string{"swe"},
		AnchorAgents: agents, AnchorEvolvers: evolvers, LabelEpsilon: 0.02, LabelAlpha: 0.05})
}

func (c *mc) cell(cell, agent, evolver, route string, sec float64) {
	c.add(&schemas.CellStarted{Envelope: c.env("", sec), CampaignID: "c", CellID: cell, Benchmark: "swe",
		AgentModel: agent, EvolverModel: evolver, Seed: 1, Route: route, H0Version: "h0", BatchSize: 2,
		MaxAttempts: 1, TaskCount: 4})
}

func (c *mc) finish(cell string, sec float64) {
	c.add(&schemas.CellFinished{Envelope: c.env("", sec), CellID: cell, Status: schemas.CellCompleted, Attempts: 4})
}

// attempt returns (and adds) attempt 1 of task in cycle, final, passed
// with score 1 or failed with score 0 unless score says otherwise.
func (c *mc) attempt(id, cell, task string, cycle int32, pass bool, sec float64, version string) *schemas.TaskAttempt {
	score := 0.0
	if pass {
		score = 1
	}
	a := &schemas.TaskAttempt{Envelope: c.env(id, sec), CellID: cell, TaskID: task, StreamIdx: cycle*10 + int32(len(task)),
		Cycle: cycle, Attempt: 1, HarnessVersion: version, Status: schemas.StatusOK, Score: score, Success: pass, Final: true,
		SkillsLoaded: []string{}}
	c.add(a)
	return a
}

func (c *mc) update(id, updateID, cell string, cycle int32, from, to string, accepted, rolledBack bool, sec float64) *schemas.HarnessUpdate {
	content := "Run the tests before answering (" + c.p + " " + updateID + ")."
	sum := sha256.Sum256([]byte(content))
	u := &schemas.HarnessUpdate{Envelope: c.env(id, sec), CellID: cell, UpdateID: updateID, Cycle: cycle,
		FromVersion: from, ToVersion: to, EvolverModel: "E",
		Artifacts:       []schemas.Artifact{{Kind: schemas.KindPrompt, Name: "system", Op: schemas.OpModify, Content: content, ContentSHA256: hex.EncodeToString(sum[:])}},
		EvidenceTaskIDs: []string{"t1"}, Accepted: accepted, RolledBack: rolledBack}
	c.add(u)
	return u
}

// cleanCampaign adds the case's clean campaign: anchors [A] / [E] unless
// the case declares its own (agents nil), B and X started at 1 s, cycle 1
// (t1, t2) at 10 s, the update u1 (h0 → h1) at 15 s, cycle 2 (t3, t4) at
// 20 s, both cells finished at 30 s. B passes t1 and t3; X passes t1, t3
// and t4 (under h1). skip names X's attempts (task ids) left out for the
// case to send its own way.
func (c *mc) cleanCampaign(agents []string, updateAccepted bool, skip ...string) {
	if agents != nil {
		c.campaign(agents, []string{"E"})
	}
	c.cell("B", "A", "", schemas.RouteBaseline, 1)
	c.cell("X", "A", "E", schemas.RouteInSitu, 1)
	c.attempt("", "B", "t1", 1, true, 10, "h0")
	c.attempt("", "B", "t2", 1, false, 10, "h0")
	c.attempt("", "B", "t3", 2, true, 20, "h0")
	c.attempt("", "B", "t4", 2, false, 20, "h0")
	skipped := map[string]bool{}
	for _, s := range skip {
		skipped[s] = true
	}
	xv := "h1"
	if !updateAccepted {
		xv = "h0"
	}
	for _, a := range []struct {
		task  string
		cycle int32
		pass  bool
	}{{"t1", 1, true}, {"t2", 1, false}, {"t3", 2, true}, {"t4", 2, true}} {
		if skipped[a.task] {
			continue
		}
		v := "h0"
		if a.cycle == 2 {
			v = xv
		}
		c.attempt("", "X", a.task, a.cycle, a.pass, 10*float64(a.cycle), v)
	}
	c.update("", "u1", "X", 1, "h0", "h1", updateAccepted, false, 15)
	c.finish("B", 30)
	c.finish("X", 30)
}

// viewCheck is one expected answer of a case: query ({p}: the case's
// project) and its one row.
type viewCheck struct {
	query string
	want  []string
}

// messyCase is one case: its events (sent first), late events (sent once
// every cell's retention window passed: refused late_beyond_window), the
// events the processors must refuse for that reason, its own checks, and
// whether it waits for the processors' side of issue 42.
type messyCase struct {
	name    string
	evs     []schemas.Event
	late    []schemas.Event
	refused []string // event ids refused late_beyond_window
	checks  []viewCheck
	// noDeadLetters: no dead letter of the case's project but those of
	// refused (an admitted event is not refused for a wrong reason).
	noDeadLetters bool
}

func messyCases() []messyCase {
	var out []messyCase
	newCase := func(name string) *mc { return &mc{p: name} }

	// clean: the control. B 50, X 75: Δ 25; rounds of X: 50 and 100.
	c := newCase("clean")
	c.campaign([]string{"A"}, []string{"E"})
	c.cleanCampaign(nil, true)
	out = append(out, messyCase{name: c.p, evs: c.evs, noDeadLetters: true, checks: []viewCheck{
		{"SELECT delta_pp FROM v_pair_gain WHERE project = {p}", []string{"25"}},
		{"SELECT updates FROM v_label_summary WHERE project = {p}", []string{"1"}},
	}})

	// attempt_corrected: X's t2 failed (10 s), then was corrected to a
	// pass under a new id (12 s); the correction is sent first. Winner: the
	// correction. X 100, Δ 50; round 1 of X: 2 tasks, 100.
	c = newCase("attempt_corrected")
	c.campaign([]string{"A"}, []string{"E"})
	c.attempt("", "X", "t2", 1, true, 12, "h0")
	c.cleanCampaign(nil, true)
	out = append(out, messyCase{name: c.p, evs: c.evs, noDeadLetters: true, checks: []viewCheck{
		{"SELECT delta_pp FROM v_pair_gain WHERE project = {p}", []string{"50"}},
	}})

	// skill_resend: X's attempts offer skills; t1's load_skill (loaded) is
	// re-sent under a new id, t2's did not load. Load success 1/2; SLR of A
	// = 1 loaded / 4 offered; round 1 of X: skill_load_rate 1/2.
	c = newCase("skill_resend")
	c.campaign([]string{"A"}, []string{"E"})
	c.cleanCampaign(nil, true)
	for _, ev := range c.evs {
		if a, ok := ev.(*schemas.TaskAttempt); ok && a.CellID == "X" {
			a.SkillsAvailable = 1
		}
	}
	skill := func(task string, status string, sec float64) {
		c.add(&schemas.SkillEvent{Envelope: c.env("", sec), CellID: "X", TaskID: task, Attempt: 1, Turn: 1,
			Tool: schemas.ToolLoadSkill, SkillName: "skillX", Status: status})
	}
	skill("t1", schemas.SkillLoaded, 11)
	skill("t2", schemas.SkillNotFound, 11)
	skill("t1", schemas.SkillLoaded, 12) // the re-send
	out = append(out, messyCase{name: c.p, evs: c.evs, noDeadLetters: true, checks: []viewCheck{
		{"SELECT skill_load_success_rate, skill_load_rate FROM v_skill_activation WHERE project = {p}", []string{"0.5", "0.25"}},
		{"SELECT skill_load_rate FROM round_metrics FINAL WHERE project = {p} AND cell_id = 'X' AND cycle = 1", []string{"0.5"}},
	}})

	// judgment_resend: t1's judgment (F3 VC1, loaded 0.8, final 0.4) re-sent
	// under a new id; t2's F1 VO1, loaded 0.6, final 0.4. Views: 2
	// judgments, loaded 0.7, final 0.4, HFR (3/4 + 1/2) / 2; round 1 of X:
	// adherence_loaded 0.7, adherence_final 0.4.
	c = newCase("judgment_resend")
	c.campaign([]string{"A"}, []string{"E"})
	c.cleanCampaign(nil, true)
	judge := func(task string, f, vc, vo int32, hl, fv float64, sec float64) {
		c.add(&schemas.AdherenceJudgment{Envelope: c.env("", sec), CellID: "X", TaskID: task, Attempt: 1, SkillName: "skillX",
			JudgeModel: "judge", Followed: f, ViolatedCommission: vc, ViolatedOmission: vo, HarnessLoaded: &hl, FinalValidation: &fv})
	}
	judge("t1", 3, 1, 0, 0.8, 0.4, 11)
	judge("t2", 1, 0, 1, 0.6, 0.4, 11)
	judge("t1", 3, 1, 0, 0.8, 0.4, 12) // the re-send
	out = append(out, messyCase{name: c.p, evs: c.evs, noDeadLetters: true, checks: []viewCheck{
		{"SELECT judgments, harness_loaded, final_validation FROM v_adherence WHERE project = {p}", []string{"2", "0.7", "0.4"}},
		{"SELECT hfr FROM v_skill_activation WHERE project = {p}", []string{"0.625"}},
		{"SELECT adherence_loaded, adherence_final FROM round_metrics FINAL WHERE project = {p} AND cell_id = 'X' AND cycle = 1", []string{"0.7", "0.4"}},
	}})

	// update_resend: u1 re-sent under a new id: one update, one label.
	c = newCase("update_resend")
	c.campaign([]string{"A"}, []string{"E"})
	c.cleanCampaign(nil, true)
	c.update("", "u1", "X", 1, "h0", "h1", true, false, 16)
	out = append(out, messyCase{name: c.p, evs: c.evs, checks: []viewCheck{
		{"SELECT updates FROM v_label_summary WHERE project = {p}", []string{"1"}},
		{"SELECT count() FROM labeled_samples FINAL WHERE project = {p}", []string{"1"}},
	}})

	// after_finish: X's t5 (cycle 2, passed) arrives after X finished
	// (40 s), within the retention window: counted everywhere. X: 5 tasks,
	// 80; round 2 of X: 3 tasks, 100.
	c = newCase("after_finish")
	c.campaign([]string{"A"}, []string{"E"})
	c.cleanCampaign(nil, true)
	c.attempt("", "X", "t5", 2, true, 40, "h1")
	out = append(out, messyCase{name: c.p, evs: c.evs, noDeadLetters: true})

	// late_cycle: B and X have a third cycle (t5 passed, t6 failed in
	// both, 25 s) and X's cycle 1 is stamped and sent two rounds late (28
	// s, after cycle 3). X: 6 tasks, 4 passed; 3 rounds, each with a lift
	// (0, 50, 0: mean 16.67, stability 16.67 − 28.87).
	c = newCase("late_cycle")
	c.campaign([]string{"A"}, []string{"E"})
	c.cleanCampaign(nil, true, "t1", "t2")
	c.attempt("", "B", "t5", 3, true, 25, "h0")
	c.attempt("", "B", "t6", 3, false, 25, "h0")
	c.attempt("", "X", "t5", 3, true, 25, "h1")
	c.attempt("", "X", "t6", 3, false, 25, "h1")
	c.attempt("", "X", "t1", 1, true, 28, "h0")
	c.attempt("", "X", "t2", 1, false, 28, "h0")
	out = append(out, messyCase{name: c.p, evs: c.evs, noDeadLetters: true, checks: []viewCheck{
		{"SELECT rounds, round(mean_lift, 6), round(stddev_lift, 6) FROM v_round_stability WHERE project = {p} AND level = 'cell' AND cell_id = 'X'", []string{"3", "16.666667", "28.867513"}},
	}})

	// empty_version: u1 was not accepted, and X's cycle-2 attempts carry an
	// empty harness_version (the current one, h0): admitted, counted, no
	// dead letter. X 75; the unaccepted update still counts as an update.
	c = newCase("empty_version")
	c.campaign([]string{"A"}, []string{"E"})
	c.cleanCampaign(nil, false)
	for _, ev := range c.evs {
		if a, ok := ev.(*schemas.TaskAttempt); ok && a.CellID == "X" && a.Cycle == 2 {
			a.HarnessVersion = ""
		}
	}
	out = append(out, messyCase{name: c.p, evs: c.evs, noDeadLetters: true, checks: []viewCheck{
		{"SELECT updates FROM v_label_summary WHERE project = {p}", []string{"1"}},
	}})

	// rolled_back: u1 accepted and rolled back: its sample is neutral
	// (reason "rolled back") and counts in the effective-update rate: 0/1.
	c = newCase("rolled_back")
	c.campaign([]string{"A"}, []string{"E"})
	c.cleanCampaign(nil, true)
	for _, ev := range c.evs {
		if u, ok := ev.(*schemas.HarnessUpdate); ok {
			u.RolledBack = true
		}
		if a, ok := ev.(*schemas.TaskAttempt); ok && a.HarnessVersion == "h1" {
			a.HarnessVersion = "h0"
		}
	}
	out = append(out, messyCase{name: c.p, evs: c.evs, noDeadLetters: true, checks: []viewCheck{
		{"SELECT updates, neutral, effective_update_rate FROM v_label_summary WHERE project = {p}", []string{"1", "1", "0"}},
	}})

	// beyond_window: an attempt of X (t9, a fail) sent after X's retention
	// window: refused late_beyond_window, counted nowhere. X stays 75.
	c = newCase("beyond_window")
	c.campaign([]string{"A"}, []string{"E"})
	c.cleanCampaign(nil, true)
	clean := c.evs
	c.evs = nil
	late := c.attempt(c.p+"-late", "X", "t9", 2, false, 31, "h1")
	out = append(out, messyCase{name: c.p, evs: clean, late: []schemas.Event{late}, refused: []string{late.EventID}, noDeadLetters: true,
		checks: []viewCheck{
			{"SELECT count() FROM rejected_events FINAL WHERE project = {p} AND reason_code = 'late_beyond_window' AND source_event_id = '" + late.EventID + "'", []string{"1"}},
		}})

	// missing_anchors: anchors A, A2 / E, E2; only (A, E) has cells.
	// Δupdate(E) NULL; Δbenefit(A) 25 over 1 of 2 anchor evolvers.
	c = newCase("missing_anchors")
	c.campaign([]string{"A", "A2"}, []string{"E", "E2"})
	c.cleanCampaign(nil, true)
	out = append(out, messyCase{name: c.p, evs: c.evs, noDeadLetters: true, checks: []viewCheck{
		{"SELECT delta_update_pp FROM v_update_gain WHERE project = {p}", []string{"NULL"}},
		{"SELECT delta_benefit_pp, evolvers, n_anchor_evolvers FROM v_benefit_gain WHERE project = {p}", []string{"25", "1", "2"}},
	}})

	// partial_credit: X's t2 scores 0.5 (not a success) and t4 0.25 with
	// status error (a failure, 0). Round mean_score is in [0, 1], the
	// view's × 100.
	c = newCase("partial_credit")
	c.campaign([]string{"A"}, []string{"E"})
	c.cleanCampaign(nil, true)
	for _, ev := range c.evs {
		if a, ok := ev.(*schemas.TaskAttempt); ok && a.CellID == "X" {
			switch a.TaskID {
			case "t2":
				a.Score = 0.5
			case "t4":
				a.Score, a.Status, a.Success = 0.25, schemas.StatusError, false
			}
		}
	}
	out = append(out, messyCase{name: c.p, evs: c.evs, noDeadLetters: true, checks: []viewCheck{
		{"SELECT mean_score FROM v_cell_scores WHERE project = {p} AND cell_id = 'X'", []string{"62.5"}},
		{"SELECT mean_score FROM round_metrics FINAL WHERE project = {p} AND cell_id = 'X' AND cycle = 1", []string{"0.75"}},
	}})

	// zero_tasks: X started and finished without attempts: no row in
	// v_cell_scores or round_metrics, no pair, no Δupdate row.
	c = newCase("zero_tasks")
	c.campaign([]string{"A"}, []string{"E"})
	c.cleanCampaign(nil, true, "t1", "t2", "t3", "t4")
	var noUpdate []schemas.Event
	for _, ev := range c.evs {
		if _, ok := ev.(*schemas.HarnessUpdate); !ok {
			noUpdate = append(noUpdate, ev)
		}
	}
	out = append(out, messyCase{name: c.p, evs: noUpdate, noDeadLetters: true, checks: []viewCheck{
		{"SELECT count() FROM v_cell_scores WHERE project = {p} AND cell_id = 'X'", []string{"0"}},
		{"SELECT count() FROM round_metrics FINAL WHERE project = {p} AND cell_id = 'X'", []string{"0"}},
		{"SELECT count() FROM v_update_gain WHERE project = {p}", []string{"0"}},
	}})
	return out
}

// Reference figures, computed from the events by the definitions (never by
// the pipeline): per cell, the tasks and strict pass rate and mean score
// (×100, the views'); per (cell, cycle), the round's tasks, pass rate (%),
// mean score ([0, 1]) and lift (pp).
type refCell struct {
	tasks      int
	pass, mean float64
}

type refRound struct {
	tasks      int
	pass, mean float64
	lift       *float64
}

// refFigures applies the rules to evs: events in refused are left out;
// copies of one id keep the last sent; per (cell, task, cycle, attempt)
// the winner is the greatest (event time in ms, event id); a status other
// than ok is a failure with score 0.
func refFigures(evs []schemas.Event, refused map[string]bool) (map[string]refCell, map[string]refRound) {
	type akey struct {
		cell, task string
		cycle      int32
	}
	byID := map[string]*schemas.TaskAttempt{}
	for _, ev := range evs {
		if a, ok := ev.(*schemas.TaskAttempt); ok && a.Attempt == 1 && !refused[a.EventID] {
			byID[a.EventID] = a
		}
	}
	after := func(a, b *schemas.TaskAttempt) bool {
		if !a.EventTime.Equal(b.EventTime) {
			return a.EventTime.After(b.EventTime)
		}
		return a.EventID > b.EventID
	}
	win := map[akey]*schemas.TaskAttempt{}
	for _, a := range byID {
		k := akey{a.CellID, a.TaskID, a.Cycle}
		if w := win[k]; w == nil || after(a, w) {
			win[k] = a
		}
	}
	outcome := func(a *schemas.TaskAttempt) (pass, score float64) {
		if a.Status != schemas.StatusOK {
			return 0, 0
		}
		if a.Success {
			pass = 1
		}
		return pass, a.Score
	}
	// Per cell: one outcome per task, its latest winner.
	perTask := map[[2]string]*schemas.TaskAttempt{}
	for k, a := range win {
		tk := [2]string{k.cell, k.task}
		if w := perTask[tk]; w == nil || after(a, w) {
			perTask[tk] = a
		}
	}
	cells := map[string]refCell{}
	for tk, a := range perTask {
		c := cells[tk[0]]
		p, s := outcome(a)
		c.tasks++
		c.pass += p
		c.mean += s
		cells[tk[0]] = c
	}
	for id, c := range cells {
		c.pass, c.mean = 100*c.pass/float64(c.tasks), 100*c.mean/float64(c.tasks)
		cells[id] = c
	}
	base := map[string]float64{} // B's score per task
	for tk, a := range perTask {
		if tk[0] == "B" {
			_, base[tk[1]] = outcome(a)
		}
	}
	rounds := map[string]refRound{}
	lifts := map[string][]float64{}
	for k, a := range win {
		rk := fmt.Sprintf("%s/%d", k.cell, k.cycle)
		r := rounds[rk]
		p, s := outcome(a)
		r.tasks++
		r.pass += p
		r.mean += s
		rounds[rk] = r
		if b, ok := base[k.task]; ok && k.cell != "B" {
			lifts[rk] = append(lifts[rk], s-b)
		}
	}
	for rk, r := range rounds {
		r.pass, r.mean = 100*r.pass/float64(r.tasks), r.mean/float64(r.tasks)
		if l := lifts[rk]; len(l) > 0 {
			sum := 0.0
			for _, x := range l {
				sum += x
			}
			v := 100 * sum / float64(len(l))
			r.lift = &v
		}
		rounds[rk] = r
	}
	return cells, rounds
}

// messyQuery answers a query on one engine as rows of text (NULL as "NULL").
type messyQuery func(q string) ([][]string, error)

// checkMessyCase checks one case on one engine: every cell's v_cell_scores
// and every round's round_metrics against the reference, each cell's views
// against its round metrics summed over rounds, the case's own checks, and
// no dead letter of the project other than the expected refusals.
func checkMessyCase(t *testing.T, engine string, c messyCase, query messyQuery) {
	t.Helper()
	refused := map[string]bool{}
	for _, id := range c.refused {
		refused[id] = true
	}
	cells, rounds := refFigures(append(append([]schemas.Event(nil), c.evs...), c.late...), refused)
	p := chddl.QuoteString(c.name)
	rows := func(q string) [][]string {
		t.Helper()
		r, err := query(strings.ReplaceAll(q, "{p}", p))
		if err != nil {
			t.Errorf("%s: %s: %s: %v", engine, c.name, q, err)
			return nil
		}
		for _, row := range r {
			for i, v := range row {
				if v == chdb.Null || v == `\N` {
					row[i] = "NULL"
				}
			}
		}
		return r
	}
	var fails []string
	fail := func(format string, args ...any) { fails = append(fails, fmt.Sprintf(format, args...)) }

	got := map[string][]string{}
	for _, r := range rows("SELECT cell_id, toString(n_tasks), toString(pass_rate), toString(mean_score) FROM v_cell_scores WHERE project = {p}") {
		got[r[0]] = r[1:]
	}
	for id, w := range cells {
		g, ok := got[id]
		if !ok || !sameNum(g[0], float64(w.tasks)) || !sameNum(g[1], w.pass) || !sameNum(g[2], w.mean) {
			fail("v_cell_scores %s: %v, want n_tasks %d pass_rate %g mean_score %g", id, g, w.tasks, w.pass, w.mean)
		}
	}
	if len(got) != len(cells) {
		fail("v_cell_scores has cells %v, want %d", got, len(cells))
	}
	gotR := map[string][]string{}
	for _, r := range rows("SELECT concat(cell_id, '/', toString(cycle)), toString(argMax(n_tasks, _version)), toString(argMax(pass_rate, _version)), " +
		"toString(argMax(mean_score, _version)), ifNull(toString(argMax(lift_vs_baseline, _version)), 'NULL') FROM round_metrics WHERE project = {p} GROUP BY cell_id, cycle") {
		gotR[r[0]] = r[1:]
	}
	for rk, w := range rounds {
		g, ok := gotR[rk]
		lift := "NULL"
		if w.lift != nil {
			lift = strconv.FormatFloat(*w.lift, 'g', -1, 64)
		}
		if !ok || !sameNum(g[0], float64(w.tasks)) || !sameNum(g[1], w.pass) || !sameNum(g[2], w.mean) ||
			(w.lift == nil) != (g[3] == "NULL") || (w.lift != nil && !sameNum(g[3], *w.lift)) {
			fail("round_metrics %s: %v, want n_tasks %d pass_rate %g mean_score %g lift %s", rk, g, w.tasks, w.pass, w.mean, lift)
		}
	}
	if len(gotR) != len(rounds) {
		fail("round_metrics has rounds %v, want %d", gotR, len(rounds))
	}
	// The views against the derived events: tasks and strict passes per cell.
	for _, r := range rows(`SELECT cell_id, toString(n_tasks), toString(r_tasks), toString(n_tasks * pass_rate / 100), toString(r_passed)
FROM (SELECT project, cell_id, n_tasks, pass_rate FROM v_cell_scores WHERE project = {p}) AS l
ALL INNER JOIN
(
    SELECT project, cell_id, sum(r_n) AS r_tasks, sum(r_n * r_pass / 100) AS r_passed
    FROM (SELECT project, cell_id, cycle, argMax(n_tasks, _version) AS r_n, argMax(pass_rate, _version) AS r_pass
          FROM round_metrics WHERE project = {p} GROUP BY project, cell_id, cycle)
    GROUP BY project, cell_id
) AS r USING (project, cell_id)`) {
		if !sameText(r[1], r[2]) || !sameText(r[3], r[4]) {
			fail("cell %s: views %s tasks, %s passed; round_metrics %s tasks, %s passed", r[0], r[1], r[3], r[2], r[4])
		}
	}
	for _, ck := range c.checks {
		r := rows(ck.query)
		if len(r) != 1 || !sameRowText(r[0], ck.want) {
			fail("%s: %v, want %v", ck.query, r, ck.want)
		}
	}
	if c.noDeadLetters {
		for _, r := range rows("SELECT reason_code, message, source_event_id FROM rejected_events FINAL WHERE project = {p}") {
			if len(r) == 3 && refused[r[2]] && r[0] == "late_beyond_window" {
				continue
			}
			fail("dead letter %v", r)
		}
	}
	for _, id := range c.refused {
		if r := rows("SELECT count() FROM rejected_events FINAL WHERE project = {p} AND reason_code = 'late_beyond_window' AND source_event_id = '" + id + "'"); len(r) != 1 || r[0][0] != "1" {
			fail("no late_beyond_window dead letter of %s: %v", id, r)
		}
	}
	if len(fails) > 0 {
		t.Errorf("%s: case %s:\n  %s", engine, c.name, strings.Join(fails, "\n  "))
	}
}

func sameNum(s string, want float64) bool {
	v, err := strconv.ParseFloat(s, 64)
	return err == nil && math.Abs(v-want) <= 1e-9*math.Max(1, math.Abs(want))
}

func sameText(a, b string) bool {
	if a == b {
		return true
	}
	x, err1 := strconv.ParseFloat(a, 64)
	y, err2 := strconv.ParseFloat(b, 64)
	return err1 == nil && err2 == nil && math.Abs(x-y) <= 1e-9*math.Max(1, math.Abs(y))
}

func sameRowText(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if !sameText(got[i], want[i]) {
			return false
		}
	}
	return true
}

// produceMessy writes evs to their raw topics in order, keyed as producers
// key them (a cell's events on one partition of each topic).
func produceMessy(ctx context.Context, t *testing.T, brokers []string, evs []schemas.Event) {
	t.Helper()
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: brokers})
	defer w.Close()
	msgs := make([]kafka.Message, 0, len(evs))
	for _, ev := range evs {
		b, err := schemas.Encode(ev)
		if err != nil {
			t.Fatalf("encode %T %s: %v", ev, ev.Header().EventID, err)
		}
		msgs = append(msgs, kafka.Message{Topic: schemas.TopicFor(ev.Type()), Key: []byte(ev.PartitionKey()), Value: b})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
}

// messyGrace is the processors' retention window for late events in this
// test: long enough for every case's events after cell_finished to arrive
// inside it, short enough to wait out before the beyond-window events.
const messyGrace = 20 * time.Second

// TestMessyCampaignsAgree sends every messy case through the processors
// into ClickHouse 18.16 and the 2 × 2 cluster, then copies 18.16's tables
// into chDB 26.7, and checks every case on all three (checkMessyCase).
func TestMessyCampaignsAgree(t *testing.T) {
	start := time.Now()
	cl := testenv.ClickHouseCluster(t)
	single := testenv.ClickHouse(t)
	kb := testenv.Kafka(t)
	brokers := []string{kb.Addr()}
	ctx, cancel := testenv.Context(t)
	defer cancel()
	const db = "hf_messy"
	if res := migrateCluster(ctx, t, cl.Node(1, 1), db, cl.Name()); len(res.Applied) != len(chddl.Files()) {
		t.Fatalf("migrate --cluster applied %v", res.Applied)
	}

	run := func(name string, f func(context.Context) error) func() {
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- f(rctx) }()
		return func() {
			stop()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
	// The processors' warnings are what a wait on them reports when it
	// gives up.
	var procLog testenv.SyncBuffer
	proc, err := processors.New(processors.Config{Brokers: brokers, Grace: messyGrace, FinishHold: time.Second, PendingTimeout: 10 * time.Second},
		processors.WithLogger(zerolog.New(&procLog).Level(zerolog.InfoLevel)))
	if err != nil {
		t.Fatal(err)
	}
	defer run("processors", proc.Run)()
	var sinks []*chsink.Sink
	sink := func(group, addr, database, cluster string) func() {
		s, err := chsink.New(chsink.Config{Brokers: brokers, ClickHouse: addr, Database: database, Cluster: cluster, Group: group,
			MaxAge: 200 * time.Millisecond, RetryMaxInterval: 500 * time.Millisecond}, chsink.WithLogger(zerolog.Nop()))
		if err != nil {
			t.Fatal(err)
		}
		sinks = append(sinks, s)
		return run("sink "+group, s.Run)
	}
	defer sink("hf-sink-single", single.Addr, single.Database, "")()
	defer sink("hf-sink-cluster", cl.Node(1, 1).Addr()+","+cl.Node(2, 1).Addr(), db, cl.Name())()

	cases := messyCases()
	var first, late []schemas.Event
	for _, c := range cases {
		first = append(first, c.evs...)
		late = append(late, c.late...)
	}
	produceMessy(ctx, t, brokers, first)
	kc := kafkax.NewClient(brokers)
	settled := func(what string) {
		t.Helper()
		testenv.WhileProgressing(t, time.Minute, 6*time.Minute, what, func() (bool, string) {
			var parts []string
			done := true
			for _, tp := range []string{schemas.TopicCells, schemas.TopicAttempts, schemas.TopicUpdates, schemas.TopicSkillEvents, schemas.TopicJudgments} {
				if lag, err := kafkax.GroupLag(ctx, kc, "hf-processors", tp); err != nil || lag != 0 {
					parts = append(parts, fmt.Sprintf("hf-processors %s lag %d (%v)", tp, lag, err))
				}
			}
			for _, g := range []struct {
				group  string
				topics []string
			}{
				{"hf-processors", []string{schemas.TopicCells, schemas.TopicAttempts, schemas.TopicUpdates, schemas.TopicSkillEvents, schemas.TopicJudgments}},
				{"hf-processors-pair", []string{schemas.TopicOutcomes}},
				{"hf-sink-single", chsink.DefaultTopics()},
				{"hf-sink-cluster", chsink.DefaultTopics()},
			} {
				lag, err := kafkax.GroupLag(ctx, kc, g.group, g.topics...)
				parts = append(parts, fmt.Sprintf("%s lag %d (%v)", g.group, lag, err))
				done = done && err == nil && lag == 0
			}
			// The cluster's sink verifies every summary it wrote (a
			// recomputation may read a replica without the latest rows).
			for _, s := range sinks {
				if st := s.Stats(); st.Unverified != 0 {
					done = false
					parts = append(parts, fmt.Sprintf("%d summaries unverified", st.Unverified))
				}
			}
			state := strings.Join(parts, ", ")
			if !done {
				state += "; processors' log:\n" + tail(procLog.String(), 4000)
			}
			return done, state
		})
	}
	settled("the cases processed and written")
	t.Logf("first events settled at %s", time.Since(start).Round(time.Millisecond))
	// Every cell finished at least a retention window ago (on the wall
	// clock): the late events are beyond it.
	time.Sleep(messyGrace + 5*time.Second)
	produceMessy(ctx, t, brokers, late)
	settled("the late events processed and written")
	// The processors commit their input before the sink has the outputs
	// only if the outputs are written first; one more settle pass after a
	// pause covers a correction emitted by a wall-clock sweep.
	time.Sleep(3 * time.Second)
	settled("the sweeps' outputs written")
	syncReplicas(ctx, t, cl, db)
	t.Logf("all settled at %s", time.Since(start).Round(time.Millisecond))

	q18 := func(q string) ([][]string, error) {
		_, rows, err := chx.QueryStrings(ctx, single.Conn, q)
		return rows, err
	}
	cur := testenv.CurrentClickHouse(t)
	if _, err := chddl.Migrate(ctx, cur, cur.Database); err != nil {
		t.Fatal(err)
	}
	testenv.CopyTables(t, single, cur, "campaigns", "cells", "task_attempts", "skill_events", "harness_updates",
		"adherence_judgments", "labeled_samples", "round_metrics", "rejected_events", "cell_scores")
	qcur := func(q string) ([][]string, error) {
		_, rows, err := cur.QueryStrings(ctx, q)
		return rows, err
	}
	reader := openNode(ctx, t, cl.Node(2, 2), db)
	qcl := func(q string) ([][]string, error) {
		_, rows, err := chx.QueryStrings(ctx, reader, q)
		return rows, err
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkMessyCase(t, "18.16", c, q18)
			checkMessyCase(t, "chDB "+cur.Version, c, qcur)
			checkMessyCase(t, "cluster", c, qcl)
		})
	}
	// The engines agree on every view, row for row.
	for _, v := range clusterViews {
		ref := httpQuery(ctx, t, single.Server.HTTPAddr(), single.Database, "SELECT * FROM "+v)
		if d := testenv.Diff("18.16", ref, "cluster", httpQuery(ctx, t, cl.Node(1, 2).HTTPAddr(), db, "SELECT * FROM "+v), false); d != "" {
			t.Errorf("%s differs between 18.16 and the cluster:\n%s", v, d)
		}
	}
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
