    -- cell_rates: the pass-rate definition (METRICS.md), its one copy. Per
    -- cell over its tasks: r_n_tasks, and in percent r_pass_rate (attempt 1,
    -- binary), r_pass_rate_final (final row), r_mean_score and
    -- r_mean_score_final (fractional). One outcome per (cell_id, task_id),
    -- the highest _version of the matching row; status <> 'ok' is a failure.
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
            argMaxIf(success = 1 AND status = 'ok', _version, attempt = 1) AS t_first,
            argMaxIf(if(status = 'ok', score, 0), _version, attempt = 1) AS t_first_score,
            argMaxIf(success = 1 AND status = 'ok', _version, final = 1) AS t_final,
            argMaxIf(if(status = 'ok', score, 0), _version, final = 1) AS t_final_score
        FROM {db}.task_attempts
        {where}
        GROUP BY {by}, task_id
    )
    GROUP BY {by}
