-- Per-cell score summaries, so that v_cell_scores (and v_pair_gain,
-- v_update_gain, v_benefit_gain, which read it) answer from a few hundred
-- rows instead of deduplicating every attempt on each query. {db} is the
-- quoted database.
--
-- cell_scores holds, per cell, the exact figures v_cell_scores defines
-- (0002_views.sql), computed from task_attempts by chddl.RecomputeCellScores:
-- the sink runs it for the cells of every task_attempts insert, after the
-- insert and before committing the offsets, so a crash in between redelivers
-- the rows and recomputes again. A recomputation is a pure function of the
-- cell's deduplicated attempts and is written with a fresh _version (unix
-- nanoseconds at its start): re-running it, a redelivery or a replay, changes
-- no figure. It is not a materialized view (one over a ReplacingMergeTree
-- would count duplicates). Readers take argMax(..., _version) per cell_id.
--
-- Cells with attempts but no cell_scores row (rows written by something else
-- than the sink, e.g. fixtures or INSERT ... SELECT) are computed live by the
-- view, from task_attempts restricted to those cells through the primary key:
-- the view is exact either way. Whoever writes task_attempts of a cell that
-- already has a summary, other than the sink, must call RecomputeCellScores
-- for that cell afterwards.
--
-- Re-running the views file (0002) re-runs this one too (chddl applies every
-- file after a re-applied one), so this definition of v_cell_scores stays.

CREATE TABLE IF NOT EXISTS {db}.cell_scores (
    cell_id String,
    n_tasks UInt64,
    pass_rate Float64,
    pass_rate_final Float64,
    mean_score Float64,
    mean_score_final Float64,
    _version UInt64,
    _computed_at DateTime
) ENGINE = ReplacingMergeTree(_version) ORDER BY cell_id;

-- v_cell_scores: same columns and semantics as in 0002_views.sql. The per-cell
-- figures come from cell_scores where a cell has a summary, else from the
-- live per-task deduplication (the 0002 definition) over that cell only.
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
    SELECT
        cell_id,
        argMax(n_tasks, _version) AS r_n_tasks,
        argMax(pass_rate, _version) AS r_pass_rate,
        argMax(pass_rate_final, _version) AS r_pass_rate_final,
        argMax(mean_score, _version) AS r_mean_score,
        argMax(mean_score_final, _version) AS r_mean_score_final
    FROM {db}.cell_scores
    GROUP BY cell_id

    UNION ALL

{cell_rates WHERE cell_id IN
        (
            SELECT cell_id
            FROM {db}.cells
            WHERE kind = 'started' AND cell_id NOT IN (SELECT cell_id FROM {db}.cell_scores)
        )}
) AS l1
ALL INNER JOIN
(
{cell_info}
) AS r1 USING (cell_id);
