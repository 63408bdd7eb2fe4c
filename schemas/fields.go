package schemas

import (
	"time"
)

// This file holds the one table that drives every codec of the package: per
// event type, its fields in Avro schema order (after the envelope), with the
// Go accessor, the JSON rules (required, defaults) and the Validate rules
// (enum symbols, ranges, caps). The table is checked against the embedded
// .avsc files at init (see avro.go), so a field cannot drift from its schema.

type kind uint8

const (
	kString     kind = iota // Avro string
	kNullString             // Avro ["null","string"]; "" <-> null
	kEnum                   // Avro enum, Go string
	kInt                    // Avro int, Go int32
	kLong                   // Avro long, Go int64
	kDouble                 // Avro double
	kNullDouble             // Avro ["null","double"], Go *float64
	kBool                   // Avro boolean
	kTime                   // Avro long timestamp-millis, Go time.Time
	kStrings                // Avro array<string>
	kArtifacts              // Avro array<Artifact>
	kOffsets                // Avro array<TopicOffset>
	kMetrics                // Avro map<double>
	kBytes                  // Avro bytes (JSON: base64)
)

// rule is a numeric range rule checked by Validate.
type rule uint8

const (
	rNone    rule = iota
	rNonNeg       // integer >= 0
	rPos          // integer >= 1
	rMinus1       // integer >= -1 (Kafka's "none")
	rUnit         // [0,1]
	rSigned       // [-1,1]
	rPercent      // [0,100]
	rPP           // [-100,100] (percentage points)
	rEpsilon      // [0,1)
	rAlpha        // (0,1)
)

type field struct {
	name       string
	kind       kind
	req        bool // JSON: must be present; typed strings: must be non-empty
	prose      bool // free text: not capped as an id or a name (caps.go)
	symbols    []string
	rule       rule
	capOf      func(Limits) int // text cap, nil = only the whole-event cap
	hasDef     bool
	def        float64 // default of a double absent from JSON or a writer schema
	absentTrue bool    // a boolean absent from JSON is true (Go's and Avro's zero stays false)

	str  func(Event) *string
	i32  func(Event) *int32
	i64  func(Event) *int64
	f64  func(Event) *float64
	pf64 func(Event) **float64
	bl   func(Event) *bool
	tm   func(Event) *time.Time
	strs func(Event) *[]string
	arts func(Event) *[]Artifact
	offs func(Event) *[]TopicOffset
	mets func(Event) *map[string]float64
	byts func(Event) *[]byte
}

type opt func(*field)

var required opt = func(f *field) { f.req = true }

func oneOf(symbols ...string) opt {
	return func(f *field) { f.kind, f.symbols, f.req = kEnum, symbols, true }
}
func ranged(r rule) opt             { return func(f *field) { f.rule = r } }
func capped(c func(Limits) int) opt { return func(f *field) { f.capOf = c } }
func defaults(v float64) opt        { return func(f *field) { f.hasDef, f.def = true, v } }
func nullable() opt                 { return func(f *field) { f.kind = kNullString } }

// trueWhenAbsent makes a boolean absent from the JSON form true.
var trueWhenAbsent opt = func(f *field) { f.absentTrue = true }

// prose marks a string field as free text, capped by the whole-event cap
// only; every other string field is an id or a name (caps.go).
var prose opt = func(f *field) { f.prose = true }

func build(f field, opts []opt) field {
	for _, o := range opts {
		o(&f)
	}
	return f
}

func as[T any](e Event) *T { return any(e).(*T) }

func fStr[T any](name string, get func(*T) *string, opts ...opt) field {
	return build(field{name: name, kind: kString, str: func(e Event) *string { return get(as[T](e)) }}, opts)
}
func fInt[T any](name string, get func(*T) *int32, opts ...opt) field {
	return build(field{name: name, kind: kInt, i32: func(e Event) *int32 { return get(as[T](e)) }}, opts)
}
func fLong[T any](name string, get func(*T) *int64, opts ...opt) field {
	return build(field{name: name, kind: kLong, i64: func(e Event) *int64 { return get(as[T](e)) }}, opts)
}
func fDouble[T any](name string, get func(*T) *float64, opts ...opt) field {
	return build(field{name: name, kind: kDouble, f64: func(e Event) *float64 { return get(as[T](e)) }}, opts)
}
func fNullDouble[T any](name string, get func(*T) **float64, opts ...opt) field {
	return build(field{name: name, kind: kNullDouble, pf64: func(e Event) **float64 { return get(as[T](e)) }}, opts)
}
func fBool[T any](name string, get func(*T) *bool, opts ...opt) field {
	return build(field{name: name, kind: kBool, bl: func(e Event) *bool { return get(as[T](e)) }}, opts)
}
func fTime[T any](name string, get func(*T) *time.Time, opts ...opt) field {
	return build(field{name: name, kind: kTime, tm: func(e Event) *time.Time { return get(as[T](e)) }}, opts)
}
func fStrings[T any](name string, get func(*T) *[]string, opts ...opt) field {
	return build(field{name: name, kind: kStrings, strs: func(e Event) *[]string { return get(as[T](e)) }}, opts)
}

// typeInfo describes one event type.
type typeInfo struct {
	typ Type
	// record is the Avro record's simple name (namespace avroNamespace).
	record string
	// idFields are the identifying fields hashed by DeriveEventID, in order.
	idFields []string
	fields   []field
	byName   map[string]int
	// current is the newest schema version of the type.
	current *schemaVersion
}

func newInfo(t Type, record string, idFields []string, fields ...field) *typeInfo {
	ti := &typeInfo{typ: t, record: record, idFields: idFields, fields: fields, byName: map[string]int{}}
	for i, f := range fields {
		ti.byName[f.name] = i
	}
	return ti
}

// The envelope's fields, first in every record.
var envelopeFields = []string{"event_id", "event_time", "project", "source"}

var (
	routes        = []string{RouteBaseline, RouteInSitu, RouteSplitTrain, RouteSplitTest, RouteProduction}
	attemptStatus = []string{StatusOK, StatusError, StatusInterrupted, StatusTimeout}
	skillTools    = []string{ToolListSkills, ToolLoadSkill, ToolLoadSkillReference, ToolReadSkill}
	skillStatus   = []string{SkillLoaded, SkillNotFound, SkillRejectedMultikey}
	artifactKinds = []string{KindPrompt, KindSkill, KindMemory, KindTool}
	artifactOps   = []string{OpAdd, OpModify, OpRemove}
	cellStatus    = []string{CellCompleted, CellFailed, CellAborted}
	labels        = []string{LabelNegative, LabelNeutral, LabelPositive}
	stages        = []string{StageDecode, StageSyntax, StageSemantic, StageReference, StageLimit}
)

func capArtifact(l Limits) int  { return l.ArtifactContent }
func capTaskInput(l Limits) int { return l.TaskInput }
func capPayload(l Limits) int   { return l.Payload }

// infos is indexed by Type. init fills it from the per-type tables below
// (each: the Avro record name, the identifying fields, the fields in schema
// order), then loads the embedded schemas and checks the tables against
// them (loadSchemas, avro.go).
var infos = map[Type]*typeInfo{}

func init() {
	for _, ti := range []*typeInfo{
		campaignDeclaredInfo(),
		cellStartedInfo(),
		taskAttemptInfo(),
		skillEventInfo(),
		harnessUpdateInfo(),
		adherenceJudgmentInfo(),
		cellFinishedInfo(),
		labeledSampleInfo(),
		roundMetricsInfo(),
		rejectedInfo(),
		checkpointPublishedInfo(),
	} {
		infos[ti.typ] = ti
	}
	loadSchemas()
}

// campaignDeclaredInfo returns the field table of campaign_declared.
func campaignDeclaredInfo() *typeInfo {
	return newInfo(TypeCampaignDeclared, "CampaignDeclared", []string{"campaign_id"},
		fStr("campaign_id", func(e *CampaignDeclared) *string { return &e.CampaignID }, required),
		fStrings("benchmarks", func(e *CampaignDeclared) *[]string { return &e.Benchmarks }),
		fStrings("anchor_agents", func(e *CampaignDeclared) *[]string { return &e.AnchorAgents }),
		fStrings("anchor_evolvers", func(e *CampaignDeclared) *[]string { return &e.AnchorEvolvers }),
		fDouble("label_epsilon", func(e *CampaignDeclared) *float64 { return &e.LabelEpsilon }, ranged(rEpsilon), defaults(0.02)),
		fDouble("label_alpha", func(e *CampaignDeclared) *float64 { return &e.LabelAlpha }, ranged(rAlpha), defaults(0.05)),
	)
}

// cellStartedInfo returns the field table of cell_started.
func cellStartedInfo() *typeInfo {
	return newInfo(TypeCellStarted, "CellStarted", []string{"cell_id"},
		fStr("campaign_id", func(e *CellStarted) *string { return &e.CampaignID }, required),
		fStr("cell_id", func(e *CellStarted) *string { return &e.CellID }, required),
		fStr("benchmark", func(e *CellStarted) *string { return &e.Benchmark }, required),
		fStr("agent_model", func(e *CellStarted) *string { return &e.AgentModel }, required),
		fStr("evolver_model", func(e *CellStarted) *string { return &e.EvolverModel }, nullable()),
		fInt("seed", func(e *CellStarted) *int32 { return &e.Seed }),
		fStr("route", func(e *CellStarted) *string { return &e.Route }, oneOf(routes...)),
		fStr("h0_version", func(e *CellStarted) *string { return &e.H0Version }),
		fInt("batch_size", func(e *CellStarted) *int32 { return &e.BatchSize }, ranged(rNonNeg)),
		fInt("max_attempts", func(e *CellStarted) *int32 { return &e.MaxAttempts }, ranged(rNonNeg)),
		fInt("task_count", func(e *CellStarted) *int32 { return &e.TaskCount }, ranged(rNonNeg)),
	)
}

// taskAttemptInfo returns the field table of task_attempt.
func taskAttemptInfo() *typeInfo {
	return newInfo(TypeTaskAttempt, "TaskAttempt", []string{"cell_id", "task_id", "attempt", "cycle"},
		fStr("cell_id", func(e *TaskAttempt) *string { return &e.CellID }, required),
		fStr("task_id", func(e *TaskAttempt) *string { return &e.TaskID }, required),
		fInt("stream_idx", func(e *TaskAttempt) *int32 { return &e.StreamIdx }, ranged(rNonNeg)),
		fInt("cycle", func(e *TaskAttempt) *int32 { return &e.Cycle }, ranged(rNonNeg)),
		fInt("attempt", func(e *TaskAttempt) *int32 { return &e.Attempt }, required, ranged(rPos)),
		fStr("harness_version", func(e *TaskAttempt) *string { return &e.HarnessVersion }),
		fStr("status", func(e *TaskAttempt) *string { return &e.Status }, oneOf(attemptStatus...)),
		fDouble("score", func(e *TaskAttempt) *float64 { return &e.Score }, required, ranged(rUnit)),
		fBool("success", func(e *TaskAttempt) *bool { return &e.Success }, required),
		// final: the task's last attempt, whose outcome the retry reading
		// (pass_rate_final) counts. Absent from JSON it is true, on every
		// path (/v1/events, JSONL, OTLP): an attempt that says nothing is its
		// task's only one; one that a retry follows says final: false.
		fBool("final", func(e *TaskAttempt) *bool { return &e.Final }, trueWhenAbsent),
		fInt("skills_available", func(e *TaskAttempt) *int32 { return &e.SkillsAvailable }, ranged(rNonNeg)),
		fStrings("skills_loaded", func(e *TaskAttempt) *[]string { return &e.SkillsLoaded }),
		fLong("input_tokens", func(e *TaskAttempt) *int64 { return &e.InputTokens }, ranged(rNonNeg)),
		fLong("output_tokens", func(e *TaskAttempt) *int64 { return &e.OutputTokens }, ranged(rNonNeg)),
		fLong("duration_ms", func(e *TaskAttempt) *int64 { return &e.DurationMs }, ranged(rNonNeg)),
		fStr("task_input", func(e *TaskAttempt) *string { return &e.TaskInput }, nullable(), capped(capTaskInput)),
	)
}

// skillEventInfo returns the field table of skill_event.
func skillEventInfo() *typeInfo {
	return newInfo(TypeSkillEvent, "SkillEvent", []string{"cell_id", "task_id", "attempt", "turn", "tool", "skill_name"},
		fStr("cell_id", func(e *SkillEvent) *string { return &e.CellID }, required),
		fStr("task_id", func(e *SkillEvent) *string { return &e.TaskID }, required),
		fInt("attempt", func(e *SkillEvent) *int32 { return &e.Attempt }, required, ranged(rPos)),
		fInt("turn", func(e *SkillEvent) *int32 { return &e.Turn }, required, ranged(rNonNeg)),
		fStr("tool", func(e *SkillEvent) *string { return &e.Tool }, oneOf(skillTools...)),
		fStr("skill_name", func(e *SkillEvent) *string { return &e.SkillName }),
		fStr("status", func(e *SkillEvent) *string { return &e.Status }, oneOf(skillStatus...)),
	)
}

// harnessUpdateInfo returns the field table of harness_update.
func harnessUpdateInfo() *typeInfo {
	return newInfo(TypeHarnessUpdate, "HarnessUpdate", []string{"cell_id", "update_id"},
		fStr("cell_id", func(e *HarnessUpdate) *string { return &e.CellID }, required),
		fStr("update_id", func(e *HarnessUpdate) *string { return &e.UpdateID }, required),
		fInt("cycle", func(e *HarnessUpdate) *int32 { return &e.Cycle }, ranged(rNonNeg)),
		fStr("from_version", func(e *HarnessUpdate) *string { return &e.FromVersion }, required),
		fStr("to_version", func(e *HarnessUpdate) *string { return &e.ToVersion }, required),
		fStr("evolver_model", func(e *HarnessUpdate) *string { return &e.EvolverModel }),
		field{name: "artifacts", kind: kArtifacts, capOf: capArtifact,
			arts: func(e Event) *[]Artifact { return &as[HarnessUpdate](e).Artifacts }},
		fStrings("evidence_task_ids", func(e *HarnessUpdate) *[]string { return &e.EvidenceTaskIDs }),
		fStr("evidence_summary", func(e *HarnessUpdate) *string { return &e.EvidenceSummary }, nullable(), prose),
		fBool("accepted", func(e *HarnessUpdate) *bool { return &e.Accepted }),
		fBool("rolled_back", func(e *HarnessUpdate) *bool { return &e.RolledBack }),
	)
}

// adherenceJudgmentInfo returns the field table of adherence_judgment.
func adherenceJudgmentInfo() *typeInfo {
	return newInfo(TypeAdherenceJudgment, "AdherenceJudgment", []string{"cell_id", "task_id", "attempt", "skill_name", "judge_model"},
		fStr("cell_id", func(e *AdherenceJudgment) *string { return &e.CellID }, required),
		fStr("task_id", func(e *AdherenceJudgment) *string { return &e.TaskID }, required),
		fInt("attempt", func(e *AdherenceJudgment) *int32 { return &e.Attempt }, required, ranged(rPos)),
		fStr("skill_name", func(e *AdherenceJudgment) *string { return &e.SkillName }, required),
		fStr("judge_model", func(e *AdherenceJudgment) *string { return &e.JudgeModel }, required),
		fInt("followed", func(e *AdherenceJudgment) *int32 { return &e.Followed }, ranged(rNonNeg)),
		fInt("violated_commission", func(e *AdherenceJudgment) *int32 { return &e.ViolatedCommission }, ranged(rNonNeg)),
		fInt("violated_omission", func(e *AdherenceJudgment) *int32 { return &e.ViolatedOmission }, ranged(rNonNeg)),
		fInt("required_unobserved", func(e *AdherenceJudgment) *int32 { return &e.RequiredUnobserved }, ranged(rNonNeg)),
		fInt("not_applicable", func(e *AdherenceJudgment) *int32 { return &e.NotApplicable }, ranged(rNonNeg)),
		fInt("insufficient_evidence", func(e *AdherenceJudgment) *int32 { return &e.InsufficientEvidence }, ranged(rNonNeg)),
		fNullDouble("harness_loaded", func(e *AdherenceJudgment) **float64 { return &e.HarnessLoaded }, ranged(rUnit)),
		fNullDouble("first_action", func(e *AdherenceJudgment) **float64 { return &e.FirstAction }, ranged(rUnit)),
		fNullDouble("midpoint", func(e *AdherenceJudgment) **float64 { return &e.Midpoint }, ranged(rUnit)),
		fNullDouble("pre_final", func(e *AdherenceJudgment) **float64 { return &e.PreFinal }, ranged(rUnit)),
		fNullDouble("final_validation", func(e *AdherenceJudgment) **float64 { return &e.FinalValidation }, ranged(rUnit)),
	)
}

// cellFinishedInfo returns the field table of cell_finished.
func cellFinishedInfo() *typeInfo {
	return newInfo(TypeCellFinished, "CellFinished", []string{"cell_id"},
		fStr("cell_id", func(e *CellFinished) *string { return &e.CellID }, required),
		fStr("status", func(e *CellFinished) *string { return &e.Status }, oneOf(cellStatus...)),
		fLong("attempts", func(e *CellFinished) *int64 { return &e.Attempts }, ranged(rNonNeg)),
	)
}

// labeledSampleInfo returns the field table of labeled_sample.
func labeledSampleInfo() *typeInfo {
	return newInfo(TypeLabeledSample, "LabeledSample", []string{"sample_id"},
		fStr("sample_id", func(e *LabeledSample) *string { return &e.SampleID }, required),
		fStr("update_id", func(e *LabeledSample) *string { return &e.UpdateID }, required),
		fStr("cell_id", func(e *LabeledSample) *string { return &e.CellID }, required),
		fStr("campaign_id", func(e *LabeledSample) *string { return &e.CampaignID }, required),
		fStr("benchmark", func(e *LabeledSample) *string { return &e.Benchmark }),
		fStr("agent_model", func(e *LabeledSample) *string { return &e.AgentModel }),
		fStr("evolver_model", func(e *LabeledSample) *string { return &e.EvolverModel }),
		fInt("cycle", func(e *LabeledSample) *int32 { return &e.Cycle }, ranged(rNonNeg)),
		fStr("query", func(e *LabeledSample) *string { return &e.Query }, capped(capArtifact)),
		fStr("update", func(e *LabeledSample) *string { return &e.Update }, capped(capArtifact)),
		fStr("artifact_kind", func(e *LabeledSample) *string { return &e.ArtifactKind }, oneOf(artifactKinds...)),
		fDouble("effect", func(e *LabeledSample) *float64 { return &e.Effect }, required, ranged(rSigned)),
		fStr("label", func(e *LabeledSample) *string { return &e.Label }, oneOf(labels...)),
		fInt("n_before", func(e *LabeledSample) *int32 { return &e.NBefore }, ranged(rNonNeg)),
		fInt("n_after", func(e *LabeledSample) *int32 { return &e.NAfter }, ranged(rNonNeg)),
		fDouble("ci_low", func(e *LabeledSample) *float64 { return &e.CILow }),
		fDouble("ci_high", func(e *LabeledSample) *float64 { return &e.CIHigh }),
		fDouble("p_value", func(e *LabeledSample) *float64 { return &e.PValue }, ranged(rUnit)),
		fStr("reason", func(e *LabeledSample) *string { return &e.Reason }, prose),
		fStr("harness_version", func(e *LabeledSample) *string { return &e.HarnessVersion }),
		fInt("harness_version_index", func(e *LabeledSample) *int32 { return &e.HarnessVersionIndex }, ranged(rNonNeg)),
		fInt("seed", func(e *LabeledSample) *int32 { return &e.Seed }),
		fStr("route", func(e *LabeledSample) *string { return &e.Route }, oneOf(routes...)),
		fTime("produced_at", func(e *LabeledSample) *time.Time { return &e.ProducedAt }),
	)
}

// roundMetricsInfo returns the field table of round_metrics.
func roundMetricsInfo() *typeInfo {
	return newInfo(TypeRoundMetrics, "RoundMetrics", []string{"cell_id", "cycle"},
		fStr("cell_id", func(e *RoundMetrics) *string { return &e.CellID }, required),
		fStr("campaign_id", func(e *RoundMetrics) *string { return &e.CampaignID }),
		fStr("benchmark", func(e *RoundMetrics) *string { return &e.Benchmark }),
		fStr("agent_model", func(e *RoundMetrics) *string { return &e.AgentModel }),
		fStr("evolver_model", func(e *RoundMetrics) *string { return &e.EvolverModel }),
		fInt("seed", func(e *RoundMetrics) *int32 { return &e.Seed }),
		fInt("cycle", func(e *RoundMetrics) *int32 { return &e.Cycle }, required, ranged(rNonNeg)),
		fInt("n_tasks", func(e *RoundMetrics) *int32 { return &e.NTasks }, ranged(rNonNeg)),
		fDouble("pass_rate", func(e *RoundMetrics) *float64 { return &e.PassRate }, ranged(rPercent)),
		fDouble("mean_score", func(e *RoundMetrics) *float64 { return &e.MeanScore }, ranged(rUnit)),
		fNullDouble("lift_vs_baseline", func(e *RoundMetrics) **float64 { return &e.LiftVsBaseline }, ranged(rPP)),
		fNullDouble("skill_load_rate", func(e *RoundMetrics) **float64 { return &e.SkillLoadRate }, ranged(rUnit)),
		fNullDouble("loaded_pass_rate", func(e *RoundMetrics) **float64 { return &e.LoadedPassRate }, ranged(rPercent)),
		fNullDouble("adherence_loaded", func(e *RoundMetrics) **float64 { return &e.AdherenceLoaded }, ranged(rUnit)),
		fNullDouble("adherence_final", func(e *RoundMetrics) **float64 { return &e.AdherenceFinal }, ranged(rUnit)),
	)
}

// rejectedInfo returns the field table of rejected.
func rejectedInfo() *typeInfo {
	return newInfo(TypeRejected, "Rejected", []string{"source_topic", "partition", "offset"},
		fStr("stage", func(e *Rejected) *string { return &e.Stage }, oneOf(stages...)),
		fStr("reason_code", func(e *Rejected) *string { return &e.ReasonCode }, required),
		fStr("message", func(e *Rejected) *string { return &e.Message }, prose),
		fStr("source_topic", func(e *Rejected) *string { return &e.SourceTopic }),
		fInt("partition", func(e *Rejected) *int32 { return &e.Partition }, ranged(rMinus1)),
		fLong("offset", func(e *Rejected) *int64 { return &e.Offset }, ranged(rMinus1)),
		field{name: "payload", kind: kBytes, capOf: capPayload,
			byts: func(e Event) *[]byte { return &as[Rejected](e).Payload }},
	)
}

// checkpointPublishedInfo returns the field table of checkpoint_published.
func checkpointPublishedInfo() *typeInfo {
	return newInfo(TypeCheckpointPublished, "CheckpointPublished", []string{"model_version", "step"},
		fStr("model_version", func(e *CheckpointPublished) *string { return &e.ModelVersion }, required),
		fLong("step", func(e *CheckpointPublished) *int64 { return &e.Step }, required, ranged(rNonNeg)),
		fLong("samples_trained", func(e *CheckpointPublished) *int64 { return &e.SamplesTrained }, ranged(rNonNeg)),
		field{name: "offsets", kind: kOffsets,
			offs: func(e Event) *[]TopicOffset { return &as[CheckpointPublished](e).Offsets }},
		field{name: "metrics", kind: kMetrics,
			mets: func(e Event) *map[string]float64 { return &as[CheckpointPublished](e).Metrics }},
		// v2: a path is not a name (it may be longer than Limits.Name);
		// the whole-event cap bounds it.
		fStr("checkpoint_uri", func(e *CheckpointPublished) *string { return &e.CheckpointURI }, prose),
		fStr("checkpoint_sha256", func(e *CheckpointPublished) *string { return &e.CheckpointSHA256 }),
	)
}

func infoOf(ev Event) *typeInfo { return infos[ev.Type()] }
