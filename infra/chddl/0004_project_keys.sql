-- Projects isolated (issue 26): a cell is (project, cell_id), never cell_id
-- alone. {db} is the quoted database. Two projects that use the same cell id
-- (or update id, or explicit event id) stay two cells in every table and view.
--
-- The event tables' sort keys start with project (chddl.Migrate rebuilds a
-- table whose ORDER BY lacks it before this file runs: see rekey.go; a
-- ReplacingMergeTree deduplicates by its whole sort key, so without project
-- two projects' rows with one event id would collapse into one). cell_scores
-- is keyed (project, cell_id) and the views below group and join by project
-- and cell id wherever they grouped or joined by cell id; names and columns
-- are those of 0002_views.sql and 0003_cell_scores.sql, whose rules hold
-- (same rows on 18.16 and current releases). The views not redefined here
-- (v_pair_gain, v_update_gain, v_benefit_gain) already key by project and read
-- v_cell_scores.

-- cell_scores: per (project, cell_id), the figures v_cell_scores defines,
-- written by chddl.RecomputeCellScores (see 0003_cell_scores.sql). The
-- summary table of 0003 had no project: Migrate drops it before this file
-- runs (rekey.go) and cells without a summary are computed live by the view
-- until the sink next recomputes them, so no figure changes.
CREATE TABLE IF NOT EXISTS {db}.cell_scores (
    project String,
    cell_id String,
    n_tasks UInt64,
    pass_rate Float64,
    pass_rate_final Float64,
    mean_score Float64,
    mean_score_final Float64,
    _version UInt64,
    _computed_at DateTime
) ENGINE = ReplacingMergeTree(_version) ORDER BY (project, cell_id);

-- v_cell_scores: one row per (project, cell_id) with attempts (0002 says what
-- each figure is), from cell_scores where the cell has a summary, else live.
CREATE OR REPLACE VIEW {db}.v_cell_scores AS
SELECT
    project,
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
    SELECT
        project,
        cell_id,
        argMax(n_tasks, _version) AS r_n_tasks,
        argMax(pass_rate, _version) AS r_pass_rate,
        argMax(pass_rate_final, _version) AS r_pass_rate_final,
        argMax(mean_score, _version) AS r_mean_score,
        argMax(mean_score_final, _version) AS r_mean_score_final
    FROM {db}.cell_scores
    GROUP BY project, cell_id

    UNION ALL

{cell_rates BY project, cell_id WHERE (project, cell_id) IN
        (
            SELECT project, cell_id
            FROM {db}.cells
            WHERE kind = 'started' AND (project, cell_id) NOT IN (SELECT project, cell_id FROM {db}.cell_scores)
        )}
) AS l1
ALL INNER JOIN
(
{cell_info BY project, cell_id}
) AS r1 USING (project, cell_id);

-- v_skill_activation: as in 0002_views.sql, per (project, cell_id).
CREATE OR REPLACE VIEW {db}.v_skill_activation AS
SELECT
    project,
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
    SELECT project, cell_id, c_attempts, c_offered, c_offered_loaded, c_loaded, c_loaded_pass, k_calls, k_ok, h_sum, h_n
    FROM
    (
        SELECT project, cell_id, c_attempts, c_offered, c_offered_loaded, c_loaded, c_loaded_pass, k_calls, k_ok
        FROM
        (
            SELECT
                project,
                cell_id,
                count() AS c_attempts,
                countIf(a_avail > 0) AS c_offered,
                countIf(a_avail > 0 AND l_loaded = 1) AS c_offered_loaded,
                countIf(l_loaded = 1) AS c_loaded,
                countIf(l_loaded = 1 AND a_pass = 1) AS c_loaded_pass
            FROM
            (
                SELECT
                    project,
                    cell_id,
                    task_id,
                    attempt,
                    argMax(skills_available, _version) AS a_avail,
                    argMax(success = 1 AND status = 'ok', _version) AS a_pass
                FROM {db}.task_attempts
                GROUP BY project, cell_id, task_id, attempt
            ) AS l5
            ALL LEFT JOIN
            (
                SELECT project, cell_id, task_id, attempt, toUInt8(1) AS l_loaded
                FROM {db}.skill_events
                WHERE tool = 'load_skill' AND status = 'loaded'
                GROUP BY project, cell_id, task_id, attempt
            ) AS r5 USING (project, cell_id, task_id, attempt)
            GROUP BY project, cell_id
        ) AS l6
        ALL LEFT JOIN
        (
            SELECT project, cell_id, count() AS k_calls, countIf(k_status = 'loaded') AS k_ok
            FROM
            (
                SELECT project, cell_id, event_id, argMax(status, _version) AS k_status
                FROM {db}.skill_events
                WHERE tool = 'load_skill'
                GROUP BY project, cell_id, event_id
            )
            GROUP BY project, cell_id
        ) AS r6 USING (project, cell_id)
    ) AS l7
    ALL LEFT JOIN
    (
        SELECT project, cell_id, sum(j_ratio) AS h_sum, count() AS h_n
        FROM
        (
            SELECT
                project,
                cell_id,
                task_id,
                skill_name,
                sum(followed) AS j_f,
                sum(followed + violated_commission + violated_omission + required_unobserved) AS j_den,
                j_f / j_den AS j_ratio
            FROM {db}.adherence_judgments FINAL
            GROUP BY project, cell_id, task_id, skill_name
            HAVING j_den > 0
        )
        GROUP BY project, cell_id
    ) AS r7 USING (project, cell_id)
) AS l8
ALL INNER JOIN
(
{cell_info BY project, cell_id}
) AS r8 USING (project, cell_id)
GROUP BY project, ci_campaign, ci_benchmark, ci_agent;

-- v_adherence: as in 0002_views.sql, per (project, cell_id).
CREATE OR REPLACE VIEW {db}.v_adherence AS
SELECT
    project,
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
        project,
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
{cell_info BY project, cell_id}
) AS r9 USING (project, cell_id)
GROUP BY project, ci_campaign, ci_benchmark, ci_agent;

-- v_round_stability: as in 0002_views.sql; rounds deduplicated per
-- (project, cell_id, cycle), re-evaluations per (project, cell_id, update_id).
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
                project,
                cell_id,
                cycle,
                argMax(project, _version) AS r_project,
                argMax(campaign_id, _version) AS r_campaign,
                argMax(benchmark, _version) AS r_benchmark,
                argMax(agent_model, _version) AS r_agent,
                argMax(evolver_model, _version) AS r_evolver,
                argMax(lift_vs_baseline, _version) AS r_lift
            FROM {db}.round_metrics
            GROUP BY project, cell_id, cycle
        ) AS l10
        ALL LEFT JOIN
        (
            SELECT project, cell_id, sum(u_flips) AS f_flips, sum(u_trans) AS f_trans
            FROM
            (
                SELECT
                    project,
                    cell_id,
                    update_id,
                    arrayMap(t -> tupleElement(t, 3), arraySort(groupArray(tuple(produced_at_ms, _version, label)))) AS u_labels,
                    arraySum(arrayMap((a, b) -> a != b, arrayPopBack(u_labels), arrayPopFront(u_labels))) AS u_flips,
                    length(u_labels) - 1 AS u_trans
                FROM {db}.labeled_samples FINAL
                GROUP BY project, cell_id, update_id
            )
            GROUP BY project, cell_id
        ) AS r10 USING (project, cell_id)
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
            GROUP BY project, cell_id, cycle
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
            GROUP BY project, cell_id, update_id
        )
        GROUP BY u_project, u_campaign, u_benchmark, u_agent, u_evolver
    ) AS r11 USING (project, campaign_id, benchmark, agent_model, evolver_model)
);

-- v_label_summary: as in 0002_views.sql; an update is (project, cell_id,
-- update_id).
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
    GROUP BY project, cell_id, update_id
)
GROUP BY u_project, u_campaign, u_benchmark, u_agent, u_evolver;
