package schemas

import (
	"time"
)

func f64(x float64) *float64 { return &x }

var fixtureTime = time.Date(2025, 3, 14, 15, 9, 26, 535_000_000, time.UTC)

func env(id string) Envelope {
	return Envelope{EventID: id, EventTime: fixtureTime, Project: "acme", Source: "sdk-go/1.0"}
}

// fixturesV1 returns one fixed, fully populated event per type: the events
// whose bytes are the v1 golden files. Never change a value here once a
// golden file for it is committed: the golden test compares against these.
func fixturesV1() map[Type]Event {
	return map[Type]Event{
		TypeCampaignDeclared: &CampaignDeclared{Envelope: env("ev-campaign"), CampaignID: "camp-1",
			Benchmarks: []string{"swe-lite", "gaia"}, AnchorAgents: []string{"agent-a", "agent-b"},
			AnchorEvolvers: []string{"evo-x"}, LabelEpsilon: 0.03, LabelAlpha: 0.01},
		TypeCellStarted: &CellStarted{Envelope: env("ev-cell-start"), CampaignID: "camp-1", CellID: "cell-7",
			Benchmark: "swe-lite", AgentModel: "agent-a", EvolverModel: "evo-x", Seed: -42, Route: RouteInSitu,
			H0Version: "h0", BatchSize: 8, MaxAttempts: 3, TaskCount: 120},
		TypeTaskAttempt: &TaskAttempt{Envelope: env("ev-attempt"), CellID: "cell-7", TaskID: "task-19",
			StreamIdx: 19, Cycle: 2, Attempt: 1, HarnessVersion: "h2", Status: StatusOK, Score: 0.75,
			Success: true, Final: true, SkillsAvailable: 4, SkillsLoaded: []string{"git", "pytest"},
			InputTokens: 12345, OutputTokens: 678, DurationMs: 91011, TaskInput: "fix the failing test ✓"},
		TypeSkillEvent: &SkillEvent{Envelope: env("ev-skill"), CellID: "cell-7", TaskID: "task-19",
			Attempt: 1, Turn: 3, Tool: ToolLoadSkill, SkillName: "git", Status: SkillLoaded},
		TypeHarnessUpdate: &HarnessUpdate{Envelope: env("ev-update"), CellID: "cell-7", UpdateID: "upd-2",
			Cycle: 2, FromVersion: "h1", ToVersion: "h2", EvolverModel: "evo-x",
			Artifacts: []Artifact{
				{Kind: KindSkill, Name: "git/SKILL.md", Op: OpAdd, Content: "---\nname: git\ndescription: use git\n---\nbody",
					ContentSHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"},
				{Kind: KindPrompt, Name: "system.md", Op: OpModify, Content: "Be brief.", ContentSHA256: ""},
			},
			EvidenceTaskIDs: []string{"task-3", "task-19"}, EvidenceSummary: "two failures on git usage",
			Accepted: true, RolledBack: false},
		TypeAdherenceJudgment: &AdherenceJudgment{Envelope: env("ev-judgment"), CellID: "cell-7", TaskID: "task-19",
			Attempt: 1, SkillName: "git", JudgeModel: "judge-1", Followed: 5, ViolatedCommission: 1,
			ViolatedOmission: 2, RequiredUnobserved: 0, NotApplicable: 3, InsufficientEvidence: 1,
			HarnessLoaded: f64(1), FirstAction: f64(0.5), Midpoint: nil, PreFinal: f64(0.25), FinalValidation: f64(0)},
		TypeCellFinished: &CellFinished{Envelope: env("ev-cell-end"), CellID: "cell-7", Status: CellCompleted, Attempts: 360},
		TypeLabeledSample: &LabeledSample{Envelope: env("ev-sample"), SampleID: "s-1", UpdateID: "upd-2", CellID: "cell-7",
			CampaignID: "camp-1", Benchmark: "swe-lite", AgentModel: "agent-a", EvolverModel: "evo-x", Cycle: 2,
			Query: "two failures on git usage", Update: "---\nname: git\n---", ArtifactKind: KindSkill, Effect: -0.125,
			Label: LabelNegative, NBefore: 40, NAfter: 41, CILow: -0.2, CIHigh: -0.05, PValue: 0.004,
			Reason: "pass rate fell", HarnessVersion: "h2", HarnessVersionIndex: 2, Seed: 7, Route: RouteSplitTest,
			ProducedAt: fixtureTime.Add(time.Hour)},
		TypeRoundMetrics: &RoundMetrics{Envelope: env("ev-round"), CellID: "cell-7", CampaignID: "camp-1", Benchmark: "swe-lite",
			AgentModel: "agent-a", EvolverModel: "evo-x", Seed: 7, Cycle: 2, NTasks: 40, PassRate: 62.5, MeanScore: 0.7,
			LiftVsBaseline: f64(-3.5), SkillLoadRate: f64(0.8), LoadedPassRate: f64(70), AdherenceLoaded: nil, AdherenceFinal: f64(0.9)},
		TypeRejected: &Rejected{Envelope: env("ev-rejected"), Stage: StageSyntax, ReasonCode: CodeBadEnum,
			Message: `cell_started.route: "sideways" is not one of ...`, SourceTopic: TopicCells, Partition: 3, Offset: 1234567,
			Payload: []byte{0xC3, 0x01, 0, 0xff, 'x'}},
		TypeCheckpointPublished: &CheckpointPublished{Envelope: env("ev-ckpt"), ModelVersion: "rm-000042", Step: 42,
			SamplesTrained: 4200, Offsets: []TopicOffset{{Topic: TopicSamples, Partition: 0, Offset: 100}, {Topic: TopicSamples, Partition: 5, Offset: 7}},
			Metrics: map[string]float64{"loss": 0.125, "mae": 0.0625, "auc": 0.9}},
	}
}

// expectedByVersion maps a golden directory to the fixtures its files hold,
// as the CURRENT code must decode them. When a v2 schema adds a field, the
// v1 entry keeps fixturesV1 (the new field at its default).
var expectedByVersion = map[string]func() map[Type]Event{
	"v1": fixturesV1,
	"v2": fixturesV2,
}

// fixturesV2 returns the v2 golden files' events: the types whose schema v2
// changed (checkpoint_published: checkpoint_uri and checkpoint_sha256),
// fixturesV1's event with the new fields set.
func fixturesV2() map[Type]Event {
	ck := fixturesV1()[TypeCheckpointPublished].(*CheckpointPublished)
	ck.CheckpointURI = "file:///var/lib/harnessflow/checkpoints/ckpt-000000000042.hfck"
	ck.CheckpointSHA256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	return map[Type]Event{TypeCheckpointPublished: ck}
}
