package chsink

import (
	"reflect"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/schemas"
)

// TestRefusedChecksSurviveNewerInserts: a cell waiting for its late
// refusals to be read keeps them when a newer attempts insert replaces its
// check, and a refusals' check keeps the attempts' ids (issue 42).
func TestRefusedChecksSurviveNewerInserts(t *testing.T) {
	k := chddl.CellKey{Project: "p", CellID: "c"}
	now := time.Now()
	var v verifySet
	v.expect([]chddl.CellCheck{{Key: k, EventIDs: []string{"a1"}}}, now, 0, 10)
	v.expect([]chddl.CellCheck{{Key: k, RefusedIDs: []string{"a1"}}}, now, 0, 10)
	v.expect([]chddl.CellCheck{{Key: k, EventIDs: []string{"a2"}}}, now, 0, 10)
	checks, _ := v.due(now, 10)
	want := []chddl.CellCheck{{Key: k, EventIDs: []string{"a2"}, RefusedIDs: []string{"a1"}}}
	if !reflect.DeepEqual(checks, want) {
		t.Fatalf("due %+v, want %+v", checks, want)
	}
	v = verifySet{}
	v.expect([]chddl.CellCheck{{Key: k, EventIDs: []string{"a1"}}}, now, 0, 10)
	v.expect([]chddl.CellCheck{{Key: k, RefusedIDs: []string{"a1"}}}, now, 0, 10)
	if checks, _ := v.due(now, 10); !reflect.DeepEqual(checks, []chddl.CellCheck{{Key: k, EventIDs: []string{"a1"}, RefusedIDs: []string{"a1"}}}) {
		t.Fatalf("due %+v: the attempts' ids were dropped", checks)
	}
}

// TestRefusedAttemptsFromDeadLetters: only late_beyond_window dead letters
// whose payload decodes to a task attempt of the dead letter's project
// give a cell to recompute and a refusal to verify.
func TestRefusedAttemptsFromDeadLetters(t *testing.T) {
	att := &schemas.TaskAttempt{Envelope: schemas.Envelope{EventID: "a9", EventTime: time.Unix(1, 0).UTC(), Project: "p", Source: "s"},
		CellID: "c", TaskID: "t", Attempt: 1, Status: schemas.StatusOK, SkillsLoaded: []string{}}
	payload, err := schemas.Encode(att)
	if err != nil {
		t.Fatal(err)
	}
	dl := func(code, project string, payload []byte) row {
		return row{ev: schemas.NewRejected("p", schemas.StageLimit, code, "m", schemas.Origin{Topic: schemas.TopicAttempts, Project: project, Payload: payload}, 0)}
	}
	rows := []row{
		dl(ReasonLateBeyondWindow, "p", payload),
		dl("unknown_cell", "p", payload),
		dl(ReasonLateBeyondWindow, "other", payload),
		dl(ReasonLateBeyondWindow, "p", payload[:len(payload)-3]),
	}
	got := refusedAttempts(rows)
	if len(got) != 1 || got[0].ev.(*schemas.TaskAttempt).EventID != "a9" {
		t.Fatalf("refused attempts %+v, want a9 alone", got)
	}
	if id := refusedEventID(rows[0].ev.(*schemas.Rejected)); id != "a9" {
		t.Fatalf("source_event_id %q, want a9", id)
	}
	if id := refusedEventID(rows[3].ev.(*schemas.Rejected)); id != "" {
		t.Fatalf("source_event_id of a cut payload %q, want ''", id)
	}
	parts := attemptParts(&job{}, got, false)
	addRefusedChecks(parts, got)
	if len(parts) != 1 || !reflect.DeepEqual(parts[0].checks, []chddl.CellCheck{{Key: chddl.CellKey{Project: "p", CellID: "c"}, RefusedIDs: []string{"a9"}}}) {
		t.Fatalf("parts %+v", parts)
	}
}
