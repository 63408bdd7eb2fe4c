package jsonl

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/harnessflow/harnessflow/producers/producerstest"
	"github.com/harnessflow/harnessflow/schemas"
)

// payloadMembers returns the payload_* members of a dead letter's line,
// failing the test when the line is not one JSON object.
func payloadMembers(t testing.TB, line []byte) (event json.RawMessage, errText, text *string) {
	t.Helper()
	var m struct {
		Type  string          `json:"type"`
		Event json.RawMessage `json:"payload_event"`
		Err   *string         `json:"payload_error"`
		Text  *string         `json:"payload_text"`
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	if err := dec.Decode(&m); err != nil || dec.More() || m.Type != string(schemas.TypeRejected) {
		t.Fatalf("line is not one rejected JSON object (%v): %q", err, line)
	}
	return m.Event, m.Err, m.Text
}

// TestRejectedLine: each payload encoding a dead letter can carry, decoded
// or explained.
func TestRejectedLine(t *testing.T) {
	ctx := context.Background()
	ev := producerstest.TaskAttempt(7, "p")
	single, err := schemas.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	reg := producerstest.NewRegistry(t)
	confluent, err := schemas.NewRegistry(reg.URL, nil).EncodeConfluent(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	jsonText, err := schemas.MarshalJSON(ev)
	if err != nil {
		t.Fatal(err)
	}
	nan := producerstest.TaskAttempt(8, "p")
	nan.Score = math.NaN()
	nanB, err := schemas.Encode(nan)
	if err != nil {
		t.Fatal(err)
	}
	withReg := (&schemas.Decoder{Registry: schemas.NewRegistry(reg.URL, nil)}).Decode
	noReg := (&schemas.Decoder{}).Decode
	for _, c := range []struct {
		name    string
		decode  decodeFunc
		payload []byte
		errHas  string // "" : payload_event is ev's JSON form
		text    bool   // payload_text expected
	}{
		{"avro single-object", noReg, single, "", false},
		{"confluent with registry", withReg, confluent, "", false},
		{"json text", noReg, jsonText, "", false},
		{"confluent without registry", noReg, confluent, "needs a schema registry (pass --schema-registry)", false},
		{"truncated avro", noReg, single[:len(single)-5], "truncated", false},
		{"garbage text", noReg, []byte("not avro"), "neither single-object", true},
		{"json not an event", noReg, []byte(`{"type":"task_attempt","status":"exploded"}`), "JSON text: ", true},
		{"NaN", noReg, nanB, "decoded as task_attempt, but JSON cannot carry it", false},
		{"empty", noReg, nil, "empty payload", false},
	} {
		r := schemas.NewRejected("s", schemas.StageDecode, schemas.CodeMalformed, "m",
			schemas.Origin{Topic: schemas.TopicAttempts, Payload: c.payload}, 0)
		line, err := rejectedLine(ctx, c.decode, r)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		plain, _ := schemas.MarshalJSON(r)
		if !bytes.HasPrefix(line, plain[:len(plain)-1]) {
			t.Errorf("%s: the dead letter's own JSON form is not kept: %s", c.name, line)
		}
		got, errText, text := payloadMembers(t, line)
		if c.errHas == "" {
			if errText != nil || string(got) != string(jsonText) {
				t.Errorf("%s: payload_event %s, payload_error %v; want %s", c.name, got, errText, jsonText)
			}
			continue
		}
		if got != nil || errText == nil || !strings.Contains(*errText, c.errHas) {
			t.Errorf("%s: payload_event %s, payload_error %v; want an error containing %q", c.name, got, errText, c.errHas)
		}
		if c.text != (text != nil) || (text != nil && *text != string(c.payload)) {
			t.Errorf("%s: payload_text %v, want it %v", c.name, text, c.text)
		}
	}
}

// FuzzRejectedLine: whatever the payload, the dead letter's line is one
// JSON object with exactly one of payload_event and payload_error; a
// payload_event parses as an event (or is the decoded event as it is, when
// Validate refuses it) that writes back byte for byte and survives an Avro
// round trip.
func FuzzRejectedLine(f *testing.F) {
	for _, t := range producerstest.RawTypes {
		ev := producerstest.Event(t, 3, "p")
		b, _ := schemas.Encode(ev)
		j, _ := schemas.MarshalJSON(ev)
		f.Add(b)
		f.Add(b[:len(b)/2])
		f.Add(j)
		f.Add(j[:len(j)/2])
	}
	// An event that decodes but Validate refuses (a semantic dead letter).
	bad := producerstest.Event(schemas.TypeTaskAttempt, 3, "p").(*schemas.TaskAttempt)
	bad.Cycle = -12
	if b, err := schemas.Encode(bad); err == nil {
		f.Add(b)
	}
	f.Add([]byte{0, 0, 0, 0, 1, 2})
	f.Add([]byte("\xff\xfe not text"))
	decode := (&schemas.Decoder{}).Decode
	f.Fuzz(func(t *testing.T, payload []byte) {
		r := schemas.NewRejected("s", schemas.StageDecode, schemas.CodeMalformed, "m",
			schemas.Origin{Topic: schemas.TopicAttempts, Payload: payload}, 0)
		line, err := rejectedLine(context.Background(), decode, r)
		if err != nil {
			t.Fatal(err)
		}
		got, errText, _ := payloadMembers(t, line)
		if (got == nil) == (errText == nil) {
			t.Fatalf("want exactly one of payload_event and payload_error: %s", line)
		}
		if got == nil {
			return
		}
		ev, err := schemas.ParseJSON(got, schemas.Limits{})
		if err != nil {
			// A dead letter's event may be one Validate refuses (that can
			// be why it is a dead letter): then payload_event must be the
			// decoded event as it is, failing Validate the same way.
			dec, derr := decode(context.Background(), payload)
			if derr != nil {
				t.Fatalf("payload_event does not parse (%v) and the payload does not decode: %v\n%s", err, derr, got)
			}
			if verr := schemas.Validate(dec, schemas.Limits{}); verr == nil || verr.Error() != err.Error() {
				t.Fatalf("payload_event does not parse: %v (Validate of the decoded event: %v)\n%s", err, verr, got)
			}
			ev = dec
		}
		again, err := schemas.MarshalJSON(ev)
		if err != nil || !bytes.Equal(again, got) {
			t.Fatalf("payload_event does not write back: %v\n%s\n%s", err, got, again)
		}
		b, err := schemas.Encode(ev)
		if err != nil {
			t.Fatalf("payload_event does not encode: %v", err)
		}
		ev2, err := schemas.Decode(b)
		if err != nil {
			t.Fatalf("re-encoded payload_event does not decode: %v", err)
		}
		if b2, _ := schemas.Encode(ev2); !bytes.Equal(b, b2) {
			t.Fatal("Avro round trip changed the event")
		}
	})
}
