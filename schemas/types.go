// Package schemas holds harnessflow's event contract (docs/design.md §3): one typed Go
// struct per event, the Avro schemas they travel in, and the codecs between the
// Avro wire forms, the JSON form and these structs.
//
// Every event embeds Envelope. Optional Avro fields map to Go zero values where the
// zero value is not meaningful (an empty EvolverModel is the baseline, written as
// Avro null), and to pointers where it is (a phase score of 0 differs from "not
// judged").
//
// # Wire forms
//
// Avro schemas: one record per event type in avro/v<N>/<type>.avsc (namespace
// dev.harnessflow), compiled into the binary. Encode writes a type's newest
// version; every older version stays so that its bytes still decode
// (Versions lists them). A new version may only add fields with defaults;
// the guard is TestGolden, which decodes every committed golden file of every
// version (testdata/golden/v<N>/<type>.bin) with the current code.
//
// Single-object encoding (Encode, Decode; the Avro specification's form):
//
//	0xC3 0x01 | 8-byte little-endian CRC-64-AVRO (Rabin) fingerprint of the
//	schema's Parsing Canonical Form | Avro binary body
//
// Confluent wire format (Registry.EncodeConfluent, Decoder.Decode), for
// deployments with a schema registry:
//
//	0x00 | 4-byte big-endian registry schema id | Avro binary body
//
// Decoder.Decode accepts both framings. A registry writer schema that is not
// compiled in is matched to an event type by record name and resolved to the
// current struct by field name.
//
// JSON form (ParseJSON, MarshalJSON; JSONL files and HTTP ingest): one object
// with "type" set to the event's Type and the fields named as in the Avro
// schema; parsing is strict and every problem is a *FieldError with a Code*
// code, which processors use as the dead-letter reason code.
//
// The hot path (Encode, Decode of a current schema) is hand-written per
// field from one table (fields.go) checked against the .avsc files at init;
// goavro parses the schemas, computes fingerprints and decodes foreign or
// older writer schemas. Every function here is safe for concurrent use.
package schemas

import "time"

// Type is the snake_case name of an event, the `"type"` of its JSON form.
type Type string

// The event types of docs/design.md §3.
const (
	TypeCampaignDeclared    Type = "campaign_declared"
	TypeCellStarted         Type = "cell_started"
	TypeTaskAttempt         Type = "task_attempt"
	TypeSkillEvent          Type = "skill_event"
	TypeHarnessUpdate       Type = "harness_update"
	TypeAdherenceJudgment   Type = "adherence_judgment"
	TypeCellFinished        Type = "cell_finished"
	TypeLabeledSample       Type = "labeled_sample"
	TypeRoundMetrics        Type = "round_metrics"
	TypeRejected            Type = "rejected"
	TypeCheckpointPublished Type = "checkpoint_published"
)

// AllTypes lists every event type in a fixed order.
var AllTypes = []Type{
	TypeCampaignDeclared, TypeCellStarted, TypeTaskAttempt, TypeSkillEvent,
	TypeHarnessUpdate, TypeAdherenceJudgment, TypeCellFinished,
	TypeLabeledSample, TypeRoundMetrics, TypeRejected, TypeCheckpointPublished,
}

// Event is implemented by a pointer to every event struct in this package.
type Event interface {
	// Type is the event's type name.
	Type() Type
	// Header returns the event's envelope, for reading or filling in.
	Header() *Envelope
	// PartitionKey is the Kafka message key: cell_id for cell events,
	// campaign_id for campaigns, model_version for checkpoints.
	PartitionKey() string
}

// DefaultProject is the project (tenant) of events whose producer names
// none: the simulator's, the importer's and the token `up` generates.
const DefaultProject = "default"

// Envelope is shared by every event.
type Envelope struct {
	// EventID is unique per event. Producers may leave it empty; DeriveEventID
	// fills a deterministic one from the type and identifying fields.
	EventID string `json:"event_id"`
	// EventTime is when the event happened (Avro timestamp-millis, UTC).
	EventTime time.Time `json:"event_time"`
	// Project is the tenant.
	Project string `json:"project"`
	// Source names the emitter (an SDK, "ingest", "import:a-evolve", ...).
	Source string `json:"source"`
}

// Header returns e itself; it is promoted to every event struct.
func (e *Envelope) Header() *Envelope { return e }

// Routes of a cell.
const (
	RouteBaseline   = "baseline"
	RouteInSitu     = "in_situ"
	RouteSplitTrain = "split_train"
	RouteSplitTest  = "split_test"
	RouteProduction = "production"
)

// Attempt statuses.
const (
	StatusOK          = "ok"
	StatusError       = "error"
	StatusInterrupted = "interrupted"
	StatusTimeout     = "timeout"
)

// Skill tools and skill-event statuses.
const (
	ToolListSkills         = "list_skills"
	ToolLoadSkill          = "load_skill"
	ToolLoadSkillReference = "load_skill_reference"
	ToolReadSkill          = "read_skill"

	SkillLoaded           = "loaded"
	SkillNotFound         = "not_found"
	SkillRejectedMultikey = "rejected_multikey"
)

// Artifact kinds and operations.
const (
	KindPrompt = "prompt"
	KindSkill  = "skill"
	KindMemory = "memory"
	KindTool   = "tool"

	OpAdd    = "add"
	OpModify = "modify"
	OpRemove = "remove"
)

// Cell-finished statuses.
const (
	CellCompleted = "completed"
	CellFailed    = "failed"
	CellAborted   = "aborted"
)

// Labels of a labeled sample.
const (
	LabelNegative = "negative"
	LabelNeutral  = "neutral"
	LabelPositive = "positive"
)

// DLQ stages.
const (
	StageDecode    = "decode"
	StageSyntax    = "syntax"
	StageSemantic  = "semantic"
	StageReference = "reference"
	StageLimit     = "limit"
)

// CampaignDeclared declares a cross-evaluation campaign and its labeling parameters.
type CampaignDeclared struct {
	Envelope
	CampaignID     string   `json:"campaign_id"`
	Benchmarks     []string `json:"benchmarks"`
	AnchorAgents   []string `json:"anchor_agents"`
	AnchorEvolvers []string `json:"anchor_evolvers"`
	// LabelEpsilon is the minimum |effect| for a non-neutral label. Default: 0.02.
	LabelEpsilon float64 `json:"label_epsilon"`
	// LabelAlpha is the significance level of the label test. Default: 0.05.
	LabelAlpha float64 `json:"label_alpha"`
}

// CellStarted opens a cell: one agent, one evolver (or none), one benchmark, one seed.
type CellStarted struct {
	Envelope
	CampaignID string `json:"campaign_id"`
	CellID     string `json:"cell_id"`
	Benchmark  string `json:"benchmark"`
	AgentModel string `json:"agent_model"`
	// EvolverModel is empty for the baseline (Avro and JSON null).
	EvolverModel string `json:"evolver_model"`
	Seed         int32  `json:"seed"`
	Route        string `json:"route"`
	H0Version    string `json:"h0_version"`
	BatchSize    int32  `json:"batch_size"`
	MaxAttempts  int32  `json:"max_attempts"`
	TaskCount    int32  `json:"task_count"`
}

// TaskAttempt is one attempt of the agent at one task. Final marks the
// task's last attempt, the row pass_rate_final reads: absent from the JSON
// form (/v1/events, JSONL, OTLP) it is true; a Go producer sets it, the
// zero value being false.
type TaskAttempt struct {
	Envelope
	CellID          string   `json:"cell_id"`
	TaskID          string   `json:"task_id"`
	StreamIdx       int32    `json:"stream_idx"`
	Cycle           int32    `json:"cycle"`
	Attempt         int32    `json:"attempt"`
	HarnessVersion  string   `json:"harness_version"`
	Status          string   `json:"status"`
	Score           float64  `json:"score"`
	Success         bool     `json:"success"`
	Final           bool     `json:"final"`
	SkillsAvailable int32    `json:"skills_available"`
	SkillsLoaded    []string `json:"skills_loaded"`
	InputTokens     int64    `json:"input_tokens"`
	OutputTokens    int64    `json:"output_tokens"`
	DurationMs      int64    `json:"duration_ms"`
	// TaskInput is optional (empty = absent), capped by Limits.TaskInput.
	TaskInput string `json:"task_input,omitempty"`
}

// SkillEvent is one skill tool call made by the agent.
type SkillEvent struct {
	Envelope
	CellID    string `json:"cell_id"`
	TaskID    string `json:"task_id"`
	Attempt   int32  `json:"attempt"`
	Turn      int32  `json:"turn"`
	Tool      string `json:"tool"`
	SkillName string `json:"skill_name"`
	Status    string `json:"status"`
}

// Artifact is one changed harness file of an update.
type Artifact struct {
	Kind          string `json:"kind"`
	Name          string `json:"name"`
	Op            string `json:"op"`
	Content       string `json:"content"`
	ContentSHA256 string `json:"content_sha256"`
}

// HarnessUpdate is one evolver step: harness version From -> To.
type HarnessUpdate struct {
	Envelope
	CellID          string     `json:"cell_id"`
	UpdateID        string     `json:"update_id"`
	Cycle           int32      `json:"cycle"`
	FromVersion     string     `json:"from_version"`
	ToVersion       string     `json:"to_version"`
	EvolverModel    string     `json:"evolver_model"`
	Artifacts       []Artifact `json:"artifacts"`
	EvidenceTaskIDs []string   `json:"evidence_task_ids"`
	// EvidenceSummary is optional (empty = absent).
	EvidenceSummary string `json:"evidence_summary,omitempty"`
	Accepted        bool   `json:"accepted"`
	RolledBack      bool   `json:"rolled_back"`
}

// AdherenceJudgment is a judge model's verdict on how an attempt followed a skill.
type AdherenceJudgment struct {
	Envelope
	CellID               string `json:"cell_id"`
	TaskID               string `json:"task_id"`
	Attempt              int32  `json:"attempt"`
	SkillName            string `json:"skill_name"`
	JudgeModel           string `json:"judge_model"`
	Followed             int32  `json:"followed"`
	ViolatedCommission   int32  `json:"violated_commission"`
	ViolatedOmission     int32  `json:"violated_omission"`
	RequiredUnobserved   int32  `json:"required_unobserved"`
	NotApplicable        int32  `json:"not_applicable"`
	InsufficientEvidence int32  `json:"insufficient_evidence"`
	// Phase scores in [0,1]; nil = not judged.
	HarnessLoaded   *float64 `json:"harness_loaded"`
	FirstAction     *float64 `json:"first_action"`
	Midpoint        *float64 `json:"midpoint"`
	PreFinal        *float64 `json:"pre_final"`
	FinalValidation *float64 `json:"final_validation"`
}

// CellFinished closes a cell.
type CellFinished struct {
	Envelope
	CellID   string `json:"cell_id"`
	Status   string `json:"status"`
	Attempts int64  `json:"attempts"`
}

// LabeledSample is the derived training sample of one harness update
// ({query, update, effect, label, reason} with its evidence).
type LabeledSample struct {
	Envelope
	SampleID     string  `json:"sample_id"`
	UpdateID     string  `json:"update_id"`
	CellID       string  `json:"cell_id"`
	CampaignID   string  `json:"campaign_id"`
	Benchmark    string  `json:"benchmark"`
	AgentModel   string  `json:"agent_model"`
	EvolverModel string  `json:"evolver_model"`
	Cycle        int32   `json:"cycle"`
	Query        string  `json:"query"`
	Update       string  `json:"update"`
	ArtifactKind string  `json:"artifact_kind"`
	Effect       float64 `json:"effect"`
	Label        string  `json:"label"`
	NBefore      int32   `json:"n_before"`
	NAfter       int32   `json:"n_after"`
	CILow        float64 `json:"ci_low"`
	CIHigh       float64 `json:"ci_high"`
	PValue       float64 `json:"p_value"`
	Reason       string  `json:"reason"`
	// HarnessVersion is the update's to_version.
	HarnessVersion string `json:"harness_version"`
	// HarnessVersionIndex is the position of HarnessVersion in the cell's chain
	// (h0 = 0); it lets consumers measure staleness in harness versions.
	HarnessVersionIndex int32     `json:"harness_version_index"`
	Seed                int32     `json:"seed"`
	Route               string    `json:"route"`
	ProducedAt          time.Time `json:"produced_at"`
}

// RoundMetrics are one closed round's (cycle's) figures for a cell (docs/metrics.md).
type RoundMetrics struct {
	Envelope
	CellID       string `json:"cell_id"`
	CampaignID   string `json:"campaign_id"`
	Benchmark    string `json:"benchmark"`
	AgentModel   string `json:"agent_model"`
	EvolverModel string `json:"evolver_model"`
	Seed         int32  `json:"seed"`
	Cycle        int32  `json:"cycle"`
	NTasks       int32  `json:"n_tasks"`
	// PassRate in percent, strict reading (attempt 1, binary success).
	PassRate  float64 `json:"pass_rate"`
	MeanScore float64 `json:"mean_score"`
	// LiftVsBaseline in pp; nil when no baseline outcome pairs.
	LiftVsBaseline *float64 `json:"lift_vs_baseline"`
	// SkillLoadRate in [0,1]; nil when no attempt offered skills.
	SkillLoadRate *float64 `json:"skill_load_rate"`
	// LoadedPassRate in percent; nil when no attempt loaded a skill.
	LoadedPassRate *float64 `json:"loaded_pass_rate"`
	// AdherenceLoaded / AdherenceFinal in [0,1]; nil without judgments.
	AdherenceLoaded *float64 `json:"adherence_loaded"`
	AdherenceFinal  *float64 `json:"adherence_final"`
}

// Rejected is a dead letter: an input that failed validation at some stage.
type Rejected struct {
	Envelope
	Stage       string `json:"stage"`
	ReasonCode  string `json:"reason_code"`
	Message     string `json:"message"`
	SourceTopic string `json:"source_topic"`
	Partition   int32  `json:"partition"`
	Offset      int64  `json:"offset"`
	// Payload is the offending bytes, capped (JSON form: base64).
	Payload []byte `json:"payload"`
}

// TopicOffset is a position in a topic partition: the next offset to read.
type TopicOffset struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// CheckpointPublished announces a durable trainer checkpoint.
type CheckpointPublished struct {
	Envelope
	ModelVersion   string             `json:"model_version"`
	Step           int64              `json:"step"`
	SamplesTrained int64              `json:"samples_trained"`
	Offsets        []TopicOffset      `json:"offsets"`
	Metrics        map[string]float64 `json:"metrics"`
	// CheckpointURI is where the checkpoint file is: a file:// URI of its
	// absolute path on the trainer's host (schema v2; "" in v1 events).
	CheckpointURI string `json:"checkpoint_uri"`
	// CheckpointSHA256 is the lowercase hex sha256 of the checkpoint file's
	// bytes as saved (schema v2; "" in v1 events): what /v1/score answers
	// as checkpoint_sha256 when it serves this checkpoint.
	CheckpointSHA256 string `json:"checkpoint_sha256"`
}

func (*CampaignDeclared) Type() Type    { return TypeCampaignDeclared }
func (*CellStarted) Type() Type         { return TypeCellStarted }
func (*TaskAttempt) Type() Type         { return TypeTaskAttempt }
func (*SkillEvent) Type() Type          { return TypeSkillEvent }
func (*HarnessUpdate) Type() Type       { return TypeHarnessUpdate }
func (*AdherenceJudgment) Type() Type   { return TypeAdherenceJudgment }
func (*CellFinished) Type() Type        { return TypeCellFinished }
func (*LabeledSample) Type() Type       { return TypeLabeledSample }
func (*RoundMetrics) Type() Type        { return TypeRoundMetrics }
func (*Rejected) Type() Type            { return TypeRejected }
func (*CheckpointPublished) Type() Type { return TypeCheckpointPublished }

func (e *CampaignDeclared) PartitionKey() string    { return e.CampaignID }
func (e *CellStarted) PartitionKey() string         { return e.CellID }
func (e *TaskAttempt) PartitionKey() string         { return e.CellID }
func (e *SkillEvent) PartitionKey() string          { return e.CellID }
func (e *HarnessUpdate) PartitionKey() string       { return e.CellID }
func (e *AdherenceJudgment) PartitionKey() string   { return e.CellID }
func (e *CellFinished) PartitionKey() string        { return e.CellID }
func (e *LabeledSample) PartitionKey() string       { return e.CellID }
func (e *RoundMetrics) PartitionKey() string        { return e.CellID }
func (e *Rejected) PartitionKey() string            { return e.SourceTopic }
func (e *CheckpointPublished) PartitionKey() string { return e.ModelVersion }

// New returns a new zero event of type t, or nil for an unknown type.
func New(t Type) Event {
	switch t {
	case TypeCampaignDeclared:
		return &CampaignDeclared{}
	case TypeCellStarted:
		return &CellStarted{}
	case TypeTaskAttempt:
		return &TaskAttempt{}
	case TypeSkillEvent:
		return &SkillEvent{}
	case TypeHarnessUpdate:
		return &HarnessUpdate{}
	case TypeAdherenceJudgment:
		return &AdherenceJudgment{}
	case TypeCellFinished:
		return &CellFinished{}
	case TypeLabeledSample:
		return &LabeledSample{}
	case TypeRoundMetrics:
		return &RoundMetrics{}
	case TypeRejected:
		return &Rejected{}
	case TypeCheckpointPublished:
		return &CheckpointPublished{}
	}
	return nil
}

// Topic names (docs/design.md §1, §3). Settings live in infra/kafkatopics.
const (
	TopicCampaigns    = "hf.campaigns"
	TopicCells        = "hf.cells"
	TopicAttempts     = "hf.attempts"
	TopicSkillEvents  = "hf.skill-events"
	TopicUpdates      = "hf.updates"
	TopicJudgments    = "hf.judgments"
	TopicOutcomes     = "hf.outcomes"
	TopicSamples      = "hf.samples"
	TopicRoundMetrics = "hf.round-metrics"
	TopicDLQ          = "hf.dlq"
	TopicCheckpoints  = "hf.checkpoints"
)

// RawTopics are the topics producers write to.
var RawTopics = []string{TopicCampaigns, TopicCells, TopicAttempts, TopicSkillEvents, TopicUpdates, TopicJudgments}

// TopicFor returns the topic an event of type t is produced to.
func TopicFor(t Type) string {
	switch t {
	case TypeCampaignDeclared:
		return TopicCampaigns
	case TypeCellStarted, TypeCellFinished:
		return TopicCells
	case TypeTaskAttempt:
		return TopicAttempts
	case TypeSkillEvent:
		return TopicSkillEvents
	case TypeHarnessUpdate:
		return TopicUpdates
	case TypeAdherenceJudgment:
		return TopicJudgments
	case TypeLabeledSample:
		return TopicSamples
	case TypeRoundMetrics:
		return TopicRoundMetrics
	case TypeRejected:
		return TopicDLQ
	case TypeCheckpointPublished:
		return TopicCheckpoints
	}
	return ""
}
