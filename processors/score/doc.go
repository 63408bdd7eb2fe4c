// Package score is the pure, deterministic core of the processor's second
// stage (docs/design.md §4, docs/metrics.md): it pairs the cells of one pairing key
// ("project/campaign_id/benchmark/agent_model/seed") and turns their admitted
// events into labeled samples (one per harness update) and round metrics (one
// per cell and cycle). It does no I/O: the runtime keeps one Pairer per
// pairing key and feeds it each cell's events in the cell's order; cells
// interleave arbitrarily, events may be redelivered (same event_id: ignored)
// and a restart replays them into a fresh Pairer.
//
// # Determinism
//
// An output is emitted only when every input it reads is final, and each of
// its fields (ids, produced_at, values) is a function of those inputs only,
// never of wall-clock time or of the interleaving of cells: the same set of
// per-cell event sequences yields the same derived events, byte for byte.
// Every decision about a cell's own events (is a round closed, is an event
// late) is taken in that cell's order. Outputs returned by one Add call are
// sorted by cell_id, cycle, type (round metrics first) and event id. Ids are
// hex(sha256("round|"+cell_id+"|"+cycle))[:32] and
// hex(sha256("sample|"+update_id+"|"+cell_id))[:32]; event_time and
// produced_at are the latest event_time of the inputs read (for outputs that
// read the baseline, the baseline cell's latest event_time). Campaign
// parameters (SetParams) must be set before outputs become final for them to
// be deterministic too.
//
// # Cells
//
// Route baseline, or an in_situ cell with no evolver, is the baseline of the
// key (a second baseline cell is refused with ErrDuplicateBaseline and
// ignored). Routes in_situ, split_train and split_test read the baseline for
// their lift, so their round metrics (and in_situ samples) wait until the
// baseline cell has finished; production cells and the baseline itself never
// wait. A split_train cell's updates yield no sample: its updates are measured
// in its split_test sibling, whose stream carries the same updates and
// attempts labeled with harness_version.
//
// # Outcomes
//
// One outcome per (cell, cycle, task): the attempt = 1 row (strict reading;
// a repeated row under a new event_id is ignored). Its value is score; its
// pass is success; a status other than ok counts as score 0, fail. An attempt
// with an empty harness_version is taken as solved under the cell's current
// version (h0, then the to_version of the last update, or its from_version
// when rolled back).
//
// # Rounds
//
// Round t of a cell is closed when the cell finishes or when an attempt of
// cycle ≥ t+2 arrives (one round of slack: skill events and judgments, which
// come from other raw topics, may trail the next round's first attempts).
// Updates do not close rounds: they travel on their own topic and may
// overtake the cell's earlier attempts. Inputs for a closed round (attempts, skill loads,
// judgments, updates of cycle ≤ t) are late: ignored and counted in
// Stats.Late. Events after cell_finished are ignored (Stats.Ignored). Skill
// events and judgments are attached to the latest attempt row of the cell
// with the same (task_id, attempt), or buffered until it arrives (dropped and
// counted in Stats.Orphans when the cell finishes first).
//
// Round metrics: n_tasks = distinct attempt-1 tasks; pass_rate = 100 × share
// passed; mean_score = mean score; lift_vs_baseline = 100 × mean of
// score − baseline score over the round's tasks with a baseline outcome (nil
// for baseline and production cells or without pairs); skill_load_rate =
// share of the round's attempt rows (any attempt number) with
// skills_available > 0 that have a load_skill event with status loaded
// (rejected_multikey is not a load; nil when no row offered skills);
// loaded_pass_rate = 100 × share of those loaded rows that passed (nil when
// none); adherence_loaded / adherence_final = mean of the round's judgments'
// non-null harness_loaded / final_validation scores (nil when none).
//
// # Samples
//
// The harness_update of cycle t moves from_version (v) to to_version (v'):
// "before" is round t's outcomes solved under v, "after" is round t+1's
// solved under v'. The sample is final when round t+1 is closed (and, in
// situ, the baseline has finished). The effect (see Effect) is, by route:
// in_situ, the mean lift against the baseline under v' minus under v, over
// tasks with a baseline outcome (DesignLift); split_test, the held-out
// pass-rate difference (DesignHeldOut); production, an unpaired difference of
// pass rates, Welch (DesignUnpaired). The label is Label's, the reason
// Reason's. An update with no artifact is not an update (no sample,
// Stats.EmptyUpdates). A rolled-back update's v' was never used: its sample
// is neutral with effect 0, n_after 0, CI [0, 0], p = 1 and reason
// ReasonRolledBack.
//
// query is the evidence the evolver saw, as lines: for each evidence task id,
// in the given order, "task <id>: pass|fail score=<score>" (the task's
// attempt-1 outcome in the update's own round — the batch the evolver saw —
// looked up when the sample becomes final, so an update that overtakes its
// evidence attempts on the way in changes nothing; score in shortest decimal
// form) followed by "input: <task_input>" when the attempt carried one, or
// "task <id>: no outcome in this cell" (also for evidence from other rounds); then
// "evidence summary: <summary>" when present. update is, for each artifact,
// "### <kind> <name> (<op>)\n<content>", joined by a blank line;
// artifact_kind is the first artifact's kind (the schema's kind enum has no
// "mixed"; the update text names every artifact's kind).
// harness_version is to_version and harness_version_index its position in
// the cell's version chain (h0 = 0, each new version appended in order).
//
// # Memory
//
// A round's data is dropped once its metrics were emitted and no pending
// update reads it; a finished cell whose outputs all went out is evicted,
// leaving only its id (further events of it are ignored). The baseline keeps
// a compact task_id → score map, since more evolved cells may start later;
// Done reports that the whole Pairer may be evicted after a grace period.
package score
