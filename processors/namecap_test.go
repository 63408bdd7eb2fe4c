package processors

import (
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/schemas"
)

// TestIDOverTheNameCapIsDeadLettered: a task_attempt whose task_id is over
// schemas.DefaultNameCap is a dead letter of code too_large that names the
// field; the next attempt of the cell goes on.
func TestIDOverTheNameCapIsDeadLettered(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	now := time.Now()
	l := newLocal(t, Config{PendingTimeout: time.Minute})
	env := func(id string) schemas.Envelope {
		return schemas.Envelope{EventID: id, EventTime: t0, Project: "p", Source: "test"}
	}
	enc := func(ev schemas.Event) []byte {
		t.Helper()
		b, err := schemas.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var derived []kafka.Message
	feed := func(topic string, ev schemas.Event) {
		l.feed(topic, kafka.Message{Key: []byte("c-3"), Value: enc(ev), Time: t0}, now, &derived)
	}
	feed(schemas.TopicCells, &schemas.CellStarted{Envelope: env("start"), CampaignID: "k", CellID: "c-3", Benchmark: "b",
		AgentModel: "a", Route: schemas.RouteBaseline, H0Version: "h0", BatchSize: 1, MaxAttempts: 1, TaskCount: 2})
	derived = derived[:0]
	long := strings.Repeat("t", schemas.DefaultNameCap+1)
	feed(schemas.TopicAttempts, &schemas.TaskAttempt{Envelope: env("e-long"), CellID: "c-3", TaskID: long, Attempt: 1,
		HarnessVersion: "h0", Status: schemas.StatusOK, Score: 1, Success: true, Final: true})
	var dead []*schemas.Rejected
	for _, m := range derived {
		if m.Topic == schemas.TopicDLQ {
			ev, err := schemas.Decode(m.Value)
			if err != nil {
				t.Fatal(err)
			}
			dead = append(dead, ev.(*schemas.Rejected))
		}
	}
	if len(dead) != 1 || dead[0].ReasonCode != schemas.CodeTooLarge || dead[0].Stage != schemas.StageSyntax ||
		!strings.Contains(dead[0].Message, "task_attempt.task_id: 257 bytes") {
		t.Fatalf("dead letters %+v, want one too_large at stage syntax naming task_attempt.task_id", dead)
	}
}
