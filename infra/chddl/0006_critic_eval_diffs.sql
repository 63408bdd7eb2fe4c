-- The paired differences behind the critic's verdict, written by the trainer
-- (not by the sink) beside critic_evals (0005) from the same evaluation:
-- for every checkpoint and compared metric (rmse, spearman, nll, macro_f1),
-- model − best baseline (the baseline with the best point value on all
-- held-out rows) with the group-bootstrap interval of the difference,
-- computed on the same resampled rows for both predictors. One row per
-- (checkpoint, metric). verdict is the metric's ('beats baselines' when
-- the interval excludes 0 on the model's side and the held-out rows have
-- at least the trainer's --eval-min-groups groups, else 'no signal yet');
-- checkpoint_verdict is the checkpoint's, the same as critic_evals'
-- verdict ('beats baselines' only when every metric's is). evaluated_at
-- equals the critic_evals rows' of the same evaluation; a re-evaluated
-- checkpoint's rows replace the older ones.
CREATE TABLE IF NOT EXISTS {db}.critic_eval_diffs (
    trainer String,
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
