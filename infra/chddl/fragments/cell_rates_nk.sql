    -- cell_rates_nk: the pass-rate definition (METRICS.md) under the natural
    -- key rules of 0009_natural_keys.sql, its one copy; {by} must hold
    -- project. Per cell over its tasks: r_n_tasks, and in percent
    -- r_pass_rate (attempt 1, binary), r_pass_rate_final (the final row),
    -- r_mean_score and r_mean_score_final (fractional). Copies of one event
    -- (its sort key: project, cell_id, task_id, event_id) collapse first,
    -- the highest _version, as FINAL would but aggregated on every core;
    -- events refused as late_beyond_window are left out; an attempt is
    -- (cell, task_id, cycle, attempt) and its winner the event with the
    -- greatest (event_time_ms, event_id). Per task, the strict reading is
    -- the attempt-1 winner, the retry reading the final = 1 winner; where
    -- several qualify (a split_test cell solves its tasks every cycle;
    -- several attempts claiming final) the one with the greatest
    -- (event_time_ms, event_id). status <> 'ok' is a failure, a missing row
    -- a failure of its reading.
    SELECT
        {by},
        count() AS r_n_tasks,
        100 * avg(t_first) AS r_pass_rate,
        100 * avg(t_final) AS r_pass_rate_final,
        100 * avg(t_first_score) AS r_mean_score,
        100 * avg(t_final_score) AS r_mean_score_final
    FROM
    (
        SELECT
            {by},
            task_id,
            argMaxIf(a_pass, a_key, e_attempt = 1) AS t_first,
            argMaxIf(a_score, a_key, e_attempt = 1) AS t_first_score,
            argMaxIf(a_pass, a_key, a_final = 1) AS t_final,
            argMaxIf(a_score, a_key, a_final = 1) AS t_final_score
        FROM
        (
            SELECT
                {by},
                task_id,
                e_cycle,
                e_attempt,
                argMax(e_pass, tuple(e_ms, event_id)) AS a_pass,
                argMax(e_score, tuple(e_ms, event_id)) AS a_score,
                argMax(e_final, tuple(e_ms, event_id)) AS a_final,
                max(tuple(e_ms, event_id)) AS a_key
            FROM
            (
                SELECT
                    {by},
                    task_id,
                    event_id,
                    argMax(cycle, _version) AS e_cycle,
                    argMax(attempt, _version) AS e_attempt,
                    argMax(event_time_ms, _version) AS e_ms,
                    argMax(success = 1 AND status = 'ok', _version) AS e_pass,
                    argMax(if(status = 'ok', score, 0), _version) AS e_score,
                    argMax(final, _version) AS e_final
                FROM {db}.task_attempts
                {where}
                GROUP BY {by}, task_id, event_id
            )
            WHERE (project, event_id) NOT IN (SELECT project, source_event_id FROM {db}.rejected_events WHERE reason_code = 'late_beyond_window')
            GROUP BY {by}, task_id, e_cycle, e_attempt
        )
        GROUP BY {by}, task_id
    )
    GROUP BY {by}
