package chsink

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/schemas"
)

// TestRejectionKeepsItsIdentity: a decode dead letter keeps the id, source,
// caps and time the sink always gave it, so rows written before and after a
// restart (or an upgrade) deduplicate.
func TestRejectionKeepsItsIdentity(t *testing.T) {
	s := &Sink{cfg: Config{PayloadCap: 8}}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.FixedZone("x", 3600))
	m := kafka.Message{Topic: schemas.TopicAttempts, Partition: 3, Offset: 42, Time: at, Value: []byte("not avro at all")}
	rec := s.rejection(m, errors.New(strings.Repeat("e", 5000)))
	if rec.EventID != "sink-decode:"+schemas.TopicAttempts+":3:42" || rec.Source != "sink" || rec.Stage != schemas.StageDecode ||
		rec.ReasonCode != schemas.CodeMalformed || rec.SourceTopic != schemas.TopicAttempts || rec.Partition != 3 || rec.Offset != 42 {
		t.Fatalf("dead letter %+v", rec)
	}
	if string(rec.Payload) != "not avro" || len(rec.Message) != 4096 || !rec.EventTime.Equal(at) || rec.EventTime.Location() != time.UTC {
		t.Fatalf("payload %q, message of %d bytes, time %v", rec.Payload, len(rec.Message), rec.EventTime)
	}
	m.Value[0] = 'N'
	if rec.Payload[0] != 'n' {
		t.Fatal("the payload shares the message's bytes")
	}
	m.Time = time.Time{}
	if rec := s.rejection(m, schemas.ErrUnknownFingerprint); time.Since(rec.EventTime) > time.Minute || rec.ReasonCode != schemas.CodeUnknownFingerprint {
		t.Fatalf("no message time: event time %v, code %s", rec.EventTime, rec.ReasonCode)
	}
}

// TestRejectionNamesEntity: a payload cut short still names the ids it
// holds before the cut in the dead letter's message.
func TestRejectionNamesEntity(t *testing.T) {
	s := &Sink{cfg: Config{PayloadCap: 1 << 10}}
	ev := &schemas.TaskAttempt{Envelope: schemas.Envelope{EventID: "e-1", Project: "p", Source: "s"}, CellID: "c-3", TaskID: "t-1",
		Attempt: 2, HarnessVersion: "h0", Status: schemas.StatusOK, Score: 0.5}
	b, err := schemas.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	b = b[:len(b)-8]
	_, derr := schemas.Decode(b)
	rec := s.rejection(kafka.Message{Topic: schemas.TopicAttempts, Value: b}, derr)
	if want := "task t-1 attempt 2 (cell c-3): " + derr.Error(); rec.Message != want || rec.ReasonCode != schemas.CodeMalformed {
		t.Fatalf("message %q (%s), want %q", rec.Message, rec.ReasonCode, want)
	}
}
