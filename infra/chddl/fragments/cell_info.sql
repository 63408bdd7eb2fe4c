    -- cell_info: a cell's identity from its cell_started event, one row per
    -- cell (the highest _version), every column named apart (ci_*).
    SELECT
        {by},
        argMax(project, _version) AS ci_project,
        argMax(campaign_id, _version) AS ci_campaign,
        argMax(benchmark, _version) AS ci_benchmark,
        argMax(agent_model, _version) AS ci_agent,
        argMax(evolver_model, _version) AS ci_evolver,
        argMax(seed, _version) AS ci_seed,
        argMax(route, _version) AS ci_route
    FROM {db}.cells
    WHERE kind = 'started'
    GROUP BY {by}
