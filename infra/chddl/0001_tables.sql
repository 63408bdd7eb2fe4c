-- harnessflow ClickHouse tables (DESIGN.md §5). Applied by `harnessflow migrate`
-- and at sink start; {db} is replaced by the quoted database name.
--
-- Every event table is a ReplacingMergeTree whose version _version is derived
-- from the event's Kafka coordinates (partition << 48 | offset): a redelivered
-- or replayed event carries the same event_id and collapses to one row. ORDER BY
-- holds immutable ids only and ends in event_id. There is no PARTITION BY on
-- event tables on purpose: rows are deduplicated only within a partition, and a
-- re-sent event whose event_time differed would otherwise escape deduplication.
-- Views never rely on merges having happened: they read through FINAL or
-- argMax(..., _version) GROUP BY (infra/chddl/0002_views.sql).
--
-- Common columns: event_id, event_time (second precision, UTC) and
-- event_time_ms (unix milliseconds), project, source; _topic, _partition,
-- _offset, _version, _ingested_at (when the sink wrote the row).
-- Booleans are UInt8 (0/1). Nothing here needs a version newer than 18.16:
-- no LowCardinality, DateTime64, Map, JSON or SETTINGS clauses.
-- Statements end with ';' at the end of a line.

CREATE DATABASE IF NOT EXISTS {db};

-- The schema_migrations ledger is created by chddl.Migrate before any file runs.

CREATE TABLE IF NOT EXISTS {db}.campaigns (
    event_id String,
    event_time DateTime,
    event_time_ms Int64,
    project String,
    source String,
    campaign_id String,
    benchmarks Array(String),
    anchor_agents Array(String),
    anchor_evolvers Array(String),
    label_epsilon Float64,
    label_alpha Float64,
    _topic String,
    _partition Int32,
    _offset Int64,
    _version UInt64,
    _ingested_at DateTime
) ENGINE = ReplacingMergeTree(_version) ORDER BY (campaign_id, event_id);

-- cell_started (kind = 'started') and cell_finished (kind = 'finished') rows;
-- columns that belong to the other kind hold their defaults.
CREATE TABLE IF NOT EXISTS {db}.cells (
    event_id String,
    event_time DateTime,
    event_time_ms Int64,
    project String,
    source String,
    kind String,
    cell_id String,
    campaign_id String,
    benchmark String,
    agent_model String,
    evolver_model String,
    seed Int32,
    route String,
    h0_version String,
    batch_size Int32,
    max_attempts Int32,
    task_count Int32,
    status String,
    attempts Int64,
    _topic String,
    _partition Int32,
    _offset Int64,
    _version UInt64,
    _ingested_at DateTime
) ENGINE = ReplacingMergeTree(_version) ORDER BY (cell_id, kind, event_id);

CREATE TABLE IF NOT EXISTS {db}.task_attempts (
    event_id String,
    event_time DateTime,
    event_time_ms Int64,
    project String,
    source String,
    cell_id String,
    task_id String,
    stream_idx Int32,
    cycle Int32,
    attempt Int32,
    harness_version String,
    status String,
    score Float64,
    success UInt8,
    final UInt8,
    skills_available Int32,
    skills_loaded Array(String),
    input_tokens Int64,
    output_tokens Int64,
    duration_ms Int64,
    task_input String,
    _topic String,
    _partition Int32,
    _offset Int64,
    _version UInt64,
    _ingested_at DateTime
) ENGINE = ReplacingMergeTree(_version) ORDER BY (cell_id, task_id, event_id);

CREATE TABLE IF NOT EXISTS {db}.skill_events (
    event_id String,
    event_time DateTime,
    event_time_ms Int64,
    project String,
    source String,
    cell_id String,
    task_id String,
    attempt Int32,
    turn Int32,
    tool String,
    skill_name String,
    status String,
    _topic String,
    _partition Int32,
    _offset Int64,
    _version UInt64,
    _ingested_at DateTime
) ENGINE = ReplacingMergeTree(_version) ORDER BY (cell_id, task_id, event_id);

-- Artifacts are parallel arrays: element i of every artifact_* column is the
-- i-th artifact of the update.
CREATE TABLE IF NOT EXISTS {db}.harness_updates (
    event_id String,
    event_time DateTime,
    event_time_ms Int64,
    project String,
    source String,
    cell_id String,
    update_id String,
    cycle Int32,
    from_version String,
    to_version String,
    evolver_model String,
    artifact_kind Array(String),
    artifact_name Array(String),
    artifact_op Array(String),
    artifact_content Array(String),
    artifact_sha256 Array(String),
    evidence_task_ids Array(String),
    evidence_summary String,
    accepted UInt8,
    rolled_back UInt8,
    _topic String,
    _partition Int32,
    _offset Int64,
    _version UInt64,
    _ingested_at DateTime
) ENGINE = ReplacingMergeTree(_version) ORDER BY (cell_id, update_id, event_id);

-- Phase scores are NULL when the judge did not score that phase.
CREATE TABLE IF NOT EXISTS {db}.adherence_judgments (
    event_id String,
    event_time DateTime,
    event_time_ms Int64,
    project String,
    source String,
    cell_id String,
    task_id String,
    attempt Int32,
    skill_name String,
    judge_model String,
    followed Int32,
    violated_commission Int32,
    violated_omission Int32,
    required_unobserved Int32,
    not_applicable Int32,
    insufficient_evidence Int32,
    harness_loaded Nullable(Float64),
    first_action Nullable(Float64),
    midpoint Nullable(Float64),
    pre_final Nullable(Float64),
    final_validation Nullable(Float64),
    _topic String,
    _partition Int32,
    _offset Int64,
    _version UInt64,
    _ingested_at DateTime
) ENGINE = ReplacingMergeTree(_version) ORDER BY (cell_id, task_id, event_id);

CREATE TABLE IF NOT EXISTS {db}.labeled_samples (
    event_id String,
    event_time DateTime,
    event_time_ms Int64,
    project String,
    source String,
    sample_id String,
    update_id String,
    cell_id String,
    campaign_id String,
    benchmark String,
    agent_model String,
    evolver_model String,
    cycle Int32,
    `query` String,
    `update` String,
    artifact_kind String,
    effect Float64,
    label String,
    n_before Int32,
    n_after Int32,
    ci_low Float64,
    ci_high Float64,
    p_value Float64,
    reason String,
    harness_version String,
    harness_version_index Int32,
    seed Int32,
    route String,
    produced_at DateTime,
    produced_at_ms Int64,
    _topic String,
    _partition Int32,
    _offset Int64,
    _version UInt64,
    _ingested_at DateTime
) ENGINE = ReplacingMergeTree(_version) ORDER BY (cell_id, update_id, event_id);

-- Nullable columns are NULL where the processor had nothing to compute from
-- (no baseline pair, no attempt offered skills, no judgment).
CREATE TABLE IF NOT EXISTS {db}.round_metrics (
    event_id String,
    event_time DateTime,
    event_time_ms Int64,
    project String,
    source String,
    cell_id String,
    campaign_id String,
    benchmark String,
    agent_model String,
    evolver_model String,
    seed Int32,
    cycle Int32,
    n_tasks Int32,
    pass_rate Float64,
    mean_score Float64,
    lift_vs_baseline Nullable(Float64),
    skill_load_rate Nullable(Float64),
    loaded_pass_rate Nullable(Float64),
    adherence_loaded Nullable(Float64),
    adherence_final Nullable(Float64),
    _topic String,
    _partition Int32,
    _offset Int64,
    _version UInt64,
    _ingested_at DateTime
) ENGINE = ReplacingMergeTree(_version) ORDER BY (cell_id, cycle, event_id);

-- Dead letters: from hf.dlq, and the sink's own decode failures (stage
-- 'decode', source_* = the undecodable message's coordinates).
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
    _topic String,
    _partition Int32,
    _offset Int64,
    _version UInt64,
    _ingested_at DateTime
) ENGINE = ReplacingMergeTree(_version) ORDER BY (event_id);

-- offsets and metrics are parallel arrays.
CREATE TABLE IF NOT EXISTS {db}.checkpoints (
    event_id String,
    event_time DateTime,
    event_time_ms Int64,
    project String,
    source String,
    model_version String,
    step Int64,
    samples_trained Int64,
    offset_topic Array(String),
    offset_partition Array(Int32),
    offset_offset Array(Int64),
    metric_name Array(String),
    metric_value Array(Float64),
    _topic String,
    _partition Int32,
    _offset Int64,
    _version UInt64,
    _ingested_at DateTime
) ENGINE = ReplacingMergeTree(_version) ORDER BY (model_version, event_id);

-- Written by the trainer (one row per optimisation step), not by the sink.
CREATE TABLE IF NOT EXISTS {db}.trainer_steps (
    trainer String,
    model_version String,
    step UInt64,
    samples UInt32,
    sample_ids Array(String),
    sample_id_hash String,
    loss Float64,
    loss_nll Float64,
    loss_ce Float64,
    heldout_acc Float64,
    heldout_macro_f1 Float64,
    heldout_mae Float64,
    staleness_versions_p50 Float64,
    staleness_versions_p95 Float64,
    staleness_model_p50 Float64,
    staleness_model_p95 Float64,
    dropped_stale UInt32,
    device String,
    written_at DateTime
) ENGINE = ReplacingMergeTree(written_at) ORDER BY (trainer, step);
