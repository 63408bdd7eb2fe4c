package report

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/chx"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers/sim"
	"github.com/harnessflow/harnessflow/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// insert writes rows into table with named columns.
func insert(t *testing.T, conn driver.Conn, table string, cols []string, rows [][]any) {
	t.Helper()
	if len(rows) == 0 {
		return
	}
	ctx := context.Background()
	b, err := conn.PrepareBatch(ctx, "INSERT INTO "+table+" ("+strings.Join(cols, ", ")+")")
	if err != nil {
		t.Fatalf("prepare %s: %v", table, err)
	}
	for _, r := range rows {
		if err := b.Append(r...); err != nil {
			t.Fatalf("append %s: %v", table, err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatalf("send %s: %v", table, err)
	}
}

func u8(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// load inserts events into the raw tables by hand (the sink's job in
// production), each row with version ver.
func load(t *testing.T, conn driver.Conn, evs []schemas.Event, ver uint64) {
	t.Helper()
	var camp, cells, att, sk, judg [][]any
	for _, ev := range evs {
		h := ev.Header()
		base := []any{h.EventID, h.EventTime.UnixMilli(), h.Project}
		switch e := ev.(type) {
		case *schemas.CampaignDeclared:
			camp = append(camp, append(base, e.CampaignID, e.Benchmarks, e.AnchorAgents, e.AnchorEvolvers, e.LabelEpsilon, e.LabelAlpha, ver))
		case *schemas.CellStarted:
			cells = append(cells, append(base, "started", e.CellID, e.CampaignID, e.Benchmark, e.AgentModel, e.EvolverModel, e.Seed, e.Route, ver))
		case *schemas.TaskAttempt:
			att = append(att, append(base, e.CellID, e.TaskID, e.Cycle, e.Attempt, e.HarnessVersion, e.Status, e.Score, u8(e.Success), u8(e.Final), e.SkillsAvailable, ver))
		case *schemas.SkillEvent:
			sk = append(sk, append(base, e.CellID, e.TaskID, e.Attempt, e.Turn, e.Tool, e.SkillName, e.Status, ver))
		case *schemas.AdherenceJudgment:
			judg = append(judg, append(base, e.CellID, e.TaskID, e.Attempt, e.SkillName, e.JudgeModel, e.Followed, e.ViolatedCommission, e.ViolatedOmission,
				e.RequiredUnobserved, e.NotApplicable, e.InsufficientEvidence, e.HarnessLoaded, e.FirstAction, e.Midpoint, e.PreFinal, e.FinalValidation, ver))
		}
	}
	env := []string{"event_id", "event_time_ms", "project"}
	insert(t, conn, "campaigns", append(env, "campaign_id", "benchmarks", "anchor_agents", "anchor_evolvers", "label_epsilon", "label_alpha", "_version"), camp)
	insert(t, conn, "cells", append(env, "kind", "cell_id", "campaign_id", "benchmark", "agent_model", "evolver_model", "seed", "route", "_version"), cells)
	insert(t, conn, "task_attempts", append(env, "cell_id", "task_id", "cycle", "attempt", "harness_version", "status", "score", "success", "final", "skills_available", "_version"), att)
	insert(t, conn, "skill_events", append(env, "cell_id", "task_id", "attempt", "turn", "tool", "skill_name", "status", "_version"), sk)
	insert(t, conn, "adherence_judgments", append(env, "cell_id", "task_id", "attempt", "skill_name", "judge_model", "followed", "violated_commission",
		"violated_omission", "required_unobserved", "not_applicable", "insufficient_evidence", "harness_loaded", "first_action", "midpoint", "pre_final", "final_validation", "_version"), judg)
}

func f64(v float64) *float64 { return &v }

func eq(a *float64, b *float64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return math.Abs(*a-*b) < 1e-6
}

// fixture loads a simulated campaign (the ground truth is sim.Expected) plus
// hand-made round metrics and labeled samples, and returns the connection.
func fixture(t *testing.T) (driver.Conn, sim.Config, sim.ExpectedFigures) {
	ch := testenv.ClickHouse(t)
	ctx := context.Background()
	if _, err := chddl.Migrate(ctx, chx.Session(ch.Conn), ch.Database); err != nil {
		t.Fatal(err)
	}
	cfg := sim.Config{Campaign: "rep", Scale: 8, BatchSize: 4, Benchmarks: []string{"swe", "mcp"},
		Agents: []string{"opus46", "qwen235b", "qwen35_9b"}, Evolvers: []string{"opus46", "qwen32b"},
		AnchorAgents: []string{"opus46", "qwen235b"}, AnchorEvolvers: []string{"opus46", "qwen32b"}}
	var evs []schemas.Event
	if err := sim.Generate(cfg, func(ev schemas.Event) error { evs = append(evs, ev); return nil }); err != nil {
		t.Fatal(err)
	}
	load(t, ch.Conn, evs, 1)
	load(t, ch.Conn, evs, 2) // redelivered copies change no figure
	// Round metrics: three rounds per evolved swe cell with known lifts.
	var rm [][]any
	lifts := map[string][]float64{"opus46": {1, 2, 3}, "qwen235b": {0, 20, 40}, "qwen35_9b": {5, 5, 5}}
	for _, a := range cfg.Agents {
		for _, e := range cfg.Evolvers {
			cell := cfg.CellID("swe", a, e)
			for i, l := range lifts[a] {
				pass := 30 + 10*float64(i)
				if e == "qwen32b" {
					pass += 10
				}
				rm = append(rm, []any{fmt.Sprintf("rm-%s-%d", cell, i), int64(0), "default", cell, "rep", "swe", a, e, int32(1), int32(i + 1), int32(4), pass, 0.5, f64(l), uint64(1)})
			}
		}
	}
	insert(t, ch.Conn, "round_metrics", []string{"event_id", "event_time_ms", "project", "cell_id", "campaign_id", "benchmark", "agent_model", "evolver_model",
		"seed", "cycle", "n_tasks", "pass_rate", "mean_score", "lift_vs_baseline", "_version"}, rm)
	// Labeled samples: for opus46 x qwen32b on swe, update 1 labeled positive
	// then re-evaluated negative (one flip); update 2 positive (effect 0.1).
	cell := cfg.CellID("swe", "opus46", "qwen32b")
	ls := [][]any{
		{"s1", "u1", "positive", 0.2, int64(1000)},
		{"s1b", "u1", "negative", -0.1, int64(2000)},
		{"s2", "u2", "positive", 0.1, int64(1000)},
		{"s3", "u3", "neutral", 0.0, int64(1000)},
	}
	var rows [][]any
	for _, s := range ls {
		rows = append(rows, []any{s[0], int64(0), "default", s[0], s[1], cell, "rep", "swe", "opus46", "qwen32b", int32(1), s[2], s[3], s[4], time.UnixMilli(s[4].(int64)).UTC(), uint64(1)})
	}
	insert(t, ch.Conn, "labeled_samples", []string{"event_id", "event_time_ms", "project", "sample_id", "update_id", "cell_id", "campaign_id", "benchmark",
		"agent_model", "evolver_model", "cycle", "label", "effect", "produced_at_ms", "produced_at", "_version"}, rows)
	return ch.Conn, cfg, sim.Expected(evs)
}

func TestBuildMatchesGroundTruth(t *testing.T) {
	conn, cfg, x := fixture(t)
	ctx := context.Background()
	r, err := Build(ctx, conn, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Campaign != "rep" || len(r.Cells) != cfg.Cells() || strings.Join(r.Benchmarks, ",") != "mcp,swe" {
		t.Fatalf("campaign %q, %d cells, benchmarks %v", r.Campaign, len(r.Cells), r.Benchmarks)
	}
	for _, c := range r.Cells {
		w := x.Cells[c.CellID]
		if !eq(&c.PassRate, &w.PassRate) || !eq(&c.PassRateFinal, &w.PassRateFinal) || !eq(&c.MeanScore, &w.MeanScore) || int(c.NTasks) != w.NTasks {
			t.Errorf("cell %s: %+v, want %+v", c.CellID, c, w)
		}
	}
	// The matrix: baseline column first, Δ = pass − base.
	m := r.Matrices[1]
	if m.Benchmark != "swe" || m.Evolvers[0] != "" || len(m.Agents) != 3 || len(m.Evolvers) != 3 {
		t.Fatalf("matrix %+v", m)
	}
	for i, a := range m.Agents {
		for j, e := range m.Evolvers {
			w := x.Cells[cfg.CellID("swe", a, e)].PassRate
			if !eq(m.Pass[i][j], &w) {
				t.Errorf("matrix %s/%s = %v, want %v", a, e, *m.Pass[i][j], w)
			}
			if j > 0 {
				d := x.Delta[sim.PairKey{Benchmark: "swe", Agent: a, Evolver: e, Seed: 1}]
				if !eq(m.Delta[i][j], &d) {
					t.Errorf("Δ %s/%s = %v, want %v", a, e, *m.Delta[i][j], d)
				}
			}
		}
	}
	if len(r.UpdateGain) != 4 {
		t.Fatalf("%d update gains", len(r.UpdateGain))
	}
	for _, u := range r.UpdateGain {
		if w := x.Update[sim.BenchEvolver{Benchmark: u.Benchmark, Evolver: u.Evolver}]; !eq(u.DeltaPP, w) || u.NAnchorAgents != 2 {
			t.Errorf("Δupdate %s/%s = %v, want %v", u.Benchmark, u.Evolver, u.DeltaPP, w)
		}
	}
	if len(r.BenefitGain) != 6 {
		t.Fatalf("%d benefit gains", len(r.BenefitGain))
	}
	for _, b := range r.BenefitGain {
		w := x.Benefit[sim.BenchAgent{Benchmark: b.Benchmark, Agent: b.Agent}]
		if !eq(b.DeltaPP, w.MaxPP) || !eq(b.MeanDeltaPP, w.MeanPP) || int(b.CellsBelowBaseline) != w.Below {
			t.Errorf("Δbenefit %s/%s = %v/%v/%d, want %v/%v/%d", b.Benchmark, b.Agent, *b.DeltaPP, *b.MeanDeltaPP, b.CellsBelowBaseline, *w.MaxPP, *w.MeanPP, w.Below)
		}
	}
	for _, a := range r.Activation {
		w := x.Activation[sim.BenchAgent{Benchmark: a.Benchmark, Agent: a.Agent}]
		if !eq(a.SLR, w.SLR) || !eq(a.LPR, w.LPR) || !eq(a.HFR, w.HFR) || !eq(a.LoadSuccessRate, w.LoadSuccessRate) {
			t.Errorf("activation %s/%s = %v %v %v, want %v %v %v", a.Benchmark, a.Agent, a.SLR, a.LPR, a.HFR, w.SLR, w.LPR, w.HFR)
		}
	}
	if len(r.Adherence) == 0 {
		t.Fatal("no adherence rows")
	}
	for _, a := range r.Adherence {
		w := x.Adherence[sim.BenchAgent{Benchmark: a.Benchmark, Agent: a.Agent}]
		if !eq(a.Phase[0], w.HarnessLoaded) || !eq(a.Phase[2], w.Midpoint) || !eq(a.Phase[4], w.FinalValidation) || !eq(a.Drift, w.Drift) || !eq(a.Decay, w.Decay) {
			t.Errorf("adherence %s/%s differs", a.Benchmark, a.Agent)
		}
	}
	// Stability: qwen235b's lifts 0,20,40 are the least stable (stddev 20).
	if len(r.Unstable) != 6 || r.Unstable[0].Agent != "qwen235b" || !eq(r.Unstable[0].StddevLift, f64(20)) || !eq(r.Unstable[0].MeanLift, f64(20)) {
		t.Fatalf("unstable %+v", r.Unstable)
	}
	last := r.Unstable[len(r.Unstable)-1]
	if last.Agent != "qwen35_9b" || !eq(last.StddevLift, f64(0)) {
		t.Fatalf("most stable last: %+v", last)
	}
	for _, s := range r.Unstable {
		if s.Agent == "opus46" && s.Evolver == "qwen32b" && !eq(&s.FlipRate, f64(1)) {
			t.Fatalf("flip rate %v, want 1 (u1's one re-evaluation flipped; u2, u3 have none)", s.FlipRate)
		}
	}
	// Labels: the latest label per update: u1 negative, u2 positive, u3 neutral.
	if r.Updates != 3 || r.Positive != 1 || r.Negative != 1 || r.Neutral != 1 || !eq(r.EffectiveUpdateRate, f64(1.0/3)) || !eq(r.MeanGain, f64(10)) {
		t.Fatalf("labels %d/%d/%d/%d eff %v gain %v", r.Updates, r.Positive, r.Negative, r.Neutral, r.EffectiveUpdateRate, r.MeanGain)
	}
	// Rounds: per evolver mean over the three agents' cells.
	var got []string
	for _, p := range r.Rounds {
		if p.Benchmark == "swe" && p.Evolver == "qwen32b" {
			got = append(got, fmt.Sprintf("%d:%.0f/%d", p.Cycle, p.PassRate, p.Cells))
		}
	}
	if strings.Join(got, " ") != "1:40/3 2:50/3 3:60/3" {
		t.Fatalf("rounds %v", got)
	}

	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"campaign rep", "benchmark swe", "Δupdate", "Δbenefit", "SLR", "drift", "least stable", "effective-update rate 0.33"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
	var page bytes.Buffer
	if err := r.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	h := page.String()
	// Heatmaps 2 per benchmark, round lines for swe only (mcp has no round
	// metrics), adherence for both.
	if strings.Count(h, "<svg") != 2*2+1+2 || strings.Contains(h, "<script") || strings.Contains(h, "http") || strings.Contains(h, "src=") {
		t.Fatalf("html: %d charts, or external references", strings.Count(h, "<svg"))
	}
}

func TestBuildNoCampaign(t *testing.T) {
	ch := testenv.ClickHouse(t)
	ctx := context.Background()
	if _, err := chddl.Migrate(ctx, chx.Session(ch.Conn), ch.Database); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(ctx, ch.Conn, "", ""); err == nil || !strings.Contains(err.Error(), ErrNoCampaign.Error()) {
		t.Fatalf("empty database: %v", err)
	}
	if _, err := Build(ctx, ch.Conn, "", "nope"); err == nil {
		t.Fatal("unknown campaign: no error")
	}
}

// TestReportIsOneProjects: another project that uses the same campaign id
// (and the same cell ids) is never mixed into a report: without --project
// the report refuses, naming both projects; with it, each project's report
// has its own cells only.
func TestReportIsOneProjects(t *testing.T) {
	conn, cfg, _ := fixture(t)
	ctx := context.Background()
	mine, err := Build(ctx, conn, "", "")
	if err != nil {
		t.Fatal(err)
	}
	other := cfg
	other.Agents, other.AnchorAgents, other.Benchmarks = []string{"opus46"}, []string{"opus46"}, []string{"swe"}
	var evs []schemas.Event
	if err := sim.Generate(other, func(ev schemas.Event) error {
		ev.Header().Project = "globex"
		evs = append(evs, ev)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	load(t, conn, evs, 1)
	if _, err := Build(ctx, conn, "", cfg.Campaign); err == nil || !strings.Contains(err.Error(), "--project") ||
		!strings.Contains(err.Error(), "globex") || !strings.Contains(err.Error(), mine.Project) {
		t.Fatalf("a campaign id of two projects without --project: %v, want an error naming both", err)
	}
	again, err := Build(ctx, conn, mine.Project, cfg.Campaign)
	if err != nil || len(again.Cells) != len(mine.Cells) {
		t.Fatalf("%s's report after globex's cells arrived: %v, %d cells, want %d", mine.Project, err, len(again.Cells), len(mine.Cells))
	}
	theirs, err := Build(ctx, conn, "globex", cfg.Campaign)
	if err != nil {
		t.Fatal(err)
	}
	if len(theirs.Cells) == 0 || len(theirs.Cells) >= len(mine.Cells) {
		t.Fatalf("globex's report has %d cells, want its own (fewer than %d)", len(theirs.Cells), len(mine.Cells))
	}
	for _, c := range theirs.Cells {
		if c.Benchmark != "swe" || c.Agent != "opus46" {
			t.Fatalf("globex's report holds a cell of another project: %+v", c)
		}
	}
}
