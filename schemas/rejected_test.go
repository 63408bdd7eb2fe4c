package schemas_test

import (
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/schemas"
)

func TestNewRejected(t *testing.T) {
	t.Parallel()
	payload := []byte("0123456789")
	at := time.Date(2026, 12, 5, 10, 0, 0, 123e6, time.FixedZone("x", 3600))
	o := schemas.Origin{Topic: "hf.raw", Partition: 3, Offset: 42, Time: at, Payload: payload, Project: "p1"}
	r := schemas.NewRejected("harnessflow-process", schemas.StageDecode, "bad_json", strings.Repeat("m", 5000), o, 4)
	if string(r.Payload) != "0123" || len(r.Message) != schemas.MaxRejectedMessage {
		t.Fatalf("caps: payload %q, message %d bytes", r.Payload, len(r.Message))
	}
	payload[0] = 'X'
	if r.Payload[0] != '0' {
		t.Fatal("payload aliases the caller's bytes")
	}
	if !r.EventTime.Equal(at) || r.EventTime.Location() != time.UTC || r.Project != "p1" || r.Source != "harnessflow-process" {
		t.Fatalf("envelope %+v", r.Envelope)
	}
	if err := schemas.Validate(r, schemas.Limits{}); err != nil {
		t.Fatalf("not a valid event: %v", err)
	}
	again := schemas.NewRejected("harnessflow-process", schemas.StageDecode, "other", "", o, 0)
	if r.EventID == "" || again.EventID != r.EventID {
		t.Fatalf("ids %q, %q: not derived from the coordinates alone", r.EventID, again.EventID)
	}
	o.Offset++
	if next := schemas.NewRejected("s", schemas.StageDecode, "c", "", o, 0); next.EventID == r.EventID {
		t.Fatal("a different offset yields the same id")
	}
	if now := schemas.NewRejected("s", schemas.StageDecode, "c", "", schemas.Origin{Topic: "t"}, 0); now.EventTime.IsZero() {
		t.Fatal("zero origin time not replaced by now")
	}
}
