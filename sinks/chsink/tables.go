package chsink

import (
	"sort"
	"time"

	"github.com/harnessflow/harnessflow/schemas"
)

// meta is where a row came from: the Kafka coordinates of its message.
type meta struct {
	topic     string
	partition int32
	offset    int64
}

// version is the row's ReplacingMergeTree version: partition << 48 | offset.
// A redelivered message gets the same version; a later message about the same
// event_id on the same partition (all of a cell's events are) wins.
func (m meta) version() uint64 { return uint64(m.partition)<<48 | uint64(m.offset)&(1<<48-1) }

// row is one buffered event with its coordinates.
type row struct {
	ev schemas.Event
	m  meta
}

// table maps one event type's rows to a ClickHouse table's columns.
type table struct {
	name string
	cols []string
	// build returns one slice per column (in cols order) for rows, built fresh
	// each time: a failed insert is retried with a new batch built from the
	// sink's own buffer.
	build func(rows []row, ingested time.Time) []any
}

// colDef is one column of a table whose rows are events of type E.
type colDef[E any] struct {
	name  string
	build func(evs []E) any
}

func mk[E, T any](name string, f func(E) T) colDef[E] {
	return colDef[E]{name: name, build: func(evs []E) any {
		out := make([]T, len(evs))
		for i, e := range evs {
			out[i] = f(e)
		}
		return out
	}}
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// envelope returns the common leading columns of every event table.
func envelope[E schemas.Event]() []colDef[E] {
	return []colDef[E]{
		mk("event_id", func(e E) string { return e.Header().EventID }),
		mk("event_time", func(e E) time.Time { return e.Header().EventTime.UTC() }),
		mk("event_time_ms", func(e E) int64 { return e.Header().EventTime.UnixMilli() }),
		mk("project", func(e E) string { return e.Header().Project }),
		mk("source", func(e E) string { return e.Header().Source }),
	}
}

// newTable assembles a table from its event columns plus the envelope in
// front and the Kafka metadata columns behind.
func newTable[E schemas.Event](name string, cols ...colDef[E]) *table {
	all := append(envelope[E](), cols...)
	t := &table{name: name}
	for _, c := range all {
		t.cols = append(t.cols, c.name)
	}
	t.cols = append(t.cols, "_topic", "_partition", "_offset", "_version", "_ingested_at")
	t.build = func(rows []row, ingested time.Time) []any {
		evs := make([]E, len(rows))
		for i, r := range rows {
			evs[i] = r.ev.(E)
		}
		out := make([]any, 0, len(t.cols))
		for _, c := range all {
			out = append(out, c.build(evs))
		}
		topics := make([]string, len(rows))
		parts := make([]int32, len(rows))
		offs := make([]int64, len(rows))
		vers := make([]uint64, len(rows))
		ing := make([]time.Time, len(rows))
		for i, r := range rows {
			topics[i], parts[i], offs[i], vers[i], ing[i] = r.m.topic, r.m.partition, r.m.offset, r.m.version(), ingested
		}
		return append(out, topics, parts, offs, vers, ing)
	}
	return t
}

// cellRow lets cell_started and cell_finished share the cells table.
type cellRow struct {
	schemas.Envelope
	started  *schemas.CellStarted
	finished *schemas.CellFinished
}

func (c *cellRow) Type() schemas.Type { return "cell" }
func (c *cellRow) PartitionKey() string {
	if c.started != nil {
		return c.started.CellID
	}
	return c.finished.CellID
}

func asCellRow(ev schemas.Event) *cellRow {
	switch e := ev.(type) {
	case *schemas.CellStarted:
		return &cellRow{Envelope: e.Envelope, started: e}
	case *schemas.CellFinished:
		return &cellRow{Envelope: e.Envelope, finished: e}
	}
	return nil
}

// Tables by event type. Column lists are named in every INSERT (18.16 needs
// it) and must match infra/chddl/0001_tables.sql.
var (
	tCampaigns = newTable("campaigns",
		mk("campaign_id", func(e *schemas.CampaignDeclared) string { return e.CampaignID }),
		mk("benchmarks", func(e *schemas.CampaignDeclared) []string { return strs(e.Benchmarks) }),
		mk("anchor_agents", func(e *schemas.CampaignDeclared) []string { return strs(e.AnchorAgents) }),
		mk("anchor_evolvers", func(e *schemas.CampaignDeclared) []string { return strs(e.AnchorEvolvers) }),
		mk("label_epsilon", func(e *schemas.CampaignDeclared) float64 { return e.LabelEpsilon }),
		mk("label_alpha", func(e *schemas.CampaignDeclared) float64 { return e.LabelAlpha }),
	)
	tCells = newTable("cells",
		mk("kind", func(e *cellRow) string {
			if e.started != nil {
				return "started"
			}
			return "finished"
		}),
		mk("cell_id", func(e *cellRow) string { return e.PartitionKey() }),
		mk("campaign_id", func(e *cellRow) string {
			return startedOr(e, func(s *schemas.CellStarted) string { return s.CampaignID })
		}),
		mk("benchmark", func(e *cellRow) string {
			return startedOr(e, func(s *schemas.CellStarted) string { return s.Benchmark })
		}),
		mk("agent_model", func(e *cellRow) string {
			return startedOr(e, func(s *schemas.CellStarted) string { return s.AgentModel })
		}),
		mk("evolver_model", func(e *cellRow) string {
			return startedOr(e, func(s *schemas.CellStarted) string { return s.EvolverModel })
		}),
		mk("seed", func(e *cellRow) int32 { return startedOr(e, func(s *schemas.CellStarted) int32 { return s.Seed }) }),
		mk("route", func(e *cellRow) string { return startedOr(e, func(s *schemas.CellStarted) string { return s.Route }) }),
		mk("h0_version", func(e *cellRow) string {
			return startedOr(e, func(s *schemas.CellStarted) string { return s.H0Version })
		}),
		mk("batch_size", func(e *cellRow) int32 { return startedOr(e, func(s *schemas.CellStarted) int32 { return s.BatchSize }) }),
		mk("max_attempts", func(e *cellRow) int32 {
			return startedOr(e, func(s *schemas.CellStarted) int32 { return s.MaxAttempts })
		}),
		mk("task_count", func(e *cellRow) int32 { return startedOr(e, func(s *schemas.CellStarted) int32 { return s.TaskCount }) }),
		mk("status", func(e *cellRow) string {
			if e.finished != nil {
				return e.finished.Status
			}
			return ""
		}),
		mk("attempts", func(e *cellRow) int64 {
			if e.finished != nil {
				return e.finished.Attempts
			}
			return 0
		}),
	)
	tAttempts = newTable("task_attempts",
		mk("cell_id", func(e *schemas.TaskAttempt) string { return e.CellID }),
		mk("task_id", func(e *schemas.TaskAttempt) string { return e.TaskID }),
		mk("stream_idx", func(e *schemas.TaskAttempt) int32 { return e.StreamIdx }),
		mk("cycle", func(e *schemas.TaskAttempt) int32 { return e.Cycle }),
		mk("attempt", func(e *schemas.TaskAttempt) int32 { return e.Attempt }),
		mk("harness_version", func(e *schemas.TaskAttempt) string { return e.HarnessVersion }),
		mk("status", func(e *schemas.TaskAttempt) string { return e.Status }),
		mk("score", func(e *schemas.TaskAttempt) float64 { return e.Score }),
		mk("success", func(e *schemas.TaskAttempt) uint8 { return b2u(e.Success) }),
		mk("final", func(e *schemas.TaskAttempt) uint8 { return b2u(e.Final) }),
		mk("skills_available", func(e *schemas.TaskAttempt) int32 { return e.SkillsAvailable }),
		mk("skills_loaded", func(e *schemas.TaskAttempt) []string { return strs(e.SkillsLoaded) }),
		mk("input_tokens", func(e *schemas.TaskAttempt) int64 { return e.InputTokens }),
		mk("output_tokens", func(e *schemas.TaskAttempt) int64 { return e.OutputTokens }),
		mk("duration_ms", func(e *schemas.TaskAttempt) int64 { return e.DurationMs }),
		mk("task_input", func(e *schemas.TaskAttempt) string { return e.TaskInput }),
	)
	tSkillEvents = newTable("skill_events",
		mk("cell_id", func(e *schemas.SkillEvent) string { return e.CellID }),
		mk("task_id", func(e *schemas.SkillEvent) string { return e.TaskID }),
		mk("attempt", func(e *schemas.SkillEvent) int32 { return e.Attempt }),
		mk("turn", func(e *schemas.SkillEvent) int32 { return e.Turn }),
		mk("tool", func(e *schemas.SkillEvent) string { return e.Tool }),
		mk("skill_name", func(e *schemas.SkillEvent) string { return e.SkillName }),
		mk("status", func(e *schemas.SkillEvent) string { return e.Status }),
	)
	tUpdates = newTable("harness_updates",
		mk("cell_id", func(e *schemas.HarnessUpdate) string { return e.CellID }),
		mk("update_id", func(e *schemas.HarnessUpdate) string { return e.UpdateID }),
		mk("cycle", func(e *schemas.HarnessUpdate) int32 { return e.Cycle }),
		mk("from_version", func(e *schemas.HarnessUpdate) string { return e.FromVersion }),
		mk("to_version", func(e *schemas.HarnessUpdate) string { return e.ToVersion }),
		mk("evolver_model", func(e *schemas.HarnessUpdate) string { return e.EvolverModel }),
		mk("artifact_kind", func(e *schemas.HarnessUpdate) []string {
			return artifacts(e, func(a schemas.Artifact) string { return a.Kind })
		}),
		mk("artifact_name", func(e *schemas.HarnessUpdate) []string {
			return artifacts(e, func(a schemas.Artifact) string { return a.Name })
		}),
		mk("artifact_op", func(e *schemas.HarnessUpdate) []string {
			return artifacts(e, func(a schemas.Artifact) string { return a.Op })
		}),
		mk("artifact_content", func(e *schemas.HarnessUpdate) []string {
			return artifacts(e, func(a schemas.Artifact) string { return a.Content })
		}),
		mk("artifact_sha256", func(e *schemas.HarnessUpdate) []string {
			return artifacts(e, func(a schemas.Artifact) string { return a.ContentSHA256 })
		}),
		mk("evidence_task_ids", func(e *schemas.HarnessUpdate) []string { return strs(e.EvidenceTaskIDs) }),
		mk("evidence_summary", func(e *schemas.HarnessUpdate) string { return e.EvidenceSummary }),
		mk("accepted", func(e *schemas.HarnessUpdate) uint8 { return b2u(e.Accepted) }),
		mk("rolled_back", func(e *schemas.HarnessUpdate) uint8 { return b2u(e.RolledBack) }),
	)
	tJudgments = newTable("adherence_judgments",
		mk("cell_id", func(e *schemas.AdherenceJudgment) string { return e.CellID }),
		mk("task_id", func(e *schemas.AdherenceJudgment) string { return e.TaskID }),
		mk("attempt", func(e *schemas.AdherenceJudgment) int32 { return e.Attempt }),
		mk("skill_name", func(e *schemas.AdherenceJudgment) string { return e.SkillName }),
		mk("judge_model", func(e *schemas.AdherenceJudgment) string { return e.JudgeModel }),
		mk("followed", func(e *schemas.AdherenceJudgment) int32 { return e.Followed }),
		mk("violated_commission", func(e *schemas.AdherenceJudgment) int32 { return e.ViolatedCommission }),
		mk("violated_omission", func(e *schemas.AdherenceJudgment) int32 { return e.ViolatedOmission }),
		mk("required_unobserved", func(e *schemas.AdherenceJudgment) int32 { return e.RequiredUnobserved }),
		mk("not_applicable", func(e *schemas.AdherenceJudgment) int32 { return e.NotApplicable }),
		mk("insufficient_evidence", func(e *schemas.AdherenceJudgment) int32 { return e.InsufficientEvidence }),
		mk("harness_loaded", func(e *schemas.AdherenceJudgment) *float64 { return e.HarnessLoaded }),
		mk("first_action", func(e *schemas.AdherenceJudgment) *float64 { return e.FirstAction }),
		mk("midpoint", func(e *schemas.AdherenceJudgment) *float64 { return e.Midpoint }),
		mk("pre_final", func(e *schemas.AdherenceJudgment) *float64 { return e.PreFinal }),
		mk("final_validation", func(e *schemas.AdherenceJudgment) *float64 { return e.FinalValidation }),
	)
	tSamples = newTable("labeled_samples",
		mk("sample_id", func(e *schemas.LabeledSample) string { return e.SampleID }),
		mk("update_id", func(e *schemas.LabeledSample) string { return e.UpdateID }),
		mk("cell_id", func(e *schemas.LabeledSample) string { return e.CellID }),
		mk("campaign_id", func(e *schemas.LabeledSample) string { return e.CampaignID }),
		mk("benchmark", func(e *schemas.LabeledSample) string { return e.Benchmark }),
		mk("agent_model", func(e *schemas.LabeledSample) string { return e.AgentModel }),
		mk("evolver_model", func(e *schemas.LabeledSample) string { return e.EvolverModel }),
		mk("cycle", func(e *schemas.LabeledSample) int32 { return e.Cycle }),
		mk("query", func(e *schemas.LabeledSample) string { return e.Query }),
		mk("update", func(e *schemas.LabeledSample) string { return e.Update }),
		mk("artifact_kind", func(e *schemas.LabeledSample) string { return e.ArtifactKind }),
		mk("effect", func(e *schemas.LabeledSample) float64 { return e.Effect }),
		mk("label", func(e *schemas.LabeledSample) string { return e.Label }),
		mk("n_before", func(e *schemas.LabeledSample) int32 { return e.NBefore }),
		mk("n_after", func(e *schemas.LabeledSample) int32 { return e.NAfter }),
		mk("ci_low", func(e *schemas.LabeledSample) float64 { return e.CILow }),
		mk("ci_high", func(e *schemas.LabeledSample) float64 { return e.CIHigh }),
		mk("p_value", func(e *schemas.LabeledSample) float64 { return e.PValue }),
		mk("reason", func(e *schemas.LabeledSample) string { return e.Reason }),
		mk("harness_version", func(e *schemas.LabeledSample) string { return e.HarnessVersion }),
		mk("harness_version_index", func(e *schemas.LabeledSample) int32 { return e.HarnessVersionIndex }),
		mk("seed", func(e *schemas.LabeledSample) int32 { return e.Seed }),
		mk("route", func(e *schemas.LabeledSample) string { return e.Route }),
		mk("produced_at", func(e *schemas.LabeledSample) time.Time { return e.ProducedAt.UTC() }),
		mk("produced_at_ms", func(e *schemas.LabeledSample) int64 { return e.ProducedAt.UnixMilli() }),
	)
	tRounds = newTable("round_metrics",
		mk("cell_id", func(e *schemas.RoundMetrics) string { return e.CellID }),
		mk("campaign_id", func(e *schemas.RoundMetrics) string { return e.CampaignID }),
		mk("benchmark", func(e *schemas.RoundMetrics) string { return e.Benchmark }),
		mk("agent_model", func(e *schemas.RoundMetrics) string { return e.AgentModel }),
		mk("evolver_model", func(e *schemas.RoundMetrics) string { return e.EvolverModel }),
		mk("seed", func(e *schemas.RoundMetrics) int32 { return e.Seed }),
		mk("cycle", func(e *schemas.RoundMetrics) int32 { return e.Cycle }),
		mk("n_tasks", func(e *schemas.RoundMetrics) int32 { return e.NTasks }),
		mk("pass_rate", func(e *schemas.RoundMetrics) float64 { return e.PassRate }),
		mk("mean_score", func(e *schemas.RoundMetrics) float64 { return e.MeanScore }),
		mk("lift_vs_baseline", func(e *schemas.RoundMetrics) *float64 { return e.LiftVsBaseline }),
		mk("skill_load_rate", func(e *schemas.RoundMetrics) *float64 { return e.SkillLoadRate }),
		mk("loaded_pass_rate", func(e *schemas.RoundMetrics) *float64 { return e.LoadedPassRate }),
		mk("adherence_loaded", func(e *schemas.RoundMetrics) *float64 { return e.AdherenceLoaded }),
		mk("adherence_final", func(e *schemas.RoundMetrics) *float64 { return e.AdherenceFinal }),
	)
	tRejected = newTable("rejected_events",
		mk("stage", func(e *schemas.Rejected) string { return e.Stage }),
		mk("reason_code", func(e *schemas.Rejected) string { return e.ReasonCode }),
		mk("message", func(e *schemas.Rejected) string { return e.Message }),
		mk("source_topic", func(e *schemas.Rejected) string { return e.SourceTopic }),
		mk("source_partition", func(e *schemas.Rejected) int32 { return e.Partition }),
		mk("source_offset", func(e *schemas.Rejected) int64 { return e.Offset }),
		mk("payload", func(e *schemas.Rejected) string { return string(e.Payload) }),
		mk("source_event_id", func(e *schemas.Rejected) string { return refusedEventID(e) }),
	)
	tCheckpoints = newTable("checkpoints",
		mk("model_version", func(e *schemas.CheckpointPublished) string { return e.ModelVersion }),
		mk("step", func(e *schemas.CheckpointPublished) int64 { return e.Step }),
		mk("samples_trained", func(e *schemas.CheckpointPublished) int64 { return e.SamplesTrained }),
		mk("offset_topic", func(e *schemas.CheckpointPublished) []string {
			out := make([]string, len(e.Offsets))
			for i, o := range e.Offsets {
				out[i] = o.Topic
			}
			return out
		}),
		mk("offset_partition", func(e *schemas.CheckpointPublished) []int32 {
			out := make([]int32, len(e.Offsets))
			for i, o := range e.Offsets {
				out[i] = o.Partition
			}
			return out
		}),
		mk("offset_offset", func(e *schemas.CheckpointPublished) []int64 {
			out := make([]int64, len(e.Offsets))
			for i, o := range e.Offsets {
				out[i] = o.Offset
			}
			return out
		}),
		mk("metric_name", func(e *schemas.CheckpointPublished) []string { n, _ := metrics(e); return n }),
		mk("metric_value", func(e *schemas.CheckpointPublished) []float64 { _, v := metrics(e); return v }),
	)
)

// tables lists every table the sink writes, in a fixed order.
var tables = []*table{tCampaigns, tCells, tAttempts, tSkillEvents, tUpdates, tJudgments, tSamples, tRounds, tRejected, tCheckpoints}

// tableFor returns the table for ev and the event to buffer (cell events are
// wrapped so that both kinds share the cells table), or nil for an event type
// the sink does not know.
func tableFor(ev schemas.Event) (*table, schemas.Event) {
	switch ev.(type) {
	case *schemas.CampaignDeclared:
		return tCampaigns, ev
	case *schemas.CellStarted, *schemas.CellFinished:
		return tCells, asCellRow(ev)
	case *schemas.TaskAttempt:
		return tAttempts, ev
	case *schemas.SkillEvent:
		return tSkillEvents, ev
	case *schemas.HarnessUpdate:
		return tUpdates, ev
	case *schemas.AdherenceJudgment:
		return tJudgments, ev
	case *schemas.LabeledSample:
		return tSamples, ev
	case *schemas.RoundMetrics:
		return tRounds, ev
	case *schemas.Rejected:
		return tRejected, ev
	case *schemas.CheckpointPublished:
		return tCheckpoints, ev
	}
	return nil, nil
}

func startedOr[T any](e *cellRow, f func(*schemas.CellStarted) T) T {
	if e.started != nil {
		return f(e.started)
	}
	var zero T
	return zero
}

// strs returns s, or an empty non-nil slice (clickhouse-go wants a slice).
func strs(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func artifacts(e *schemas.HarnessUpdate, f func(schemas.Artifact) string) []string {
	out := make([]string, len(e.Artifacts))
	for i, a := range e.Artifacts {
		out[i] = f(a)
	}
	return out
}

// metrics returns a checkpoint's metrics as parallel arrays sorted by name.
func metrics(e *schemas.CheckpointPublished) ([]string, []float64) {
	names := make([]string, 0, len(e.Metrics))
	for k := range e.Metrics {
		names = append(names, k)
	}
	sort.Strings(names)
	vals := make([]float64, len(names))
	for i, k := range names {
		vals[i] = e.Metrics[k]
	}
	return names, vals
}
