-- harnessflow analyst views (DESIGN.md §5, definitions in METRICS.md; column
-- reference and examples in docs/analysts.md). {db} is the quoted database.
--
-- Rules every view follows:
--   * It reads deduplicated data only: argMax(..., _version) GROUP BY the row's
--     identity, or FROM ... FINAL. A redelivered or replayed event (same
--     event_id) changes no figure. No materialized views: one over a
--     ReplacingMergeTree would count duplicates before they merge.
--   * The same rows on ClickHouse 18.16 and on current releases (tested on
--     both: infra/chddl/engines_test.go). One JOIN per SELECT (nested
--     subqueries instead of multi-way joins); every joined subquery has an
--     alias (joined_subquery_requires_alias, on since 20.x); only ALL joins,
--     never ANY (an ANY INNER JOIN keeps one row per key on both sides since
--     22.x, one on the right only on 18.16); joins USING columns of the same
--     name with every other right-side column named apart; no alias equal to
--     a column it aggregates; no window functions, no WITH, no positional
--     ORDER BY, no reliance on a setting whose default changed. Every choice
--     among equals is made explicit (argMax over a tuple that ends in a
--     unique column), so both engines pick the same row.
--   * Views are written CREATE OR REPLACE VIEW. On servers that lack it
--     (before 21.8: 18.16) chddl sends DROP TABLE IF EXISTS + CREATE VIEW IF
--     NOT EXISTS instead (chddl.Legacy); `harnessflow migrate --print` shows
--     either form.
--   * Pass rates and gains are in percent and percentage points (pp); rates
--     (skill_load_rate, hfr, adherence) are in [0, 1].
--   * Every view carries project (the tenant) beside the contract columns.
--
-- Views are created in dependency order.

-- v_cell_scores: one row per cell that has attempts.
--   n_tasks         distinct task_ids with any attempt in the cell.
--   pass_rate       strict reading: 100 x mean over tasks of the attempt = 1
--                   outcome, binary (success = 1 and status = 'ok').
--   pass_rate_final retry reading: the same over the final = 1 row.
--   mean_score      fractional reading: 100 x mean score of attempt 1.
--   mean_score_final the fractional reading of the final = 1 row.
-- Attempts with status <> 'ok' (error, interrupted, timeout) count as failures
-- (score 0) in baseline and evolved cells alike, and a task without an
-- attempt-1 (or final) row counts as a failure of that reading. One outcome
-- per task: attempts are deduplicated by (cell_id, task_id), keeping the
-- highest _version of the matching attempt.
CREATE OR REPLACE VIEW {db}.v_cell_scores AS
SELECT
    ci_project AS project,
    ci_campaign AS campaign_id,
    cell_id,
    ci_benchmark AS benchmark,
    ci_agent AS agent_model,
    ci_evolver AS evolver_model,
    ci_seed AS seed,
    ci_route AS route,
    r_n_tasks AS n_tasks,
    r_pass_rate AS pass_rate,
    r_pass_rate_final AS pass_rate_final,
    r_mean_score AS mean_score,
    r_mean_score_final AS mean_score_final
FROM
(
{cell_rates}
) AS l1
ALL INNER JOIN
(
{cell_info}
) AS r1 USING (cell_id);

-- v_pair_gain: one row per evolved cell (evolver_model <> '') that has a
-- baseline cell (evolver_model = '') with the same project, campaign,
-- benchmark, agent and seed. delta_pp = pass_rate - base_pass_rate (strict
-- reading); delta_final_pp is the retry reading's. Several baseline cells for
-- one key are averaged (base_cells says how many).
CREATE OR REPLACE VIEW {db}.v_pair_gain AS
SELECT
    project,
    campaign_id,
    benchmark,
    agent_model,
    evolver_model,
    seed,
    cell_id,
    route,
    base_pass_rate,
    pass_rate,
    pass_rate - base_pass_rate AS delta_pp,
    base_pass_rate_final,
    pass_rate_final,
    pass_rate_final - base_pass_rate_final AS delta_final_pp,
    base_cells
FROM
(
    SELECT project, campaign_id, benchmark, agent_model, seed, evolver_model, cell_id, route, pass_rate, pass_rate_final
    FROM {db}.v_cell_scores
    WHERE evolver_model != ''
) AS l2
ALL INNER JOIN
(
    SELECT
        project,
        campaign_id,
        benchmark,
        agent_model,
        seed,
        avg(pass_rate) AS base_pass_rate,
        avg(pass_rate_final) AS base_pass_rate_final,
        count() AS base_cells
    FROM {db}.v_cell_scores
    WHERE evolver_model = ''
    GROUP BY project, campaign_id, benchmark, agent_model, seed
) AS r2 USING (project, campaign_id, benchmark, agent_model, seed);

-- v_update_gain: harness-updating gain of each evolver. Per seed,
-- Δupdate = mean over the campaign's anchor_agents of Δ(agent, evolver) (an
-- agent with several evolved cells for one seed contributes their mean). A
-- seed counts only when every anchor agent has a pair for it; delta_update_pp
-- is the mean of the complete seeds' values and NULL (not 0) while no seed is
-- complete. seeds = complete seeds used; seeds_seen = seeds with any pair.
-- Evolvers of campaigns with no anchor agents do not appear.
CREATE OR REPLACE VIEW {db}.v_update_gain AS
SELECT
    project,
    campaign_id,
    benchmark,
    evolver_model,
    if(countIf(s_complete) = 0, NULL, avgIf(s_delta, s_complete)) AS delta_update_pp,
    any(s_n_anchor) AS n_anchor_agents,
    countIf(s_complete) AS seeds,
    count() AS seeds_seen
FROM
(
    SELECT
        project,
        campaign_id,
        benchmark,
        evolver_model,
        seed,
        avg(a_delta) AS s_delta,
        count() AS s_agents,
        any(a_n_anchor) AS s_n_anchor,
        s_agents = s_n_anchor AS s_complete
    FROM
    (
        SELECT
            project,
            campaign_id,
            benchmark,
            evolver_model,
            seed,
            agent_model,
            avg(delta_pp) AS a_delta,
            any(arrayReduce('uniqExact', ca_agents)) AS a_n_anchor
        FROM
        (
            SELECT project, campaign_id, benchmark, evolver_model, seed, agent_model, delta_pp
            FROM {db}.v_pair_gain
        ) AS l3
        ALL INNER JOIN
        (
            SELECT project, campaign_id, argMax(anchor_agents, _version) AS ca_agents
            FROM {db}.campaigns
            GROUP BY project, campaign_id
        ) AS r3 USING (project, campaign_id)
        WHERE has(ca_agents, agent_model)
        GROUP BY project, campaign_id, benchmark, evolver_model, seed, agent_model
    )
    GROUP BY project, campaign_id, benchmark, evolver_model, seed
)
GROUP BY project, campaign_id, benchmark, evolver_model;

-- v_benefit_gain: harness-benefit gain of each agent over the campaign's
-- anchor_evolvers. Per evolver, Δ(agent, evolver) is the mean over that
-- pair's evolved cells (seeds). delta_benefit_pp = max over evolvers (the
-- paper's Δbenefit), best_evolver = the evolver reaching it (the first by name
-- when several tie, Δ compared to 9 decimals), mean_delta_pp =
-- mean over evolvers, cells_below_baseline = evolved cells with Δ < 0 (what the
-- max hides), seeds = distinct seeds used, evolvers = anchor evolvers with a
-- pair, n_anchor_evolvers = anchor evolvers declared.
CREATE OR REPLACE VIEW {db}.v_benefit_gain AS
SELECT
    project,
    campaign_id,
    benchmark,
    agent_model,
    max(e_delta) AS delta_benefit_pp,
    argMin(evolver_model, tuple(-round(e_delta, 9), evolver_model)) AS best_evolver,
    avg(e_delta) AS mean_delta_pp,
    sum(e_below) AS cells_below_baseline,
    length(groupUniqArrayArray(e_seeds)) AS seeds,
    count() AS evolvers,
    any(e_n_anchor) AS n_anchor_evolvers
FROM
(
    SELECT
        project,
        campaign_id,
        benchmark,
        agent_model,
        evolver_model,
        avg(delta_pp) AS e_delta,
        countIf(delta_pp < 0) AS e_below,
        groupUniqArray(seed) AS e_seeds,
        any(arrayReduce('uniqExact', ca_evolvers)) AS e_n_anchor
    FROM
    (
        SELECT project, campaign_id, benchmark, agent_model, evolver_model, seed, delta_pp
        FROM {db}.v_pair_gain
    ) AS l4
    ALL INNER JOIN
    (
        SELECT project, campaign_id, argMax(anchor_evolvers, _version) AS ca_evolvers
        FROM {db}.campaigns
        GROUP BY project, campaign_id
    ) AS r4 USING (project, campaign_id)
    WHERE has(ca_evolvers, evolver_model)
    GROUP BY project, campaign_id, benchmark, agent_model, evolver_model
)
GROUP BY project, campaign_id, benchmark, agent_model;

-- v_skill_activation: skill activation per agent (all its cells in the
-- campaign and benchmark). An attempt is one (cell_id, task_id, attempt).
--   attempts                attempts seen.
--   skill_load_rate (SLR)   share of attempts with skills_available > 0 that
--                           have >= 1 skill_event tool = 'load_skill' and
--                           status = 'loaded' (rejected_multikey is not a
--                           load); NULL when no attempt offered skills.
--   loaded_pass_rate (LPR)  100 x share of skill-loaded attempts with
--                           success = 1 and status = 'ok'; NULL when none.
--   hfr                     mean over judged (cell, task, skill) of
--                           F / (F + VC + VO + RU), judgments pooled per
--                           (cell, task, skill); denominator 0 is skipped.
--   skill_load_success_rate the tutorial's 技能加载率: load_skill calls with
--                           status 'loaded' / all load_skill calls.
CREATE OR REPLACE VIEW {db}.v_skill_activation AS
SELECT
    ci_project AS project,
    ci_campaign AS campaign_id,
    ci_benchmark AS benchmark,
    ci_agent AS agent_model,
    sum(c_attempts) AS attempts,
    if(sum(c_offered) = 0, NULL, sum(c_offered_loaded) / sum(c_offered)) AS skill_load_rate,
    if(sum(c_loaded) = 0, NULL, 100 * sum(c_loaded_pass) / sum(c_loaded)) AS loaded_pass_rate,
    if(sum(h_n) = 0, NULL, sum(h_sum) / sum(h_n)) AS hfr,
    if(sum(k_calls) = 0, NULL, sum(k_ok) / sum(k_calls)) AS skill_load_success_rate,
    sum(c_loaded) AS loaded_attempts,
    sum(h_n) AS judged_skills
FROM
(
    SELECT cell_id, c_attempts, c_offered, c_offered_loaded, c_loaded, c_loaded_pass, k_calls, k_ok, h_sum, h_n
    FROM
    (
        SELECT cell_id, c_attempts, c_offered, c_offered_loaded, c_loaded, c_loaded_pass, k_calls, k_ok
        FROM
        (
            SELECT
                cell_id,
                count() AS c_attempts,
                countIf(a_avail > 0) AS c_offered,
                countIf(a_avail > 0 AND l_loaded = 1) AS c_offered_loaded,
                countIf(l_loaded = 1) AS c_loaded,
                countIf(l_loaded = 1 AND a_pass = 1) AS c_loaded_pass
            FROM
            (
                SELECT
                    cell_id,
                    task_id,
                    attempt,
                    argMax(skills_available, _version) AS a_avail,
                    argMax(success = 1 AND status = 'ok', _version) AS a_pass
                FROM {db}.task_attempts
                GROUP BY cell_id, task_id, attempt
            ) AS l5
            ALL LEFT JOIN
            (
                SELECT cell_id, task_id, attempt, toUInt8(1) AS l_loaded
                FROM {db}.skill_events
                WHERE tool = 'load_skill' AND status = 'loaded'
                GROUP BY cell_id, task_id, attempt
            ) AS r5 USING (cell_id, task_id, attempt)
            GROUP BY cell_id
        ) AS l6
        ALL LEFT JOIN
        (
            SELECT cell_id, count() AS k_calls, countIf(k_status = 'loaded') AS k_ok
            FROM
            (
                SELECT cell_id, event_id, argMax(status, _version) AS k_status
                FROM {db}.skill_events
                WHERE tool = 'load_skill'
                GROUP BY cell_id, event_id
            )
            GROUP BY cell_id
        ) AS r6 USING (cell_id)
    ) AS l7
    ALL LEFT JOIN
    (
        SELECT cell_id, sum(j_ratio) AS h_sum, count() AS h_n
        FROM
        (
            SELECT
                cell_id,
                task_id,
                skill_name,
                sum(followed) AS j_f,
                sum(followed + violated_commission + violated_omission + required_unobserved) AS j_den,
                j_f / j_den AS j_ratio
            FROM {db}.adherence_judgments FINAL
            GROUP BY cell_id, task_id, skill_name
            HAVING j_den > 0
        )
        GROUP BY cell_id
    ) AS r7 USING (cell_id)
) AS l8
ALL INNER JOIN
(
{cell_info}
) AS r8 USING (cell_id)
GROUP BY ci_project, ci_campaign, ci_benchmark, ci_agent;

-- v_adherence: phase adherence per agent: the mean judged score of each phase
-- over the agent's judgments (NULL phase scores are left out of that phase's
-- mean). drift = final_validation - harness_loaded (the paper);
-- decay_rate = (harness_loaded - final_validation) / harness_loaded (the
-- tutorial's 遵循度衰减率), NULL when harness_loaded is 0 or NULL.
CREATE OR REPLACE VIEW {db}.v_adherence AS
SELECT
    ci_project AS project,
    ci_campaign AS campaign_id,
    ci_benchmark AS benchmark,
    ci_agent AS agent_model,
    count() AS judgments,
    avg(j_hl) AS harness_loaded,
    avg(j_fa) AS first_action,
    avg(j_mid) AS midpoint,
    avg(j_pre) AS pre_final,
    avg(j_fv) AS final_validation,
    final_validation - harness_loaded AS drift,
    if(harness_loaded = 0, NULL, (harness_loaded - final_validation) / harness_loaded) AS decay_rate
FROM
(
    SELECT
        cell_id,
        harness_loaded AS j_hl,
        first_action AS j_fa,
        midpoint AS j_mid,
        pre_final AS j_pre,
        final_validation AS j_fv
    FROM {db}.adherence_judgments FINAL
) AS l9
ALL INNER JOIN
(
{cell_info}
) AS r9 USING (cell_id)
GROUP BY ci_project, ci_campaign, ci_benchmark, ci_agent;

-- v_round_stability: round-to-round stability of the lift over the baseline
-- (round_metrics.lift_vs_baseline, pp), at two levels:
--   level = 'cell': one row per cell, over its rounds;
--   level = 'pair': one row per (agent, evolver, benchmark) with cell_id = '',
--                   over all rounds of all its cells (seeds).
-- Rounds are deduplicated per (cell_id, cycle); rounds without a lift are
-- left out. rounds = rounds with a lift; mean_lift; stddev_lift = sample
-- standard deviation (NULL under 2 rounds); cv = stddev / |mean| (NULL when
-- mean = 0 or stddev is NULL); stability_score = mean - λ·stddev with λ = 1
-- (NULL when stddev is NULL). flip_rate = share of consecutive
-- re-evaluations of the same update (labeled_samples by update_id, ordered by
-- produced_at then _version) whose label changed; 0 when there are none.
-- Sum over one level only: the two levels count the same rounds.
CREATE OR REPLACE VIEW {db}.v_round_stability AS
SELECT
    level,
    project,
    campaign_id,
    benchmark,
    agent_model,
    evolver_model,
    cell_id,
    rounds,
    mean_lift,
    stddev_lift,
    if(mean_lift = 0 OR stddev_lift IS NULL, NULL, stddev_lift / abs(mean_lift)) AS cv,
    if(f_trans = 0, 0, f_flips / f_trans) AS flip_rate,
    mean_lift - 1 * stddev_lift AS stability_score
FROM
(
    SELECT
        'cell' AS level,
        r_project AS project,
        r_campaign AS campaign_id,
        r_benchmark AS benchmark,
        r_agent AS agent_model,
        r_evolver AS evolver_model,
        cell_id,
        count(r_lift) AS rounds,
        avg(r_lift) AS mean_lift,
        if(count(r_lift) < 2, NULL, stddevSamp(r_lift)) AS stddev_lift,
        f_flips,
        f_trans
    FROM
    (
        SELECT cell_id, r_project, r_campaign, r_benchmark, r_agent, r_evolver, r_lift, f_flips, f_trans
        FROM
        (
            SELECT
                cell_id,
                cycle,
                argMax(project, _version) AS r_project,
                argMax(campaign_id, _version) AS r_campaign,
                argMax(benchmark, _version) AS r_benchmark,
                argMax(agent_model, _version) AS r_agent,
                argMax(evolver_model, _version) AS r_evolver,
                argMax(lift_vs_baseline, _version) AS r_lift
            FROM {db}.round_metrics
            GROUP BY cell_id, cycle
        ) AS l10
        ALL LEFT JOIN
        (
            SELECT cell_id, sum(u_flips) AS f_flips, sum(u_trans) AS f_trans
            FROM
            (
                SELECT
                    cell_id,
                    update_id,
                    arrayMap(t -> tupleElement(t, 3), arraySort(groupArray(tuple(produced_at_ms, _version, label)))) AS u_labels,
                    arraySum(arrayMap((a, b) -> a != b, arrayPopBack(u_labels), arrayPopFront(u_labels))) AS u_flips,
                    length(u_labels) - 1 AS u_trans
                FROM {db}.labeled_samples FINAL
                GROUP BY cell_id, update_id
            )
            GROUP BY cell_id
        ) AS r10 USING (cell_id)
    )
    GROUP BY cell_id, r_project, r_campaign, r_benchmark, r_agent, r_evolver, f_flips, f_trans

    UNION ALL

    SELECT
        'pair' AS level,
        project,
        campaign_id,
        benchmark,
        agent_model,
        evolver_model,
        '' AS cell_id,
        rounds,
        mean_lift,
        stddev_lift,
        f_flips,
        f_trans
    FROM
    (
        SELECT
            r_project AS project,
            r_campaign AS campaign_id,
            r_benchmark AS benchmark,
            r_agent AS agent_model,
            r_evolver AS evolver_model,
            count(r_lift) AS rounds,
            avg(r_lift) AS mean_lift,
            if(count(r_lift) < 2, NULL, stddevSamp(r_lift)) AS stddev_lift
        FROM
        (
            SELECT
                argMax(project, _version) AS r_project,
                argMax(campaign_id, _version) AS r_campaign,
                argMax(benchmark, _version) AS r_benchmark,
                argMax(agent_model, _version) AS r_agent,
                argMax(evolver_model, _version) AS r_evolver,
                argMax(lift_vs_baseline, _version) AS r_lift
            FROM {db}.round_metrics
            GROUP BY cell_id, cycle
        )
        GROUP BY r_project, r_campaign, r_benchmark, r_agent, r_evolver
    ) AS l11
    ALL LEFT JOIN
    (
        SELECT
            u_project AS project,
            u_campaign AS campaign_id,
            u_benchmark AS benchmark,
            u_agent AS agent_model,
            u_evolver AS evolver_model,
            sum(u_flips) AS f_flips,
            sum(u_trans) AS f_trans
        FROM
        (
            SELECT
                any(project) AS u_project,
                any(campaign_id) AS u_campaign,
                any(benchmark) AS u_benchmark,
                any(agent_model) AS u_agent,
                any(evolver_model) AS u_evolver,
                arrayMap(t -> tupleElement(t, 3), arraySort(groupArray(tuple(produced_at_ms, _version, label)))) AS u_labels,
                arraySum(arrayMap((a, b) -> a != b, arrayPopBack(u_labels), arrayPopFront(u_labels))) AS u_flips,
                length(u_labels) - 1 AS u_trans
            FROM {db}.labeled_samples FINAL
            GROUP BY cell_id, update_id
        )
        GROUP BY u_project, u_campaign, u_benchmark, u_agent, u_evolver
    ) AS r11 USING (project, campaign_id, benchmark, agent_model, evolver_model)
);

-- v_label_summary: the tutorial's sample pipeline figures per (agent, evolver,
-- benchmark). An update counts once, with its latest label (re-evaluations of
-- one update_id: the one with the highest produced_at, then _version, then
-- event_id).
-- effective_update_rate (有效更新率) = positive / updates; mean_gain
-- (平均性能提升) = 100 x mean effect of the positive updates, in pp (NULL
-- when there is none).
CREATE OR REPLACE VIEW {db}.v_label_summary AS
SELECT
    u_project AS project,
    u_campaign AS campaign_id,
    u_benchmark AS benchmark,
    u_agent AS agent_model,
    u_evolver AS evolver_model,
    count() AS updates,
    countIf(u_label = 'positive') AS positive,
    countIf(u_label = 'negative') AS negative,
    countIf(u_label = 'neutral') AS neutral,
    positive / updates AS effective_update_rate,
    if(positive = 0, NULL, 100 * avgIf(u_effect, u_label = 'positive')) AS mean_gain
FROM
(
    SELECT
        any(project) AS u_project,
        any(campaign_id) AS u_campaign,
        any(benchmark) AS u_benchmark,
        any(agent_model) AS u_agent,
        any(evolver_model) AS u_evolver,
        argMax(label, tuple(produced_at_ms, _version, event_id)) AS u_label,
        argMax(effect, tuple(produced_at_ms, _version, event_id)) AS u_effect
    FROM {db}.labeled_samples FINAL
    GROUP BY cell_id, update_id
)
GROUP BY u_project, u_campaign, u_benchmark, u_agent, u_evolver;
