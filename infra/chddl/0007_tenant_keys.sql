-- Tenant safety, round 2 (issue 35): every derived identity includes the
-- project. {db} is the quoted database. The tables below are those of 0001,
-- 0005 and 0006 in their new form; each CREATE finds its table and creates
-- nothing on a database that has it, because chddl.Migrate brings an older
-- database's table to this form before this file runs (rekey.go):
--
--   rejected_events    rebuilt by copy, as 0004 rebuilt the event tables,
--                      with ORDER BY (project, event_id): a dead letter of
--                      one project no longer replaces another project's with
--                      the same event id. Rows keep their _version.
--   checkpoints        rebuilt likewise, ORDER BY (project, source,
--                      model_version, event_id): the trainer's rows have
--                      project '' and source 'trainer:<name>'; every event a
--                      tenant sends through the gateway carries the tenant's
--                      (non-empty) project, so a forged checkpoint_published
--                      is another row and never replaces the trainer's.
--   critic_evals,      a project column after trainer (ALTER TABLE ADD
--   critic_eval_diffs  COLUMN): the project whose samples the trainer's
--                      model is trained on, '' for a trainer that trains on
--                      every project's samples (the default). Rows written
--                      before read ''. Their sort keys stay: a trainer's
--                      model versions are its own ("<trainer>-v<n>") and
--                      only the trainer writes these tables.

-- Dead letters (0001), keyed by project.
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
) ENGINE = ReplacingMergeTree(_version) ORDER BY (project, event_id);

-- Checkpoints (0001), keyed by project and source.
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
) ENGINE = ReplacingMergeTree(_version) ORDER BY (project, source, model_version, event_id);

-- critic_evals (0005) with project.
CREATE TABLE IF NOT EXISTS {db}.critic_evals (
    trainer String,
    project String,
    model_version String,
    checkpoint_sha256 String,
    step UInt64,
    samples_trained UInt64,
    heldout_rows UInt32,
    heldout_groups UInt32,
    predictor String,
    metric String,
    value Float64,
    ci_low Float64,
    ci_high Float64,
    verdict String,
    evaluated_at DateTime
) ENGINE = ReplacingMergeTree(evaluated_at) ORDER BY (trainer, model_version, predictor, metric);

-- critic_eval_diffs (0006) with project.
CREATE TABLE IF NOT EXISTS {db}.critic_eval_diffs (
    trainer String,
    project String,
    model_version String,
    checkpoint_sha256 String,
    step UInt64,
    samples_trained UInt64,
    heldout_rows UInt32,
    heldout_groups UInt32,
    metric String,
    baseline String,
    diff Float64,
    ci_low Float64,
    ci_high Float64,
    verdict String,
    checkpoint_verdict String,
    evaluated_at DateTime
) ENGINE = ReplacingMergeTree(evaluated_at) ORDER BY (trainer, model_version, metric);
