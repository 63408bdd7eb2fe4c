-- Evaluation sets (issue 36): every critic_evals and critic_eval_diffs row
-- names the held-out rows its checkpoint was evaluated on. {db} is the
-- quoted database. The trainer evaluates the checkpoints of one evaluation
-- epoch on one fixed set of held-out samples (trainer/README.md), so rows
-- with the same eval_set_sha256 compare checkpoints on the same rows:
--
--   eval_set_sha256  the lowercase hex sha256 of the set's sample ids,
--                    sorted and joined by '\n' (trainer_steps'
--                    sample_id_hash of the same ids)
--   eval_epoch       the evaluation epoch, from 1, of the trainer
--
-- Both come after checkpoint_sha256 (ALTER TABLE ADD COLUMN on a database
-- migrated before, like 0007's project: chddl.Migrate adds them before this
-- file runs, ON CLUSTER to the local and the Distributed tables on a
-- cluster); rows written before read '' and 0. The tables below are those
-- of 0007 in their new form; each CREATE finds its table and creates
-- nothing on a database that has it. Their sort keys stay.

-- critic_evals (0005, 0007) with the evaluation set.
CREATE TABLE IF NOT EXISTS {db}.critic_evals (
    trainer String,
    project String,
    model_version String,
    checkpoint_sha256 String,
    eval_set_sha256 String,
    eval_epoch UInt64,
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

-- critic_eval_diffs (0006, 0007) with the evaluation set.
CREATE TABLE IF NOT EXISTS {db}.critic_eval_diffs (
    trainer String,
    project String,
    model_version String,
    checkpoint_sha256 String,
    eval_set_sha256 String,
    eval_epoch UInt64,
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
