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
// The last emission of every derived event is a function of the set of
// the cells' events, not of their arrival order: an output is emitted when
// its round closes (below), and emitted again, with the same event id and
// new values, whenever a later input changes it (a late attempt, a round
// that arrives late, a re-send that wins its natural key, a late baseline
// attempt): a correction. The sink's ReplacingMergeTree keeps the last
// record of an id (its version is the Kafka coordinates, and a correction
// goes to the same partition, keyed by cell_id, after what it corrects),
// so ClickHouse holds the figures of every event. A correction is emitted
// only when some field differs (its encoding's 64-bit fingerprint does:
// see "Memory"). Each field (ids, produced_at, values) is a
// function of the inputs read, summed in (task_id, attempt, cycle) order,
// never of wall-clock time or of the interleaving of cells. Outputs
// returned by one Add call are sorted by cell_id, cycle, type (round
// metrics first) and event id. Ids are
// hex(sha256("round|"+cell_id+"|"+cycle))[:32] and
// hex(sha256("sample|"+update_id+"|"+cell_id))[:32] (other projects than
// the default hash the project too, derivedID); event_time and
// produced_at are the latest event_time of the inputs read, in
// milliseconds, the schema's precision (for outputs that read the
// baseline, the baseline cell's latest event_time). Campaign
// parameters (SetParams) must be set before outputs are emitted for them to
// be deterministic too.
//
// # Natural keys and one winner
//
// Events that share a natural key within their cell are one event, and the
// winner is the one with the greatest (event_time in milliseconds,
// event_id), whatever order they arrived in (the analyst views use the same
// rule). Keys: task_attempt (task_id, cycle, attempt) — stream_idx is a
// function of the task and the cycle; the cycle is part of the key because
// a split_test cell solves the same held-out tasks every round; skill_event
// (task_id, attempt, turn, tool, skill_name), of which only tool load_skill
// is read; adherence_judgment (task_id, attempt, skill_name, judge_model);
// harness_update (update_id): a re-send changes no version (the first copy
// advanced the chain), the winner's fields make the sample, its update text
// and artifact_kind those of the greatest copy that has artifacts (so an
// update yields a sample when any of its copies has artifacts, whatever
// the order; a sample once emitted is never withdrawn). A redelivery
// (same event_id) is ignored (Stats.Duplicates), a loser counted in
// Stats.Superseded.
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
// One outcome per (cell, cycle, task): the winner of its attempt = 1 key
// (strict reading). Its value is score; its pass is success; a status other
// than ok counts as score 0, fail. An attempt with an empty harness_version
// is taken as solved under the cell's current version when it arrives in
// the cell's order: h0, then the to_version of the last update that was
// accepted and not rolled back (the validator's current version; an update
// that was not accepted, or rolled back, changes nothing). The baseline's
// score on a task is its attempt-1 winner's (the lowest cycle's, should
// the baseline solve a task twice).
//
// # Rounds
//
// Round t of a cell is closed when the cell finishes or when an attempt of
// cycle ≥ t+2 arrives (one round of slack: skill events and judgments, which
// come from other raw topics, may trail the next round's first attempts);
// its metrics are emitted then. Updates do not close rounds: they travel on
// their own topic and may overtake the cell's earlier attempts. Inputs for
// a closed round (attempts, skill loads, judgments, updates of cycle ≤ t,
// and events after cell_finished) are late: they count, and the outputs
// that read them are corrected (Stats.Late, Stats.Corrections); a round
// that first arrives after it closed (even after cell_finished), and an
// update both of whose rounds closed, are emitted at once. A skill event or
// judgment belongs to the attempt of its (task_id, attempt) — of those in
// several cycles, the one with the latest event time not after its own,
// else the earliest — and counts once that attempt arrived (never when it
// does not).
//
// Round metrics: n_tasks = tasks with an attempt-1 winner in the round;
// pass_rate = 100 × share passed; mean_score = mean score, in [0, 1];
// lift_vs_baseline = 100 × mean of score − baseline score over the round's
// tasks with a baseline outcome (nil for baseline and production cells or
// without pairs); skill_load_rate = share, in [0, 1], of the round's attempt
// winners (any attempt number) with skills_available > 0 whose winning
// load_skill events include one with status loaded (rejected_multikey is
// not a load; nil when no row offered skills); loaded_pass_rate = 100 ×
// share of those loaded rows that passed (nil when none); adherence_loaded /
// adherence_final = mean, in [0, 1], of the round's judgment winners'
// non-null harness_loaded / final_validation scores (nil when none).
//
// # Samples
//
// The harness_update of cycle t moves from_version (v) to to_version (v'):
// "before" is round t's outcomes solved under v, "after" is round t+1's
// solved under v'. The sample is emitted when round t+1 is closed (and, in
// situ, the baseline has finished), and corrected when an input changes
// later (a late attempt of round t or t+1, a re-sent update that wins, a
// late baseline attempt). The effect (see Effect) is, by route:
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
// looked up when the sample is computed, so an update that overtakes its
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
// A cell keeps its inputs' winners while it runs (a late event may correct
// any of its rounds; the processors' stage A caps each project's state,
// --max-state-bytes) and, once finished, until the runtime forgets it
// (Forget: its retention window for late events passed, or its project's
// finished cells hold too much state); a forgotten cell's later events are
// ErrLateBeyondWindow, which the runtime dead-letters late_beyond_window.
//
// It keeps them compact (compact.go), what recomputing its outputs reads
// and no more: about 70 to 100 bytes of live heap per event of a finished
// cell (the processors' TestRetainedFinishedStateIsCompact measures both
// stages; keeping the decoded strings and maps cost about 440). Per
// (task_id, attempt) a slot, found by an open-addressing index on its
// hash; per winner a fixed-size row in a slice (attempts: event time in
// ms, score, flags, harness version, cycle; skill loads and judgments
// likewise), linked from its slot; the cell's strings (task ids, task
// inputs, the winners' event ids) packed in one byte arena, an event id
// without the cell id it starts with, as interned parts around its task
// id ("<cell>:attempt:<task>:1" in 2 to 4 bytes) or as packed hex (derived
// ids), always giving back the exact id that ties on event time compare;
// names (versions, skill names, judge models) interned per cell; the
// seen event ids as 64-bit hashes (seeded per process) in a sorted slice,
// merged from a small map; the last emission of each output as the
// 64-bit fingerprint of its encoding. A finished cell's slices are cut to
// size. Two distinct event ids of a cell share a hash with probability
// about n²/2^65 for its n events (3e-12 at 10^4): the later one would be
// taken for a redelivery and not counted; a correction whose encoding
// differs is missed with probability 2^-64. The seed is random per
// process, so no input can be made to collide, and a restart decides
// afresh.
// Forget keeps a cell whose outputs still wait for the baseline (they
// would be lost; the runtime asks again later). When the baseline cell is forgotten its
// task_id → score map is kept, frozen, since more evolved cells may start
// later; Done reports that the whole Pairer may be evicted after a grace
// period.
package score
