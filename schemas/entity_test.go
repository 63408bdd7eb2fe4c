package schemas

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestEntity names each fixture's entity from its ids.
func TestEntity(t *testing.T) {
	t.Parallel()
	want := map[Type]string{
		TypeCampaignDeclared:    "campaign camp-1",
		TypeCellStarted:         "cell cell-7 (campaign camp-1)",
		TypeTaskAttempt:         "task task-19 attempt 1 (cell cell-7)",
		TypeSkillEvent:          "skill git on task task-19 attempt 1 (cell cell-7)",
		TypeHarnessUpdate:       "update upd-2 (cell cell-7)",
		TypeAdherenceJudgment:   "judgment of skill git on task task-19 attempt 1 (cell cell-7)",
		TypeCellFinished:        "cell cell-7",
		TypeLabeledSample:       "sample s-1 (update upd-2, cell cell-7)",
		TypeRoundMetrics:        "round 2 (cell cell-7)",
		TypeRejected:            "dead letter of hf.cells/3@1234567",
		TypeCheckpointPublished: "checkpoint rm-000042",
	}
	fx := fixturesV1()
	for _, typ := range AllTypes {
		if got := Entity(fx[typ]); got != want[typ] {
			t.Errorf("Entity(%s) = %q, want %q", typ, got, want[typ])
		}
	}
	if got := Entity(nil); got != "" {
		t.Errorf("Entity(nil) = %q", got)
	}
	// No ids: the type and the event id; an odd id is quoted, a long one cut.
	if got := Entity(&HarnessUpdate{Envelope: Envelope{EventID: "e-1"}}); got != "harness_update e-1" {
		t.Errorf("no ids: %q", got)
	}
	if got := Entity(&HarnessUpdate{CellID: "c 3"}); got != `cell "c 3"` {
		t.Errorf("only the cell, with a blank: %q", got)
	}
	long := Entity(&HarnessUpdate{UpdateID: strings.Repeat("é", 200), CellID: "c"})
	if !utf8.ValidString(long) || len(long) > maxEntityID+40 || !strings.Contains(long, "…") {
		t.Errorf("long id not cut on a rune boundary: %q", long)
	}
}

// TestPayloadEntity: the ids of bytes that do not decode, as far as they
// read; nothing from bytes that name nothing.
func TestPayloadEntity(t *testing.T) {
	t.Parallel()
	fx := fixturesV1()
	u, err := Encode(fx[TypeHarnessUpdate])
	if err != nil {
		t.Fatal(err)
	}
	a, err := Encode(fx[TypeTaskAttempt])
	if err != nil {
		t.Fatal(err)
	}
	cut := strings.Index(string(a), "h2") // harness_version: attempt read, the rest cut
	bad := append([]byte(nil), u...)
	bad[len(bad)-1] = 7 // rolled_back: a boolean byte that is not 0 or 1
	confluent := binary.BigEndian.AppendUint32([]byte{ConfluentMagic}, 1)
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"whole", u, "update upd-2 (cell cell-7)"},
		{"corrupt tail", bad, "update upd-2 (cell cell-7)"},
		{"truncated after the attempt", a[:cut], "task task-19 attempt 1 (cell cell-7)"},
		{"truncated in the task id", a[:strings.Index(string(a), "task-19")+3], "cell cell-7"},
		{"truncated in the envelope", a[:14], ""},
		{"unknown fingerprint, topic of two types", append([]byte{0xC3, 0x01, 1, 2, 3, 4, 5, 6, 7, 8}, a[10:]...), ""},
		{"json", []byte(` {"type":"harness_update","update_id":"u-17","cell_id":"c-3","cycle":"x"}`), "update u-17 (cell c-3)"},
		{"json truncated", []byte(`{"cell_id":"c-3","type":"task_attempt","attempt":2,"task_id":"t-1","score":[1,`), "task t-1 attempt 2 (cell c-3)"},
		{"json without type", []byte(`{"cell_id":"c-3"}`), "cell c-3"},
		{"json without type, topic of two types", []byte(`{"cell_id":"c-3"}`), ""},
		{"json not an object", []byte(`["task_attempt"]`), ""},
		{"confluent, topic of one type", append(confluent, a[10:]...), "task task-19 attempt 1 (cell cell-7)"},
		{"newer version, topic of one type", append([]byte{0xC3, 0x01, 1, 2, 3, 4, 5, 6, 7, 8}, a[10:]...), "task task-19 attempt 1 (cell cell-7)"},
		{"garbage", []byte("not avro at all"), ""},
		{"empty", nil, ""},
	} {
		if got := PayloadEntity(caseTopic(c.name), c.b); got != c.want {
			t.Errorf("%s: PayloadEntity = %q, want %q", c.name, got, c.want)
		}
	}
}

// caseTopic is hf.cells (two event types) for the cases named so, else
// hf.attempts.
func caseTopic(name string) string {
	if strings.Contains(name, "two types") {
		return TopicCells
	}
	return TopicAttempts
}

// TestNewRejectedNamesEntity: the message is prefixed with the event's
// entity, or the payload's when there is no event, and stays valid UTF-8
// when cut.
func TestNewRejectedNamesEntity(t *testing.T) {
	t.Parallel()
	fx := fixturesV1()
	u, _ := Encode(fx[TypeHarnessUpdate])
	o := Origin{Topic: TopicUpdates, Payload: u[:60]}
	if r := NewRejected("s", StageDecode, CodeMalformed, "truncated", o, 0); r.Message != "update upd-2 (cell cell-7): truncated" {
		t.Errorf("from the payload: %q", r.Message)
	}
	o.Event = fx[TypeTaskAttempt]
	if r := NewRejected("s", StageSyntax, CodeBadEnum, "x", o, 0); r.Message != "task task-19 attempt 1 (cell cell-7): x" {
		t.Errorf("from the event: %q", r.Message)
	}
	o = Origin{Topic: TopicUpdates, Payload: []byte("junk")}
	if r := NewRejected("s", StageDecode, CodeMalformed, "junk", o, 0); r.Message != "junk" {
		t.Errorf("nothing to name: %q", r.Message)
	}
	r := NewRejected("s", StageDecode, CodeMalformed, strings.Repeat("ü", MaxRejectedMessage), o, 0)
	if len(r.Message) > MaxRejectedMessage || len(r.Message) < MaxRejectedMessage-3 || !utf8.ValidString(r.Message) {
		t.Errorf("cut message: %d bytes, valid UTF-8 %v", len(r.Message), utf8.ValidString(r.Message))
	}
}

// FuzzPayloadEntity: PayloadEntity never panics and names in valid UTF-8,
// within bounds; bytes that decode are named as their event is.
func FuzzPayloadEntity(f *testing.F) {
	for _, ev := range fixturesV1() {
		b, _ := Encode(ev)
		f.Add(b)
		f.Add(b[:len(b)/2])
		j, _ := MarshalJSON(ev)
		f.Add(j)
		f.Add(j[:len(j)/2])
	}
	f.Add([]byte("not avro"))
	f.Fuzz(func(t *testing.T, b []byte) {
		name := PayloadEntity(TopicAttempts, b)
		if !utf8.ValidString(name) || len(name) > 8*maxEntityID {
			t.Fatalf("name %q", name)
		}
		if ev, err := Decode(b); err == nil && name != Entity(ev) {
			t.Fatalf("decoded %s named %q, want %q", ev.Type(), name, Entity(ev))
		}
	})
}

// TestRejectedNamesEntityForEveryCode: for every reason code of this
// package, an input that fails with it (checked), dead-lettered from its
// payload alone, gets a message that names the entity. A new Code* constant
// in errors.go fails the test until a case covers it.
func TestRejectedNamesEntityForEveryCode(t *testing.T) {
	t.Parallel()
	fx := fixturesV1()
	a, _ := Encode(fx[TypeTaskAttempt])
	jsonUpdate := func(extra string) []byte {
		return []byte(`{"type":"harness_update","event_id":"e-1","event_time":"2026-12-05T10:00:00.000Z","project":"p","source":"s",` +
			`"cell_id":"c-3","update_id":"u-17","cycle":1,"from_version":"h0","to_version":"h1","artifacts":[],"evidence_task_ids":["t"]` + extra + `}`)
	}
	jsonAttempt := func(status string, score, input string) []byte {
		return []byte(`{"type":"task_attempt","event_id":"e-2","event_time":"2026-12-05T10:00:00.000Z","cell_id":"c-3","task_id":"t-1",` +
			`"attempt":2,"status":"` + status + `","score":` + score + `,"success":true,"task_input":"` + input + `"}`)
	}
	const upd, att = "update u-17 (cell c-3)", "task t-1 attempt 2 (cell c-3)"
	_, srv := newFakeRegistry(t) // knows no schema id
	withRegistry := &Decoder{Registry: NewRegistry(srv.URL, nil)}
	confluent := append([]byte{ConfluentMagic, 0, 0, 0, 99}, a[10:]...)
	cases := []struct {
		code, topic string
		payload     []byte
		want        string
		dec         *Decoder // decode with it (Confluent framing); nil: Decode or ParseJSON
	}{
		{CodeMalformed, TopicAttempts, a[:len(a)-20], "task task-19 attempt 1 (cell cell-7)", nil},
		{CodeUnknownFingerprint, TopicAttempts, append([]byte{0xC3, 0x01, 9, 9, 9, 9, 9, 9, 9, 9}, a[10:]...), "task task-19 attempt 1 (cell cell-7)", nil},
		{CodeUnknownType, TopicUpdates, []byte(`{"type":"harness_updated","cell_id":"c-3","update_id":"u-17"}`), upd, nil},
		{CodeMissingField, TopicUpdates, bytes.Replace(jsonUpdate(""), []byte(`"from_version":"h0",`), nil, 1), upd, nil},
		{CodeWrongType, TopicUpdates, bytes.Replace(jsonUpdate(""), []byte(`"cycle":1`), []byte(`"cycle":"one"`), 1), upd, nil},
		{CodeBadEnum, TopicAttempts, jsonAttempt("exploded", "1", ""), att, nil},
		{CodeOutOfRange, TopicAttempts, jsonAttempt("ok", "2", ""), att, nil},
		{CodeTooLarge, TopicAttempts, jsonAttempt("ok", "1", strings.Repeat("x", 200)), att, nil},
		{CodeUnknownField, TopicUpdates, jsonUpdate(`,"colour":"red"`), upd, nil},
		{CodeUnknownSchemaID, TopicAttempts, confluent, "task task-19 attempt 1 (cell cell-7)", withRegistry},
		{CodeSchemaRegistry, TopicAttempts, confluent, "task task-19 attempt 1 (cell cell-7)", &Decoder{}},
	}
	seen := map[string]bool{}
	for _, c := range cases {
		seen[c.code] = true
		var err error
		if c.dec != nil {
			_, err = c.dec.Decode(context.Background(), c.payload)
		} else if c.payload[0] == '{' {
			_, err = ParseJSON(c.payload, Limits{TaskInput: 100})
		} else {
			_, err = Decode(c.payload)
		}
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Code != c.code {
			t.Errorf("%s: the input fails with %v, not this code", c.code, err)
			continue
		}
		r := NewRejected("s", StageSyntax, c.code, err.Error(), Origin{Topic: c.topic, Payload: c.payload}, 0)
		if !strings.HasPrefix(r.Message, c.want+": ") {
			t.Errorf("%s: message %q does not start with %q", c.code, r.Message, c.want+": ")
		}
	}
	src, err := os.ReadFile("errors.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^\s*Code[A-Za-z]+ = "([a-z_]+)"`).FindAllStringSubmatch(string(src), -1) {
		if !seen[m[1]] {
			t.Errorf("reason code %q has no case", m[1])
		}
	}
	if len(seen) < 9 {
		t.Errorf("%d codes covered", len(seen))
	}
}
