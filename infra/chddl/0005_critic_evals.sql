-- The critic's evaluation per checkpoint (issue 27), written by the trainer
-- (not by the sink): for every checkpoint, each predictor (the model and the
-- trivial baselines fitted on the training side) scored on the same
-- held-out rows, split by group (campaign and seed, never single samples),
-- with group-bootstrap intervals. One row per (checkpoint, predictor,
-- metric); the verdict is the checkpoint's, the same on all its rows
-- ('beats baselines' or 'no signal yet'). The learning curve is
-- value against samples_trained for predictor 'model' beside the best
-- baseline of each metric.
CREATE TABLE IF NOT EXISTS {db}.critic_evals (
    trainer String,
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
