// Package processors is harnessflow's streaming processor runtime
// (docs/design.md §4): `harnessflow process` and `harnessflow replay`. It validates
// raw events in stages, dead-letters bad input, re-keys admitted events by
// pairing key, and drives processors/score, which pairs cells with their
// baseline and derives labeled samples and round metrics.
//
// # Two stages, two consumer groups
//
// Stage A (group Config.Group, default "hf-processors") reads the raw cell
// topics hf.cells, hf.updates, hf.attempts, hf.skill-events and
// hf.judgments. Stage B (group Config.Group+"-pair") reads hf.outcomes. Each
// stage scales by its own group. Every instance also reads hf.campaigns whole
// (no group: a global table of label parameters); stage B starts only after
// it has caught up with hf.campaigns' end offsets. An invalid declaration is
// dead-lettered once: the group Config.Group+"-campaigns" is never joined,
// its committed offsets only record up to where that was done.
//
// # Co-partitioning
//
// The raw cell topics are all keyed by cell_id and MUST keep equal partition
// counts (infra/kafkatopics; Run refuses otherwise with ErrTopicLayout): then a
// cell's events sit on the same partition number p of each topic.
// CoPartitionBalancer assigns partition numbers, not topic partitions, so one
// member owns partition p of all five topics and sees every event of its
// cells.
//
// # Projects
//
// A cell is identified by (project, cell_id), never by cell_id alone: stage
// A's cell state, pending buffer and duplicate checks are keyed by both, the
// pairing key starts with the project (score.PairingKey, the project escaped
// so that no '/' in a name can make two projects share a key), and derived ids
// (schemas.DeriveEventID, samples' and round metrics' ids) hash the project.
// Two projects that use the same cell id (on the same partition, since the
// Kafka key is the cell id) are two cells whose events never meet.
//
// # Stage A: a deterministic merge, then validation
//
// Per assigned partition number, one goroutine merges the five topic
// partitions by (event_time, or the message timestamp when the event does
// not decode; event-type rank; topic rank; offset): cell_started sorts
// before same-millisecond updates, attempts, skill events and judgments,
// cell_finished after them. A message is merged only when every other
// stream has a buffered message or is known to be at its high watermark; a
// message is merged past a stream at its end only when it is not newer than
// that stream's last message or a fetch sent Config.MergeIdle after the
// message arrived found that stream still at its end (a producer that writes
// one topic after another has had that long; under a backlog a message
// waits in the buffer long after the sibling's previous look, which proves
// nothing). With the complete log (replay, rebuilds, backlogs) the merge
// order is a function of the log alone, so validation decisions and the
// order of a cell's events in hf.outcomes are deterministic; on a live
// stream they are as long as producers' writes of a cell reach the broker
// within MergeIdle of each other. The Go SDK stamps event_time and the
// message timestamp at emit and retries a partition's batch in place, so a
// cell's events keep their order through transient broker errors.
//
// An admissible cell_finished is held Config.FinishHold (on the log clock,
// and on the wall clock while the partition is idle: from when it was read,
// or from the log time it was held at, whichever ends first, so a backlog
// that drains does not hold its last finishes again) before it is admitted;
// only that cell waits, not the partition. Updates, skill events and
// judgments of the cell that reach the log late (a producer's retries, or a
// sibling stream whose head another producer stamped later) are admitted
// before the finish, so a last-round update keeps its sample. Stage A
// commits hf.cells only up to the oldest held finish, so Lag counts a held
// finish as unprocessed, and a crash re-holds it from the log; a clean stop
// admits what is held; Config.StopWhenCaughtUp admits it once the partition
// is at its end.
//
// Validation, in stages, each rejection a schemas.Rejected in hf.dlq (key:
// source topic; event_id: for an input that decoded to an event with an
// id, derived from the project, that event id, the stage and the reason
// code (eventDeadLetterID), so every copy of one event refused for one
// reason (a retried export, a producer's resend, a replay) has one id and
// rejected_events keeps one row of it; for an input that did not decode,
// derived from the source topic, partition and offset (deadLetterID; the
// coordinates-only id of earlier versions). Either way one project's dead
// letter never has another's id; event_time: the message timestamp; payload capped at
// Config.DLQPayloadCap; message: why, after the entity the input is about,
// from the event or the payload's readable prefix, "update u-17 (cell c-3):
// from_version ..." (schemas.NewRejected)):
//
//   - limit: the message is over Limits.Event (payload_too_large); a
//     cell_started past its project's Config.MaxOpenCells unfinished cells
//     on the partition (open_cells_cap, and the events that waited for it);
//     an event that would take its project's state on the partition past
//     Config.MaxStateBytes (state_bytes_cap; never a cell_finished); an
//     unfinished cell with no admitted event for Config.CellIdle
//     (cell_idle, see below); an event of a finished cell that was
//     forgotten after its retention window for late events
//     (late_beyond_window, see "Late events" below);
//   - decode: the value does not decode (malformed, unknown_fingerprint,
//     unknown_type); a Confluent-framed value whose schema id the schema
//     registry does not have (unknown_schema_id), or read without
//     Config.SchemaRegistry (schema_registry). A registry that cannot be
//     asked dead-letters nothing: the fetch is tried again, then the
//     partition's work restarts from the committed offsets;
//   - syntax: the type belongs on another topic (wrong_topic); schemas.Validate
//     (its FieldError codes: missing_field, bad_enum, out_of_range for a NaN
//     score, too_large, ...); per artifact of a harness_update that is not a
//     removal: content_sha256 must be the sha256 of the content
//     (content_hash_mismatch), a skill must start with YAML front matter
//     ("---" line, YAML, "---" line) holding non-empty string name and
//     description (bad_front_matter), a tool artifact must be a tool
//     registry: a YAML (or JSON) mapping with a non-empty "tools" list whose
//     entries are mappings with a non-empty string "name"
//     (bad_tool_registry);
//   - semantic: the cell was started (else the event waits, see below, then
//     unknown_cell); a second cell_started or cell_finished with another
//     event id (duplicate_cell); an update's from_version is the cell's
//     current version (version_chain), none of its artifacts' content hashes
//     is already in the cell (duplicate_content), it names evidence
//     (no_evidence); an attempt's harness_version is h0, the to_version of
//     an accepted update, or empty (the cell's current version, as the
//     scorer reads it) (else it waits for that update until the cell
//     finishes or the pending timeout passes, then unknown_version).
//
// A redelivered raw event (same event_id) is skipped for cell_started,
// cell_finished and updates; other duplicates are passed on and deduplicated
// by the scorer and the sinks. An update that is accepted adds its
// to_version to the known versions and, unless rolled back, makes it current.
// An update whose update_id the cell already admitted (its natural key,
// re-sent under a new event id) is admitted unchecked and changes no
// version: the scorer keeps one of the copies (processors/score, "Natural
// keys and one winner": every event type's natural key, and the winner,
// the greatest (event_time ms, event_id), as in the views). A second
// cell_started or cell_finished under a new event id stays duplicate_cell:
// the cell's identity (its pairing key) is taken from the first.
//
// # Late events
//
// Derived figures are a function of the events, not of their arrival
// order. A late event — an attempt, skill event, judgment or update after
// its round closed or after its cell's cell_finished, a cycle that arrives
// rounds late — is admitted and counted: the scorer emits the round metrics
// and samples it changes again, with the same event ids (a correction;
// ReplacingMergeTree keeps the last, its version being the Kafka
// coordinates). The retention window for late events bounds the state a
// finished cell keeps: stage A keeps a finished cell Config.Grace (on the
// log clock or the wall clock, whichever passes first) and then remembers
// its id (for Config.CellIdle, at most four times Config.MaxOpenCells ids
// per project and partition, oldest forgotten first); stage B keeps a finished cell's
// inputs twice as long, since its clocks may run ahead of stage A's. Both
// charge what they keep against Config.MaxStateBytes per project and
// partition: stage A charges a finished cell's late events until it evicts
// the cell (past the cap they are refused state_bytes_cap); stage B charges
// each finished cell's inputs, late events included, and past the cap
// forgets the project's oldest finished cells before their window ends.
// Both charge a finished cell's event what the scorer keeps of it
// (keptCharge): the scorer keeps a cell's inputs compact (processors/score,
// "Memory"), about 70 to 100 bytes of live heap per event of a finished
// cell in both stages together (TestRetainedFinishedStateIsCompact), so a
// task_attempt is charged 80 bytes plus its event id, task id and task
// input, a skill_event 64 and a judgment 80 bytes plus their ids and
// names, a cell_finished 16 bytes, other events as while open.
// Stage B never forgets a cell whose outputs still wait for the baseline
// (it asks again a window later). An
// event of a cell past its window is refused: stage limit, reason
// late_beyond_window, a dead letter at the raw message's coordinates with
// the event as payload when stage A refuses it (the usual case), at the
// hf.outcomes record's when stage B does (its clocks ran ahead, its cap
// forgot the cell early, or its pairer was evicted or aged out: stage B's
// buffered events whose cell it no longer holds are refused so when swept
// or aged out, or at once when that buffer holds Config.PendingMax
// events). Either way rejected_events holds the
// refused event (the sink reads its id from the payload), and the views
// leave it out. A cell whose id stage A no longer remembers is
// unknown_cell ("no cell_started ... reached the processors").
//
// Admitted events go to hf.outcomes unchanged (same bytes), keyed by the
// pairing key "project/campaign_id/benchmark/agent_model/seed", so a cell's
// events keep their merged order there, cell_started first. The events of
// one key within one batch travel in one record, in order, each with its
// raw message's timestamp (at most Config.OutcomeBatch events and 1 MiB per
// record; outbatch.go has the framing), so both stages pay Kafka's
// per-record work once per record; with OutcomeBatch 1 each event is a
// record of its own, unframed, as before batching. Stage B reads both.
//
// Pending events (before their cell_started, or before the update that
// introduces their version) are bounded per partition by Config.PendingMax,
// shared fairly by project (when full, the oldest event of the project that
// holds the most waiting events is dead-lettered: one project's flood
// evicts only its own events), and by Config.PendingTimeout,
// measured on the partition's log clock (largest message timestamp merged)
// and, while the partition is idle, on the wall clock. The log clock makes
// the outcome a function of the log; the wall clock ends waits at the head
// of a quiet stream.
//
// # Stage B
//
// Per assigned hf.outcomes partition, one score.Pairer per pairing key,
// created with the campaign's label_epsilon and label_alpha (re-applied when
// a declaration arrives or changes) and Config.MinPairs, Config.Lambda.
// Events of a cell whose cell_started has not reached the Pairer are held
// until it does (those of a key whose pairer was evicted are refused
// late_beyond_window when swept, Config.Grace later, or at once when
// Config.PendingMax such events wait). A cell's cell_finished starts its
// late window: 2 × Config.Grace later (earlier past the cap on finished
// state, see "Late events") the Pairer forgets the cell (Pairer.Forget),
// and its later events are refused late_beyond_window. Outputs go to hf.samples and hf.round-metrics (key cell_id),
// with the ids the scorer derives. A batched record is read as its events,
// all at the record's offset: the offset is consumed (committed) only with
// the record's last event, so a commit that falls inside a record leaves it
// to be read again whole (TestCommitInsideBatchedRecordLosesNothing), and
// a dead letter of a later event of a record gets an id apart from the
// first's (the coordinates it hashes are the record's). A record whose
// framing does not parse is dead-lettered whole (stage decode, malformed).
// An hf.outcomes event whose exact bytes
// this process's stage A admitted moments before is not decoded a second
// time: stage A hands the decoded event over in a small bounded cache
// (evCache, byte-for-byte match; any other message is decoded as usual).
// The cache holds up to 64k events and 16 MiB of their bytes (events over
// 2 KiB are not cached): how far stage B may trail stage A and still skip
// the decode.
//
// # Delivery, state and rebalances
//
// For each batch (at most Config.BatchSize merged messages), outputs are
// written synchronously (RequireAll acks, retried with backoff bounded by
// Config.RetryMaxElapsed; failure stops Run with ErrWrite), and only then
// are the batch's offsets committed through the kafka-go Generation. A
// batch's outputs go out as one Produce request per topic partition (split
// at 4 MiB), the partitions in parallel, in the batch's order within each;
// a message goes to the partition kafka-go's Writer with its Hash balancer
// would pick (fnv-1a of the key over the partition count, read from the
// cluster at most every 5s and after a failed write), so keys stay where
// earlier versions put them. The batch is already the unit of work: a
// kafka.Writer would only add a metadata look-up per call and a goroutine,
// a timer and a BatchSize-long slice per partition batch. A generation's
// partitions commit through one coordinator connection, a request at a
// time; commits that partitions submit while one is in flight go out
// together as the next request (committer.go), so a flush waits for at most
// two commit round trips however many partitions the member owns.
//
// State is rebuilt from the log: when partition p is assigned, its streams
// are read from the log start; messages below the committed offset are
// processed without emitting, and outputs are emitted from the committed
// offset on. Stage A's merge order is not the same in every incarnation (it
// merges past a sibling topic that is at its end, so it depends on when
// fetches return), so two rules keep a restart from losing an output:
// stage A commits each topic only up to its oldest message still waiting in
// memory (a pending event, a held cell_finished), so whatever waited is new
// to the next incarnation; and an event released from the pending buffer
// is emitted when it or the message that releases it is new (an attempt
// read after the commit point, released by an update before it, is
// written). Both are pinned by TestRestartInAnotherMergeOrderLosesNothing,
// and the chaos campaign's broker restart found them. Derived ids are
// deterministic, so what is re-emitted after a crash or rebalance is
// byte-identical and deduplicated downstream; a live-mode wall-clock
// timeout is the one decision that can differ after a restart (a rebuilt
// pending event waits again).
//
// All reads of a partition happen in goroutines started by
// kafka.Generation.Start with its context; when the generation ends
// (rebalance, lost session) they stop and the partition's state is dropped,
// and commits are bound to the generation, so nothing from a partition this
// member lost is processed or committed (kafka-go#1398, where a Reader hands
// out messages of revoked partitions, cannot happen).
//
// Finished cells (stage A) are evicted Config.Grace after they finished,
// finished cells' inputs and done Pairers (stage B) 2 × Config.Grace after,
// on the log clock or the wall clock, whichever passes first, so memory
// stays flat on an endless stream; a rebuild re-reads finished cells and evicts them as it passes.
// A late event for an evicted cell is dead-lettered late_beyond_window
// (see "Late events").
//
// State is bounded by design, not by numbers a client sends: no map or
// slice is sized from an event's field (task_count, batch_size); per
// project and partition, stage A holds at most Config.MaxOpenCells
// unfinished cells and Config.MaxStateBytes of state (an estimate: 8 KiB
// per cell for its fixed part in both stages; each event admitted while
// its cell is open, its encoded size plus 128 bytes; each event of a
// finished cell, what the scorer keeps of it, see "Late events"; a
// finished cell keeps its fixed part, its updates and its late events
// until evicted), dead-lettering what goes past either (stage limit);
// stage B caps its finished cells' state per project alike (see "Late
// events"). A finished cell's state in stage A is compact too: the
// versions, content hashes and update ids that late events are checked
// against are kept as sorted 128-bit SHA-256 digests (strSet). An unfinished cell with no admitted event for Config.CellIdle, on
// the log clock or the wall clock, ages out: stage A drops it with a
// limit/cell_idle dead letter at its cell_started's coordinates, stage B
// drops a pairing key whose pairer saw no event for as long (checked every
// sixteenth of CellIdle of log time, and on idle ticks); both are counted
// (hf_process_aged_out_cells_total, hf_process_aged_out_pairers_total) and
// logged once per batch. A rebuild from the log applies the same bounds, so
// a restart holds the bounded state again (BenchmarkCellAttack measures it
// under issue 35's attack).
//
// # Replay: a new output generation
//
// `harnessflow replay` runs the same processor under fresh groups
// <group>-gen<N> and <group>-gen<N>-pair (N: --generation, default the unix
// time), which start at offset 0 of the raw topics. The derived events it
// writes carry the same ids and bytes as before, so idempotent sinks keep
// one copy; with --until-caught-up (Config.StopWhenCaughtUp) it exits once
// both stages committed the raw topics' end offsets read at its start (Lag).
// Raw topic retention bounds what a replay, and a rebuild, can read.
package processors
