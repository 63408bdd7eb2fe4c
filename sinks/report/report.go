// Package report builds harnessflow's campaign report from the ClickHouse
// analyst views (docs/design.md §5, docs/metrics.md): the pass-rate matrices, Δupdate per
// evolver, Δbenefit per agent, skill activation, adherence by phase, round
// stability, label counts, per-round minimum detectable effects, and the
// critic's learning curve (critic_evals, with critic_eval_diffs' paired
// intervals). Build reads the figures into a Report whose
// fields are the numbers themselves; WriteText renders a terminal report and
// WriteHTML one self-contained HTML page with inline SVG charts.
package report

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// CellScore is one row of v_cell_scores.
type CellScore struct {
	CellID, Benchmark, Agent, Evolver, Route string
	Seed                                     int64
	NTasks                                   int64
	// PassRate (strict, attempt 1), PassRateFinal (retry reading) and
	// MeanScore (fractional), in percent.
	PassRate, PassRateFinal, MeanScore float64
}

// Matrix is one benchmark's cross-evaluation matrix: rows are agents, columns
// the baseline ("" first) then the evolvers; values are pass rates (percent,
// mean over seeds) and gains over the baseline (pp); nil where no cell exists.
type Matrix struct {
	Benchmark string
	Agents    []string
	Evolvers  []string
	Pass      [][]*float64
	Delta     [][]*float64
}

// UpdateGain is one row of v_update_gain (Δupdate per evolver).
type UpdateGain struct {
	Benchmark, Evolver string
	// DeltaPP is nil until every anchor agent's cell pairs.
	DeltaPP       *float64
	NAnchorAgents int64
	Seeds         int64
}

// BenefitGain is one row of v_benefit_gain (Δbenefit per agent).
type BenefitGain struct {
	Benchmark, Agent string
	// DeltaPP is the max over anchor evolvers; MeanDeltaPP the mean.
	DeltaPP, MeanDeltaPP *float64
	BestEvolver          string
	// CellsBelowBaseline counts anchor-evolver cells with Δ < 0.
	CellsBelowBaseline int64
	Seeds              int64
}

// Activation is one row of v_skill_activation.
type Activation struct {
	Benchmark, Agent string
	Attempts         int64
	// SLR in [0,1], LPR in percent, HFR in [0,1], LoadSuccessRate (the
	// tutorial's 技能加载率) in [0,1]; nil when undefined.
	SLR, LPR, HFR, LoadSuccessRate *float64
}

// Phases names the adherence phases in order.
var Phases = []string{"harness_loaded", "first_action", "midpoint", "pre_final", "final_validation"}

// Adherence is one row of v_adherence.
type Adherence struct {
	Benchmark, Agent string
	// Phase holds the mean score of each of Phases, in order.
	Phase [5]*float64
	// Drift = final_validation − harness_loaded; Decay =
	// (harness_loaded − final_validation) / harness_loaded.
	Drift, Decay *float64
}

// Stability is one pair row of v_round_stability.
type Stability struct {
	Benchmark, Agent, Evolver                string
	Rounds                                   int64
	MeanLift, StddevLift, CV, StabilityScore *float64
	FlipRate                                 float64
}

// RoundPoint is one evolver's round on one benchmark, over its cells
// (round_metrics, deduplicated per cell and cycle).
type RoundPoint struct {
	Benchmark, Evolver string
	Cycle              int64
	Cells              int64
	// PassRate is the mean over cells (percent); Stddev its sample standard
	// deviation (nil under two cells); Lift the mean lift over the baseline.
	PassRate     float64
	Stddev, Lift *float64
	// NTasks is the round's n: the fewest tasks of its cells' rounds
	// (round_metrics.n_tasks). MDE is the minimum detectable effect of a
	// paired test at that n (MDE; pp), nil when n is 0.
	NTasks int64
	MDE    *float64
}

// The minimum detectable effect of one cell's round: a paired test of the
// round's lift over the baseline on its n tasks, two-sided α = 0.05, power
// 0.8, normal approximation: MDE = (zAlpha + zPower)·MDESD/√n.
const (
	zAlpha = 1.96 // two-sided α = 0.05
	zPower = 0.84 // power 0.8
	// MDESD is the standard deviation of a task's paired difference the MDE
	// assumes: round_metrics holds no per-task spread, so the worst case for
	// the difference of two scores in [0, 1] (a difference in [−1, 1] has
	// sd ≤ 1). Real rounds have a smaller sd, and so a smaller MDE.
	MDESD = 1.0
)

// MDE is the minimum detectable effect, in pp, of a paired test on n tasks
// (two-sided α = 0.05, power 0.8, sd MDESD): 100·(1.96 + 0.84)·MDESD/√n,
// 140 pp at n = 4 and 28 pp at n = 100. Nil for n < 1.
func MDE(n int64) *float64 {
	if n < 1 {
		return nil
	}
	v := 100 * (zAlpha + zPower) * MDESD / math.Sqrt(float64(n))
	return &v
}

// LabelSummary is one row of v_label_summary.
type LabelSummary struct {
	Benchmark, Agent, Evolver            string
	Updates, Positive, Negative, Neutral int64
	EffectiveUpdateRate                  float64
	MeanGain                             *float64
}

// Report is a campaign's figures.
type Report struct {
	Project     string
	Campaign    string
	Benchmarks  []string
	Cells       []CellScore
	Matrices    []Matrix
	UpdateGain  []UpdateGain
	BenefitGain []BenefitGain
	Activation  []Activation
	Adherence   []Adherence
	// Unstable are the ten least stable (agent, evolver, benchmark) pairs by
	// round stddev of the lift, most unstable first.
	Unstable []Stability
	Rounds   []RoundPoint
	Labels   []LabelSummary
	// Critic holds every trainer's learning curve from critic_evals (the
	// database's, not only this campaign's), by trainer name, with the
	// paired intervals of critic_eval_diffs where that table exists;
	// CriticNote says why there is none when critic_evals is missing
	// (CriticMissing).
	Critic     []CriticCurve
	CriticNote string
	// Totals over Labels: updates, label counts, the effective-update rate
	// (positive / updates; nil without updates) and the mean gain of
	// positive updates (pp, weighted by their count; nil without any).
	Updates, Positive, Negative, Neutral int64
	EffectiveUpdateRate, MeanGain        *float64
}

// Querier is what Build needs from a ClickHouse connection (driver.Conn
// satisfies it). Views are read from the connection's default database.
type Querier interface {
	Query(ctx context.Context, query string, args ...any) (driver.Rows, error)
}

// Build reads the report of campaign of project from the analyst views.
// An empty campaign selects the project's most recently declared one (of any
// project when project is empty too); an empty project is the campaign's one
// project, and an error naming them when several projects use that campaign
// id. It returns ErrNoCampaign when there is nothing to report.
func Build(ctx context.Context, conn Querier, project, campaign string) (*Report, error) {
	var err error
	if campaign == "" {
		if campaign, err = latestCampaign(ctx, conn, project); err != nil {
			return nil, err
		}
	}
	if project == "" {
		if project, err = campaignProject(ctx, conn, campaign); err != nil {
			return nil, err
		}
	}
	r := &Report{Project: project, Campaign: campaign}
	steps := []func(context.Context, Querier) error{r.cells, r.updateGain, r.benefitGain, r.activation, r.adherence, r.stability, r.rounds, r.labels, r.criticEvals}
	for _, s := range steps {
		if err := s(ctx, conn); err != nil {
			return nil, err
		}
	}
	if len(r.Cells) == 0 {
		return nil, fmt.Errorf("%w: campaign %q has no scored cell", ErrNoCampaign, campaign)
	}
	r.buildMatrices()
	return r, nil
}

// latestCampaign is the most recently declared campaign (of project, unless
// it is empty).
func latestCampaign(ctx context.Context, conn Querier, project string) (string, error) {
	var campaign string
	err := query(ctx, conn, "latest campaign", "SELECT toString(campaign_id) FROM campaigns WHERE project = ? OR ? = ''"+
		" GROUP BY campaign_id ORDER BY max(event_time_ms) DESC, campaign_id LIMIT 1",
		func(rows driver.Rows) error { return rows.Scan(&campaign) }, project, project)
	if err != nil {
		return "", err
	}
	if campaign == "" {
		return "", ErrNoCampaign
	}
	return campaign, nil
}

// campaignProject is the one project whose cells carry campaign; several
// are an error that names them (pick one with --project).
func campaignProject(ctx context.Context, conn Querier, campaign string) (string, error) {
	var projects []string
	err := query(ctx, conn, "projects", "SELECT DISTINCT toString(project) AS p FROM v_cell_scores WHERE campaign_id = ? ORDER BY p",
		func(rows driver.Rows) error {
			var p string
			err := rows.Scan(&p)
			projects = append(projects, p)
			return err
		}, campaign)
	switch {
	case err != nil:
		return "", err
	case len(projects) == 0:
		return "", fmt.Errorf("%w: campaign %q has no scored cell", ErrNoCampaign, campaign)
	case len(projects) > 1:
		return "", fmt.Errorf("campaign %q is used by projects %s: choose one with --project", campaign, strings.Join(projects, ", "))
	}
	return projects[0], nil
}

// query runs q with args and calls scan for every row.
func query(ctx context.Context, conn Querier, name, q string, scan func(driver.Rows) error, args ...any) error {
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("query %s: %w", name, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return fmt.Errorf("scan %s: %w", name, err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	return nil
}

// clean turns NaN and ±Inf (stddev of one value, 0/0) into nil.
func clean(p *float64) *float64 {
	if p == nil || math.IsNaN(*p) || math.IsInf(*p, 0) {
		return nil
	}
	return p
}

// SQL helpers: every value is cast so that scanning does not depend on the
// views' exact column types.
func fl(col string) string { return "toNullable(toFloat64(" + col + "))" }
func in(col string) string { return "toInt64(ifNull(" + col + ", 0))" }
func st(col string) string { return "toString(ifNull(" + col + ", ''))" }

func (r *Report) cells(ctx context.Context, conn Querier) error {
	q := "SELECT " + st("cell_id") + ", " + st("benchmark") + ", " + st("agent_model") + ", " + st("evolver_model") + ", " + st("route") + ", " +
		in("seed") + ", " + in("n_tasks") + ", " + fl("pass_rate") + ", " + fl("pass_rate_final") + ", " + fl("mean_score") +
		" FROM v_cell_scores WHERE campaign_id = ? AND project = ? ORDER BY benchmark, agent_model, evolver_model, seed, cell_id"
	return query(ctx, conn, "v_cell_scores", q, func(rows driver.Rows) error {
		var c CellScore
		var p, pf, ms *float64
		if err := rows.Scan(&c.CellID, &c.Benchmark, &c.Agent, &c.Evolver, &c.Route, &c.Seed, &c.NTasks, &p, &pf, &ms); err != nil {
			return err
		}
		c.PassRate, c.PassRateFinal, c.MeanScore = deref(p), deref(pf), deref(ms)
		r.Cells = append(r.Cells, c)
		return nil
	}, r.Campaign, r.Project)
}

func deref(p *float64) float64 {
	if p = clean(p); p == nil {
		return 0
	}
	return *p
}

func (r *Report) updateGain(ctx context.Context, conn Querier) error {
	q := "SELECT " + st("benchmark") + ", " + st("evolver_model") + ", " + fl("delta_update_pp") + ", " + in("n_anchor_agents") + ", " + in("seeds") +
		" FROM v_update_gain WHERE campaign_id = ? AND project = ? ORDER BY benchmark, evolver_model"
	return query(ctx, conn, "v_update_gain", q, func(rows driver.Rows) error {
		var u UpdateGain
		if err := rows.Scan(&u.Benchmark, &u.Evolver, &u.DeltaPP, &u.NAnchorAgents, &u.Seeds); err != nil {
			return err
		}
		u.DeltaPP = clean(u.DeltaPP)
		r.UpdateGain = append(r.UpdateGain, u)
		return nil
	}, r.Campaign, r.Project)
}

func (r *Report) benefitGain(ctx context.Context, conn Querier) error {
	q := "SELECT " + st("benchmark") + ", " + st("agent_model") + ", " + fl("delta_benefit_pp") + ", " + fl("mean_delta_pp") + ", " + st("best_evolver") + ", " +
		in("cells_below_baseline") + ", " + in("seeds") + " FROM v_benefit_gain WHERE campaign_id = ? AND project = ? ORDER BY benchmark, agent_model"
	return query(ctx, conn, "v_benefit_gain", q, func(rows driver.Rows) error {
		var b BenefitGain
		if err := rows.Scan(&b.Benchmark, &b.Agent, &b.DeltaPP, &b.MeanDeltaPP, &b.BestEvolver, &b.CellsBelowBaseline, &b.Seeds); err != nil {
			return err
		}
		b.DeltaPP, b.MeanDeltaPP = clean(b.DeltaPP), clean(b.MeanDeltaPP)
		r.BenefitGain = append(r.BenefitGain, b)
		return nil
	}, r.Campaign, r.Project)
}

func (r *Report) activation(ctx context.Context, conn Querier) error {
	q := "SELECT " + st("benchmark") + ", " + st("agent_model") + ", " + in("attempts") + ", " + fl("skill_load_rate") + ", " + fl("loaded_pass_rate") + ", " +
		fl("hfr") + ", " + fl("skill_load_success_rate") + " FROM v_skill_activation WHERE campaign_id = ? AND project = ? ORDER BY benchmark, agent_model"
	return query(ctx, conn, "v_skill_activation", q, func(rows driver.Rows) error {
		var a Activation
		if err := rows.Scan(&a.Benchmark, &a.Agent, &a.Attempts, &a.SLR, &a.LPR, &a.HFR, &a.LoadSuccessRate); err != nil {
			return err
		}
		a.SLR, a.LPR, a.HFR, a.LoadSuccessRate = clean(a.SLR), clean(a.LPR), clean(a.HFR), clean(a.LoadSuccessRate)
		r.Activation = append(r.Activation, a)
		return nil
	}, r.Campaign, r.Project)
}

func (r *Report) adherence(ctx context.Context, conn Querier) error {
	q := "SELECT " + st("benchmark") + ", " + st("agent_model")
	for _, p := range Phases {
		q += ", " + fl(p)
	}
	q += ", " + fl("drift") + ", " + fl("decay_rate") + " FROM v_adherence WHERE campaign_id = ? AND project = ? ORDER BY benchmark, agent_model"
	return query(ctx, conn, "v_adherence", q, func(rows driver.Rows) error {
		var a Adherence
		if err := rows.Scan(&a.Benchmark, &a.Agent, &a.Phase[0], &a.Phase[1], &a.Phase[2], &a.Phase[3], &a.Phase[4], &a.Drift, &a.Decay); err != nil {
			return err
		}
		for i := range a.Phase {
			a.Phase[i] = clean(a.Phase[i])
		}
		a.Drift, a.Decay = clean(a.Drift), clean(a.Decay)
		r.Adherence = append(r.Adherence, a)
		return nil
	}, r.Campaign, r.Project)
}

func (r *Report) stability(ctx context.Context, conn Querier) error {
	q := "SELECT " + st("benchmark") + ", " + st("agent_model") + ", " + st("evolver_model") + ", " + in("rounds") + ", " + fl("mean_lift") + ", " +
		fl("stddev_lift") + ", " + fl("cv") + ", " + fl("stability_score") + ", " + fl("flip_rate") +
		" FROM v_round_stability WHERE campaign_id = ? AND project = ? AND level = 'pair' AND evolver_model != ''" +
		" ORDER BY isNull(stddev_lift), stddev_lift DESC, benchmark, agent_model, evolver_model LIMIT 10"
	return query(ctx, conn, "v_round_stability", q, func(rows driver.Rows) error {
		var s Stability
		var flip *float64
		if err := rows.Scan(&s.Benchmark, &s.Agent, &s.Evolver, &s.Rounds, &s.MeanLift, &s.StddevLift, &s.CV, &s.StabilityScore, &flip); err != nil {
			return err
		}
		s.MeanLift, s.StddevLift, s.CV, s.StabilityScore, s.FlipRate = clean(s.MeanLift), clean(s.StddevLift), clean(s.CV), clean(s.StabilityScore), deref(flip)
		r.Unstable = append(r.Unstable, s)
		return nil
	}, r.Campaign, r.Project)
}

func (r *Report) rounds(ctx context.Context, conn Querier) error {
	q := `SELECT toString(r_benchmark), toString(r_evolver), toInt64(cycle), toInt64(count()),
    toNullable(toFloat64(avg(r_pass))), toNullable(toFloat64(if(count() < 2, NULL, stddevSamp(r_pass)))), toNullable(toFloat64(avg(r_lift))),
    toInt64(min(r_n))
FROM
(
    SELECT project, cell_id, cycle,
        argMax(campaign_id, _version) AS r_campaign,
        argMax(benchmark, _version) AS r_benchmark,
        argMax(evolver_model, _version) AS r_evolver,
        argMax(pass_rate, _version) AS r_pass,
        argMax(lift_vs_baseline, _version) AS r_lift,
        argMax(n_tasks, _version) AS r_n
    FROM round_metrics
    GROUP BY project, cell_id, cycle
)
WHERE r_campaign = ? AND project = ?
GROUP BY r_benchmark, r_evolver, cycle
ORDER BY r_benchmark, r_evolver, cycle`
	return query(ctx, conn, "round_metrics", q, func(rows driver.Rows) error {
		var p RoundPoint
		var pass *float64
		if err := rows.Scan(&p.Benchmark, &p.Evolver, &p.Cycle, &p.Cells, &pass, &p.Stddev, &p.Lift, &p.NTasks); err != nil {
			return err
		}
		p.PassRate, p.Stddev, p.Lift, p.MDE = deref(pass), clean(p.Stddev), clean(p.Lift), MDE(p.NTasks)
		r.Rounds = append(r.Rounds, p)
		return nil
	}, r.Campaign, r.Project)
}

func (r *Report) labels(ctx context.Context, conn Querier) error {
	q := "SELECT " + st("benchmark") + ", " + st("agent_model") + ", " + st("evolver_model") + ", " + in("updates") + ", " + in("positive") + ", " +
		in("negative") + ", " + in("neutral") + ", " + fl("effective_update_rate") + ", " + fl("mean_gain") +
		" FROM v_label_summary WHERE campaign_id = ? AND project = ? ORDER BY benchmark, agent_model, evolver_model"
	var gainSum float64
	err := query(ctx, conn, "v_label_summary", q, func(rows driver.Rows) error {
		var l LabelSummary
		var eff *float64
		if err := rows.Scan(&l.Benchmark, &l.Agent, &l.Evolver, &l.Updates, &l.Positive, &l.Negative, &l.Neutral, &eff, &l.MeanGain); err != nil {
			return err
		}
		l.EffectiveUpdateRate, l.MeanGain = deref(eff), clean(l.MeanGain)
		r.Labels = append(r.Labels, l)
		r.Updates += l.Updates
		r.Positive += l.Positive
		r.Negative += l.Negative
		r.Neutral += l.Neutral
		if l.MeanGain != nil {
			gainSum += *l.MeanGain * float64(l.Positive)
		}
		return nil
	}, r.Campaign, r.Project)
	if err != nil {
		return err
	}
	if r.Updates > 0 {
		v := float64(r.Positive) / float64(r.Updates)
		r.EffectiveUpdateRate = &v
	}
	if r.Positive > 0 {
		v := gainSum / float64(r.Positive)
		r.MeanGain = &v
	}
	return nil
}

// buildMatrices arranges Cells into one Matrix per benchmark (seeds averaged).
func (r *Report) buildMatrices() {
	type key struct{ b, a, e string }
	sum, n := map[key]float64{}, map[key]int{}
	benches, agents, evolvers := map[string]bool{}, map[string]map[string]bool{}, map[string]map[string]bool{}
	for _, c := range r.Cells {
		k := key{c.Benchmark, c.Agent, c.Evolver}
		sum[k] += c.PassRate
		n[k]++
		benches[c.Benchmark] = true
		if agents[c.Benchmark] == nil {
			agents[c.Benchmark], evolvers[c.Benchmark] = map[string]bool{}, map[string]bool{}
		}
		agents[c.Benchmark][c.Agent] = true
		evolvers[c.Benchmark][c.Evolver] = true
	}
	r.Benchmarks = sortedKeys(benches)
	for _, b := range r.Benchmarks {
		m := Matrix{Benchmark: b, Agents: sortedKeys(agents[b])}
		evolvers[b][""] = true
		m.Evolvers = sortedKeys(evolvers[b]) // "" sorts first: the baseline column
		for _, a := range m.Agents {
			prow := make([]*float64, len(m.Evolvers))
			drow := make([]*float64, len(m.Evolvers))
			for j, e := range m.Evolvers {
				k := key{b, a, e}
				if n[k] > 0 {
					v := sum[k] / float64(n[k])
					prow[j] = &v
				}
			}
			for j := range m.Evolvers {
				if j > 0 && prow[j] != nil && prow[0] != nil {
					d := *prow[j] - *prow[0]
					drow[j] = &d
				}
			}
			m.Pass = append(m.Pass, prow)
			m.Delta = append(m.Delta, drow)
		}
		r.Matrices = append(r.Matrices, m)
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
