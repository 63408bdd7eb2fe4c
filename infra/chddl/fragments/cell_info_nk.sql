    -- cell_info_nk: a cell's identity from its cell_started event, one row
    -- per cell, every column named apart (ci_*). Re-sends under one event id
    -- collapse first (FINAL: the highest _version); among cell_started events
    -- with other ids the winner is the greatest (event_time_ms, event_id).
    SELECT
        {by},
        argMax(project, tuple(event_time_ms, event_id)) AS ci_project,
        argMax(campaign_id, tuple(event_time_ms, event_id)) AS ci_campaign,
        argMax(benchmark, tuple(event_time_ms, event_id)) AS ci_benchmark,
        argMax(agent_model, tuple(event_time_ms, event_id)) AS ci_agent,
        argMax(evolver_model, tuple(event_time_ms, event_id)) AS ci_evolver,
        argMax(seed, tuple(event_time_ms, event_id)) AS ci_seed,
        argMax(route, tuple(event_time_ms, event_id)) AS ci_route
    FROM {db}.cells FINAL
    WHERE kind = 'started'
    GROUP BY {by}
