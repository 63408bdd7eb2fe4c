package chsink_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/sinks/chsink"
)

// TestSinkLateRefusalRecomputesCellScores (issue 42): the dead letter of an
// attempt the processors refused as late_beyond_window is written with the
// refused event's own id (rejected_events.source_event_id, decoded from its
// payload), and its cell's cell_scores summary is recomputed without that
// attempt although the attempt arrived first: the summary and its
// version (one more refusal seen) say so.
func TestSinkLateRefusalRecomputesCellScores(t *testing.T) {
	broker := testenv.Kafka(t)
	ch := testenv.ClickHouse(t)
	brokers := []string{broker.Addr()}
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	att := func(id, task string, pass bool) *schemas.TaskAttempt {
		return &schemas.TaskAttempt{
			Envelope: schemas.Envelope{EventID: id, EventTime: t0, Project: "p", Source: "test"},
			CellID:   "c-late", TaskID: task, Attempt: 1, Status: schemas.StatusOK, Success: pass, Final: true,
			Score: map[bool]float64{true: 1, false: 0}[pass], SkillsLoaded: []string{},
		}
	}
	late := att("la-2", "t2", false)
	produce(t, brokers, []schemas.Event{att("la-1", "t1", true), late})
	_, stop := runSink(t, chsink.Config{Brokers: brokers, ClickHouse: ch.Addr, Database: ch.Database, Group: "gl",
		Topics: []string{schemas.TopicAttempts, schemas.TopicDLQ}, MaxAge: 50 * time.Millisecond})
	defer stop()
	summary := "SELECT concat(toString(argMax(n_tasks, _version)), ' ', toString(argMax(pass_rate, _version)), ' ', toString(max(_version))) FROM cell_scores WHERE cell_id = 'c-late'"
	waitSummary := func(want string) {
		t.Helper()
		testenv.WaitFor(t, 60*time.Second, "cell_scores of c-late = "+want, func() (bool, string) {
			var got string
			err := ch.Conn.QueryRow(t.Context(), summary).Scan(&got)
			return err == nil && got == want, fmt.Sprintf("%q (%v)", got, err)
		})
	}
	waitSummary(fmt.Sprintf("2 50 %d", chddl.NaturalKeyBase+2))

	payload, err := schemas.Encode(late)
	if err != nil {
		t.Fatal(err)
	}
	dl := schemas.NewRejected("harnessflow-process", schemas.StageSemantic, chsink.ReasonLateBeyondWindow, "cycle 1 closed",
		schemas.Origin{Topic: schemas.TopicAttempts, Event: late, Project: "p", Time: t0, Payload: payload}, 64<<10)
	produce(t, brokers, []schemas.Event{dl})
	waitSummary(fmt.Sprintf("1 100 %d", chddl.NaturalKeyBase+3))
	expectView(t, ch.Conn, "SELECT source_event_id FROM rejected_events FINAL WHERE reason_code = 'late_beyond_window'", "la-2")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
