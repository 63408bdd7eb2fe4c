// Package producerstest generates valid, deterministic harnessflow events for
// tests and load tools: every raw event type, with realistic field values.
package producerstest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/harnessflow/harnessflow/schemas"
)

// Epoch is the event_time of the first generated event; each next one is a
// millisecond later.
var Epoch = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// RawTypes are the seven raw event types, in the order Mixed cycles through.
var RawTypes = []schemas.Type{
	schemas.TypeCampaignDeclared, schemas.TypeCellStarted, schemas.TypeTaskAttempt,
	schemas.TypeSkillEvent, schemas.TypeHarnessUpdate, schemas.TypeAdherenceJudgment,
	schemas.TypeCellFinished,
}

func f64(v float64) *float64 { return &v }

// Event returns the i-th generated event of type t, with every envelope field
// set (event_id unique per (t, i)). Cells are spread over 16 cell ids.
func Event(t schemas.Type, i int, project string) schemas.Event {
	cell := fmt.Sprintf("cell-%02d", i%16)
	task := fmt.Sprintf("task-%05d", i)
	env := schemas.Envelope{
		EventID:   fmt.Sprintf("%s-%06d", t, i),
		EventTime: Epoch.Add(time.Duration(i) * time.Millisecond),
		Project:   project,
		Source:    "producerstest",
	}
	switch t {
	case schemas.TypeCampaignDeclared:
		return &schemas.CampaignDeclared{Envelope: env, CampaignID: fmt.Sprintf("camp-%06d", i),
			Benchmarks: []string{"swe-bench-verified", "mcp-atlas"}, AnchorAgents: []string{"agent-a", "agent-b"},
			AnchorEvolvers: []string{"evolver-x"}, LabelEpsilon: 0.02, LabelAlpha: 0.05}
	case schemas.TypeCellStarted:
		return &schemas.CellStarted{Envelope: env, CampaignID: "camp-0", CellID: cell, Benchmark: "swe-bench-verified",
			AgentModel: "agent-a", EvolverModel: "evolver-x", Seed: int32(i % 3), Route: schemas.RouteInSitu,
			H0Version: "h0", BatchSize: 10, MaxAttempts: 3, TaskCount: 500}
	case schemas.TypeTaskAttempt:
		return TaskAttempt(i, project)
	case schemas.TypeSkillEvent:
		return &schemas.SkillEvent{Envelope: env, CellID: cell, TaskID: task, Attempt: 1, Turn: int32(i % 9),
			Tool: schemas.ToolLoadSkill, SkillName: "git-bisect", Status: schemas.SkillLoaded}
	case schemas.TypeHarnessUpdate:
		content := fmt.Sprintf("---\nname: skill-%d\ndescription: how to do step %d\n---\nDo the step carefully.\n", i, i)
		sum := sha256.Sum256([]byte(content))
		return &schemas.HarnessUpdate{Envelope: env, CellID: cell, UpdateID: fmt.Sprintf("upd-%06d", i), Cycle: int32(i % 7),
			FromVersion: fmt.Sprintf("h%d", i), ToVersion: fmt.Sprintf("h%d", i+1), EvolverModel: "evolver-x",
			Artifacts: []schemas.Artifact{{Kind: schemas.KindSkill, Name: fmt.Sprintf("skill-%d", i), Op: schemas.OpAdd,
				Content: content, ContentSHA256: hex.EncodeToString(sum[:])}},
			EvidenceTaskIDs: []string{task}, EvidenceSummary: "failed on step ordering", Accepted: true}
	case schemas.TypeAdherenceJudgment:
		return &schemas.AdherenceJudgment{Envelope: env, CellID: cell, TaskID: task, Attempt: 1, SkillName: "git-bisect",
			JudgeModel: "judge-1", Followed: 3, ViolatedCommission: 1, NotApplicable: 2,
			HarnessLoaded: f64(0.9), FirstAction: f64(0.8), Midpoint: f64(0.5), FinalValidation: f64(0.25)}
	case schemas.TypeCellFinished:
		return &schemas.CellFinished{Envelope: env, CellID: cell, Status: schemas.CellCompleted, Attempts: int64(i)}
	}
	panic(fmt.Sprintf("producerstest: no generator for %q", t))
}

// TaskAttempt returns the i-th generated task_attempt event.
func TaskAttempt(i int, project string) *schemas.TaskAttempt {
	return &schemas.TaskAttempt{
		Envelope: schemas.Envelope{
			EventID:   fmt.Sprintf("%s-%06d", schemas.TypeTaskAttempt, i),
			EventTime: Epoch.Add(time.Duration(i) * time.Millisecond),
			Project:   project,
			Source:    "producerstest",
		},
		CellID: fmt.Sprintf("cell-%02d", i%16), TaskID: fmt.Sprintf("task-%05d", i), StreamIdx: int32(i),
		Cycle: int32(i / 50), Attempt: 1, HarnessVersion: fmt.Sprintf("h%d", i/50), Status: schemas.StatusOK,
		Score: float64(i%10) / 10, Success: i%3 == 0, Final: true, SkillsAvailable: 4,
		SkillsLoaded: []string{"git-bisect"}, InputTokens: 1200 + int64(i%500), OutputTokens: 300, DurationMs: 4500,
	}
}

// Mixed returns n events cycling through RawTypes.
func Mixed(n int, project string) []schemas.Event {
	out := make([]schemas.Event, n)
	for i := range out {
		out[i] = Event(RawTypes[i%len(RawTypes)], i, project)
	}
	return out
}

// DerivedTypes are the event types the pipeline writes itself (every type
// that is not in RawTypes): the SDKs and the gateway refuse them.
var DerivedTypes = []schemas.Type{schemas.TypeLabeledSample, schemas.TypeRoundMetrics, schemas.TypeRejected, schemas.TypeCheckpointPublished}

// Derived returns the i-th generated event of a derived type t (one of
// DerivedTypes), every envelope field set, as a tenant forging one would
// send it.
func Derived(t schemas.Type, i int, project string) schemas.Event {
	env := schemas.Envelope{
		EventID:   fmt.Sprintf("%s-%06d", t, i),
		EventTime: Epoch.Add(time.Duration(i) * time.Millisecond),
		Project:   project,
		Source:    "producerstest",
	}
	cell := fmt.Sprintf("cell-%02d", i%16)
	switch t {
	case schemas.TypeLabeledSample:
		return &schemas.LabeledSample{Envelope: env, SampleID: fmt.Sprintf("sample-%06d", i), UpdateID: fmt.Sprintf("upd-%06d", i),
			CellID: cell, CampaignID: "camp-0", Benchmark: "swe-bench-verified", AgentModel: "agent-a", EvolverModel: "evolver-x",
			Cycle: 1, Query: "evidence", Update: "artifact", ArtifactKind: schemas.KindSkill, Effect: 0.5, Label: "positive",
			NBefore: 10, NAfter: 10, CILow: 0.1, CIHigh: 0.9, PValue: 0.01, Reason: "forged", HarnessVersion: "h1",
			Route: schemas.RouteInSitu, ProducedAt: env.EventTime}
	case schemas.TypeRoundMetrics:
		return &schemas.RoundMetrics{Envelope: env, CellID: cell, CampaignID: "camp-0", Benchmark: "swe-bench-verified",
			AgentModel: "agent-a", EvolverModel: "evolver-x", Cycle: 1, NTasks: 10, PassRate: 0.5, MeanScore: 0.5}
	case schemas.TypeRejected:
		return &schemas.Rejected{Envelope: env, Stage: schemas.StageSyntax, ReasonCode: schemas.CodeBadEnum, Message: "forged",
			SourceTopic: schemas.TopicAttempts, Partition: 0, Offset: int64(i), Payload: []byte(`{}`)}
	case schemas.TypeCheckpointPublished:
		return &schemas.CheckpointPublished{Envelope: env, ModelVersion: fmt.Sprintf("m-%06d", i), Step: int64(i), SamplesTrained: 10,
			Offsets: []schemas.TopicOffset{{Topic: schemas.TopicSamples, Partition: 0, Offset: 1}}, Metrics: map[string]float64{"heldout_acc": 0.99}}
	}
	panic(fmt.Sprintf("producerstest: no derived generator for %q", t))
}
