-- One truth on messy data (issue 42): every event type is deduplicated by its
-- natural key, with one winner rule, and events the processors refuse as too
-- late are left out of the views as they are out of the derived events.
-- {db} is the quoted database. The rules at the top of 0002_views.sql hold
-- (same rows on 18.16 and current releases, one JOIN per SELECT, explicit
-- tie-breaks); the views' names and columns are those of 0002 and 0004.
--
-- Natural keys (all within project; docs/analysts.md):
--   task_attempt        (cell_id, task_id, cycle, attempt): the contract's key
--                       (cell_id, task_id, stream_idx, cycle, attempt) less
--                       stream_idx, a function of the task and the cycle (the
--                       scorer's key too). The cycle is in the key because a
--                       split_test cell solves its held-out tasks every
--                       cycle; before 0009 the views keyed attempts by
--                       (cell_id, task_id, attempt). A task's pass-rate
--                       reading over several cycles takes the latest winner.
--   skill_event         (cell_id, task_id, attempt, turn, tool, skill_name)
--   adherence_judgment  (cell_id, task_id, attempt, skill_name, judge_model)
--   harness_update      (cell_id, update_id): no view reads harness_updates;
--                       labels are the processors', one per (cell_id,
--                       update_id) in v_label_summary already
--   cell lifecycle      (cell_id, kind)
--   campaign            (campaign_id)
--
-- Winner: copies of one event (same event_id: a redelivery, a replay, a
-- re-send under the same id) collapse first, the highest _version (FINAL);
-- then, among events with one natural key, the winner is the event with the
-- greatest (event_time_ms, event_id): a function of the events, not of the
-- order they arrived in. The processors apply the same rule.
--
-- Late events: an event the processors refuse as too late is dead-lettered
-- with reason_code 'late_beyond_window'. Its dead letter's event_id is
-- derived (processors/message.go), so the refused event's own id is kept in
-- rejected_events.source_event_id (added here; the sink decodes it from the
-- dead letter's payload). Every view that reads task_attempts, skill_events
-- or adherence_judgments leaves those events out (an anti-join on
-- (project, source_event_id)), so views and derived events describe the same
-- events.
--
-- A WHERE on a FINAL read names sort-key columns only (project, cell_id,
-- kind, event_id): a condition on another column could keep an older copy
-- of an event whose newest copy it drops.

-- Dead letters (0001, 0007) with the refused event's own id: '' when the
-- payload does not decode to an event (or is not one: a decode failure).
-- Migrate adds the column to an older database's table before this file
-- runs (ALTER TABLE ADD COLUMN: rekey.go, addedColumns).
CREATE TABLE IF NOT EXISTS {db}.rejected_events (
    event_id String,
    event_time DateTime,
    event_time_ms Int64,
    project String,
    source String,
    stage String,
    reason_code String,
    message String,
    source_topic String,
    source_partition Int32,
    source_offset Int64,
    payload String,
    source_event_id String,
    _topic String,
    _partition Int32,
    _offset Int64,
    _version UInt64,
    _ingested_at DateTime
) ENGINE = ReplacingMergeTree(_version) ORDER BY (project, event_id);

-- v_cell_scores: as in 0002/0004 (one row per (project, cell_id) with
-- attempts), under the rules above. The figures come from cell_scores where
-- the cell has a summary computed under these rules (_version >=
-- chddl.NaturalKeyBase: summaries of earlier releases are ignored), else live
-- from the cell's attempts. Migrate recomputes every cell's summary after
-- this file's statements (backfill, cellscores.go).
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
    WHERE _version >= 6917529027641081856
    GROUP BY project, cell_id

    UNION ALL

{cell_rates_nk BY project, cell_id WHERE (project, cell_id) IN
        (
            SELECT project, cell_id
            FROM {db}.cells
            WHERE kind = 'started' AND (project, cell_id) NOT IN (SELECT project, cell_id FROM {db}.cell_scores WHERE _version >= 6917529027641081856)
        )}
) AS l1
ALL INNER JOIN
(
{cell_info_nk BY project, cell_id}
) AS r1 USING (project, cell_id);

-- v_update_gain: as in 0002; a campaign's anchor agents are its winning
-- campaign event's (natural key campaign_id).
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
            SELECT project, campaign_id, argMax(anchor_agents, tuple(event_time_ms, event_id)) AS ca_agents
            FROM {db}.campaigns FINAL
            GROUP BY project, campaign_id
        ) AS r3 USING (project, campaign_id)
        WHERE has(ca_agents, agent_model)
        GROUP BY project, campaign_id, benchmark, evolver_model, seed, agent_model
    )
    GROUP BY project, campaign_id, benchmark, evolver_model, seed
)
GROUP BY project, campaign_id, benchmark, evolver_model;

-- v_benefit_gain: as in 0002; anchor evolvers from the winning campaign
-- event. Over the anchor evolvers that have a pair: with one missing,
-- delta_benefit_pp is the max over the others (evolvers < n_anchor_evolvers
-- says so), where Δupdate goes NULL.
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
        SELECT project, campaign_id, argMax(anchor_evolvers, tuple(event_time_ms, event_id)) AS ca_evolvers
        FROM {db}.campaigns FINAL
        GROUP BY project, campaign_id
    ) AS r4 USING (project, campaign_id)
    WHERE has(ca_evolvers, evolver_model)
    GROUP BY project, campaign_id, benchmark, agent_model, evolver_model
)
GROUP BY project, campaign_id, benchmark, agent_model;

-- v_skill_activation: as in 0002/0004, per (project, cell_id), over natural
-- keys: an attempt (task, cycle, attempt) is its winner, and joins its
-- task's and attempt number's skill calls (a skill event has no cycle); a
-- skill call is (task, attempt, turn,
-- tool, skill_name) with its winner's status; a judgment is (task, attempt,
-- skill_name, judge_model) with its winner's counts. HFR pools, per (cell,
-- task, skill), the counts of every attempt's and every judge's winning
-- judgment: F summed over them / (F + VC + VO + RU) summed over them.
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
                    cycle,
                    attempt,
                    argMax(skills_available, tuple(event_time_ms, event_id)) AS a_avail,
                    argMax(success = 1 AND status = 'ok', tuple(event_time_ms, event_id)) AS a_pass
                FROM {db}.task_attempts FINAL
                WHERE (project, event_id) NOT IN (SELECT project, source_event_id FROM {db}.rejected_events WHERE reason_code = 'late_beyond_window')
                GROUP BY project, cell_id, task_id, cycle, attempt
            ) AS l5
            ALL LEFT JOIN
            (
                SELECT project, cell_id, task_id, attempt, max(s_tool = 'load_skill' AND s_status = 'loaded') AS l_loaded
                FROM
                (
                    SELECT
                        project,
                        cell_id,
                        task_id,
                        attempt,
                        turn,
                        tool AS s_tool,
                        skill_name,
                        argMax(status, tuple(event_time_ms, event_id)) AS s_status
                    FROM {db}.skill_events FINAL
                    WHERE (project, event_id) NOT IN (SELECT project, source_event_id FROM {db}.rejected_events WHERE reason_code = 'late_beyond_window')
                    GROUP BY project, cell_id, task_id, attempt, turn, tool, skill_name
                )
                GROUP BY project, cell_id, task_id, attempt
            ) AS r5 USING (project, cell_id, task_id, attempt)
            GROUP BY project, cell_id
        ) AS l6
        ALL LEFT JOIN
        (
            SELECT project, cell_id, countIf(s_tool = 'load_skill') AS k_calls, countIf(s_tool = 'load_skill' AND s_status = 'loaded') AS k_ok
            FROM
            (
                SELECT
                    project,
                    cell_id,
                    task_id,
                    attempt,
                    turn,
                    tool AS s_tool,
                    skill_name,
                    argMax(status, tuple(event_time_ms, event_id)) AS s_status
                FROM {db}.skill_events FINAL
                WHERE (project, event_id) NOT IN (SELECT project, source_event_id FROM {db}.rejected_events WHERE reason_code = 'late_beyond_window')
                GROUP BY project, cell_id, task_id, attempt, turn, tool, skill_name
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
                sum(j_followed) AS j_f,
                sum(j_followed + j_vc + j_vo + j_ru) AS j_den,
                j_f / j_den AS j_ratio
            FROM
            (
                SELECT
                    project,
                    cell_id,
                    task_id,
                    attempt,
                    skill_name,
                    judge_model,
                    argMax(followed, tuple(event_time_ms, event_id)) AS j_followed,
                    argMax(violated_commission, tuple(event_time_ms, event_id)) AS j_vc,
                    argMax(violated_omission, tuple(event_time_ms, event_id)) AS j_vo,
                    argMax(required_unobserved, tuple(event_time_ms, event_id)) AS j_ru
                FROM {db}.adherence_judgments FINAL
                WHERE (project, event_id) NOT IN (SELECT project, source_event_id FROM {db}.rejected_events WHERE reason_code = 'late_beyond_window')
                GROUP BY project, cell_id, task_id, attempt, skill_name, judge_model
            )
            GROUP BY project, cell_id, task_id, skill_name
            HAVING j_den > 0
        )
        GROUP BY project, cell_id
    ) AS r7 USING (project, cell_id)
) AS l8
ALL INNER JOIN
(
{cell_info_nk BY project, cell_id}
) AS r8 USING (project, cell_id)
GROUP BY project, ci_campaign, ci_benchmark, ci_agent;

-- v_adherence: as in 0002/0004, one judgment per natural key: its winner,
-- NULL phases included: a NULL phase of the winner stays NULL rather than
-- letting an older event's value through (argMax skips NULL values, so
-- NULL travels as -1e308, below any score, and comes back with nullIf; an
-- argMax over a tuple of Nullable values merges wrongly across the shards
-- of an 18.16 cluster).
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
        nullIf(argMax(ifNull(harness_loaded, -1e308), tuple(event_time_ms, event_id)), -1e308) AS j_hl,
        nullIf(argMax(ifNull(first_action, -1e308), tuple(event_time_ms, event_id)), -1e308) AS j_fa,
        nullIf(argMax(ifNull(midpoint, -1e308), tuple(event_time_ms, event_id)), -1e308) AS j_mid,
        nullIf(argMax(ifNull(pre_final, -1e308), tuple(event_time_ms, event_id)), -1e308) AS j_pre,
        nullIf(argMax(ifNull(final_validation, -1e308), tuple(event_time_ms, event_id)), -1e308) AS j_fv
    FROM {db}.adherence_judgments FINAL
    WHERE (project, event_id) NOT IN (SELECT project, source_event_id FROM {db}.rejected_events WHERE reason_code = 'late_beyond_window')
    GROUP BY project, cell_id, task_id, attempt, skill_name, judge_model
) AS l9
ALL INNER JOIN
(
{cell_info_nk BY project, cell_id}
) AS r9 USING (project, cell_id)
GROUP BY project, ci_campaign, ci_benchmark, ci_agent;
