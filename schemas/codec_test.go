package schemas

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/linkedin/goavro/v2"
)

// edgeFixtures are valid events with empty optional values, extremes and
// nulls, on top of the fully populated fixtures.
func edgeFixtures() []Event {
	return []Event{
		&CellStarted{CampaignID: "c", CellID: "x", Benchmark: "b", AgentModel: "a", Route: RouteBaseline,
			Seed: math.MinInt32, BatchSize: math.MaxInt32},
		&TaskAttempt{Envelope: Envelope{EventTime: time.UnixMilli(-1).UTC()}, CellID: "c", TaskID: "t", Attempt: 1,
			Status: StatusTimeout, InputTokens: math.MaxInt64, OutputTokens: 0, DurationMs: 1 << 40},
		&AdherenceJudgment{CellID: "c", TaskID: "t", Attempt: 2, SkillName: "s", JudgeModel: "j"},
		&HarnessUpdate{CellID: "c", UpdateID: "u", FromVersion: "a", ToVersion: "b"},
		&CheckpointPublished{ModelVersion: "m", Step: 0},
		&Rejected{Stage: StageDecode, ReasonCode: CodeMalformed, Partition: -1, Offset: -1},
		&RoundMetrics{CellID: "c", Cycle: 0},
	}
}

func allFixtures() []Event {
	var out []Event
	fx := fixturesV1()
	for _, t := range AllTypes {
		out = append(out, fx[t])
	}
	return append(out, edgeFixtures()...)
}

// TestHandCodecMatchesGoavro cross-checks the hand-written codec against
// goavro, the reference implementation, in both directions.
func TestHandCodecMatchesGoavro(t *testing.T) {
	t.Parallel()
	for _, ev := range allFixtures() {
		t.Run(string(ev.Type()), func(t *testing.T) {
			ti := infos[ev.Type()]
			native, err := toNative(ev)
			if err != nil {
				t.Fatal(err)
			}
			want, err := ti.current.codec.SingleFromNative(nil, native)
			if err != nil {
				t.Fatalf("goavro encode: %v", err)
			}
			got, err := Encode(ev)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Type() != TypeCheckpointPublished || len(ev.(*CheckpointPublished).Metrics) < 2 {
				// (goavro writes map entries in Go's random order; we sort.)
				if !bytes.Equal(got, want) {
					t.Fatalf("hand encoding differs from goavro:\n got %x\nwant %x", got, want)
				}
			}
			// goavro decodes our bytes; resolved back, the event is unchanged.
			back, rest, err := ti.current.codec.NativeFromSingle(got)
			if err != nil || len(rest) != 0 {
				t.Fatalf("goavro decode of our bytes: %v (rest %d)", err, len(rest))
			}
			ev2, err := fromNative(ti, back.(map[string]any))
			if err != nil {
				t.Fatal(err)
			}
			ev3, err := Decode(want)
			if err != nil {
				t.Fatalf("Decode of goavro bytes: %v", err)
			}
			withID := withDerivedID(ev)
			if !reflect.DeepEqual(ev2, withID) || !reflect.DeepEqual(ev3, withID) {
				t.Fatalf("mismatch:\nfromNative %#v\nDecode     %#v\nwant       %#v", ev2, ev3, withID)
			}
		})
	}
}

// withDerivedID returns ev as the wire carries it: an empty id derived, empty
// slices as nil.
func withDerivedID(ev Event) Event {
	b, err := Encode(ev)
	if err != nil {
		panic(err)
	}
	out, err := Decode(b)
	if err != nil {
		panic(err)
	}
	if out.Header().EventID != DeriveEventID(ev) && ev.Header().EventID == "" {
		panic("derived id not written")
	}
	return out
}

// rabinSpec is CRC-64-AVRO written from the Avro specification, to check
// goavro's fingerprints independently.
func rabinSpec(buf []byte) uint64 {
	const empty = 0xc15d213aa4d7a795
	var table [256]uint64
	for i := range table {
		fp := uint64(i)
		for j := 0; j < 8; j++ {
			fp = (fp >> 1) ^ (empty & -(fp & 1))
		}
		table[i] = fp
	}
	fp := uint64(empty)
	for _, b := range buf {
		fp = (fp >> 8) ^ table[byte(fp)^b]
	}
	return fp
}

func TestFingerprintIsRabinOfCanonicalForm(t *testing.T) {
	t.Parallel()
	for _, typ := range AllTypes {
		sv := infos[typ].current
		canon := sv.codec.CanonicalSchema()
		if !strings.HasPrefix(canon, `{"name":"dev.harnessflow.`) {
			t.Errorf("%s: canonical form %q does not start with the full name", typ, canon[:40])
		}
		if got := rabinSpec([]byte(canon)); got != sv.fp || got != Fingerprint(typ) {
			t.Errorf("%s: fingerprint %016x, spec Rabin %016x", typ, sv.fp, got)
		}
		b, _ := Encode(fixturesV1()[typ])
		if !bytes.Equal(b[:2], []byte{0xC3, 0x01}) || binary.LittleEndian.Uint64(b[2:10]) != sv.fp {
			t.Errorf("%s: bad single-object header %x", typ, b[:10])
		}
	}
}

func TestRoundTripEveryType(t *testing.T) {
	t.Parallel()
	for _, ev := range allFixtures() {
		t.Run(string(ev.Type()), func(t *testing.T) {
			want := withDerivedID(ev)
			// JSON -> struct -> Avro -> struct -> JSON
			j1, err := MarshalJSON(ev)
			if err != nil {
				t.Fatal(err)
			}
			e1, err := ParseJSON(j1, DefaultLimits())
			if err != nil {
				t.Fatalf("ParseJSON(%s): %v", j1, err)
			}
			bin, err := Encode(e1)
			if err != nil {
				t.Fatal(err)
			}
			e2, err := Decode(bin)
			if err != nil {
				t.Fatal(err)
			}
			j2, err := MarshalJSON(e2)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(j1, j2) {
				t.Fatalf("JSON changed:\n%s\n%s", j1, j2)
			}
			if !reflect.DeepEqual(e2, want) {
				t.Fatalf("event changed:\n%#v\nwant\n%#v", e2, want)
			}
		})
	}
}

func TestEncodeDoesNotModifyAndAppends(t *testing.T) {
	t.Parallel()
	ev := &CellFinished{CellID: "c", Status: CellAborted}
	prefix := []byte("keep")
	b, err := AppendEncode(prefix, ev)
	if err != nil {
		t.Fatal(err)
	}
	if ev.EventID != "" || !bytes.HasPrefix(b, []byte("keep\xC3\x01")) {
		t.Fatalf("AppendEncode modified the event or lost the prefix: %q", b[:8])
	}
	bad := &CellFinished{CellID: "c", Status: "gone"}
	b2, err := AppendEncode(prefix, bad)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Code != CodeBadEnum || string(b2) != "keep" {
		t.Fatalf("bad enum: %v, %q", err, b2)
	}
	if fe.Error() != `cell_finished.status: "gone" is not one of completed, failed, aborted` {
		t.Fatalf("message %q", fe.Error())
	}
	if _, err := Encode((*TaskAttempt)(nil)); err == nil {
		t.Fatal("nil event encoded")
	}
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	good, _ := Encode(fixturesV1()[TypeTaskAttempt])
	cases := []struct {
		name string
		b    []byte
		is   error
		msg  string
	}{
		{"empty", nil, ErrMalformed, "not Avro single-object encoded (0 bytes, want 0xC3 0x01 + 8-byte fingerprint + body)"},
		{"bad magic", append([]byte{0xC3, 0x02}, good[2:]...), ErrMalformed, "not Avro single-object encoded"},
		{"short header", good[:9], ErrMalformed, "not Avro single-object encoded (9 bytes"},
		{"unknown fingerprint", append([]byte{0xC3, 0x01, 1, 2, 3, 4, 5, 6, 7, 8}, good[10:]...), ErrUnknownFingerprint,
			"schema fingerprint 0807060504030201 is not a known schema"},
		{"trailing", append(append([]byte{}, good...), 0), ErrMalformed, "task_attempt: 1 trailing bytes at body byte"},
		{"huge string", append(append([]byte{}, good[:10]...), 0xfe, 0xff, 0xff, 0xff, 0x0f), ErrMalformed,
			"task_attempt.event_id: length 2147483647 exceeds the 0 bytes left at body byte 5"},
		{"bad utf8", append(append([]byte{}, good[:10]...), 0x02, 0xff), ErrMalformed, "task_attempt.event_id: invalid UTF-8 in string"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev, err := Decode(c.b)
			if ev != nil || !errors.Is(err, c.is) {
				t.Fatalf("Decode = %v, %v; want %v", ev, err, c.is)
			}
			if !strings.HasPrefix(err.Error(), c.msg) {
				t.Fatalf("message %q, want prefix %q", err.Error(), c.msg)
			}
		})
	}
	// Every truncation of every golden fails cleanly.
	for _, typ := range AllTypes {
		b, _ := Encode(fixturesV1()[typ])
		for n := 0; n < len(b); n++ {
			if ev, err := Decode(b[:n]); err == nil || !errors.Is(err, ErrMalformed) {
				t.Fatalf("%s truncated to %d: %v, %v", typ, n, ev, err)
			}
		}
	}
}

// v0TaskAttempt is a hypothetical older task_attempt schema: no task_input,
// int token counts, an extra field the current schema dropped. It shows how
// bytes of an older version are resolved to the current struct.
const v0TaskAttempt = `{"type":"record","name":"TaskAttempt","namespace":"dev.harnessflow","fields":[
 {"name":"event_id","type":"string"},{"name":"event_time","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"project","type":"string"},{"name":"source","type":"string"},
 {"name":"cell_id","type":"string"},{"name":"task_id","type":"string"},{"name":"stream_idx","type":"int"},
 {"name":"cycle","type":"int"},{"name":"attempt","type":"int"},{"name":"harness_version","type":"string"},
 {"name":"status","type":{"type":"enum","name":"AttemptStatus","symbols":["ok","error","interrupted","timeout"]}},
 {"name":"score","type":"float"},{"name":"success","type":"boolean"},{"name":"final","type":"boolean"},
 {"name":"skills_available","type":"int"},{"name":"skills_loaded","type":{"type":"array","items":"string"}},
 {"name":"input_tokens","type":"int"},{"name":"output_tokens","type":"int"},{"name":"duration_ms","type":"long"},
 {"name":"legacy_note","type":"string"}]}`

func TestResolveOlderWriterSchema(t *testing.T) {
	t.Parallel()
	w, err := resolveWriter(v0TaskAttempt)
	if err != nil {
		t.Fatal(err)
	}
	if w.info.typ != TypeTaskAttempt || w.known != nil {
		t.Fatalf("resolved to %v (known %v)", w.info.typ, w.known)
	}
	native := map[string]any{"event_id": "e", "event_time": fixtureTime, "project": "p", "source": "s",
		"cell_id": "c", "task_id": "t", "stream_idx": int32(1), "cycle": int32(2), "attempt": int32(1),
		"harness_version": "h", "status": "error", "score": float32(0.5), "success": false, "final": true,
		"skills_available": int32(0), "skills_loaded": []any{"a"}, "input_tokens": int32(10),
		"output_tokens": int32(20), "duration_ms": int64(30), "legacy_note": "dropped"}
	body, err := w.codec.BinaryFromNative(nil, native)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := decodeWithCodec(w.info, w.codec, body)
	if err != nil {
		t.Fatal(err)
	}
	want := &TaskAttempt{Envelope: Envelope{EventID: "e", EventTime: fixtureTime, Project: "p", Source: "s"},
		CellID: "c", TaskID: "t", StreamIdx: 1, Cycle: 2, Attempt: 1, HarnessVersion: "h", Status: StatusError,
		Score: 0.5, Final: true, SkillsLoaded: []string{"a"}, InputTokens: 10, OutputTokens: 20, DurationMs: 30}
	if !reflect.DeepEqual(ev, want) {
		t.Fatalf("resolved\n%#v\nwant\n%#v", ev, want)
	}
	if _, err := decodeWithCodec(w.info, w.codec, body[:len(body)-3]); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated old-version body: %v", err)
	}
	if _, err := resolveWriter(`{"type":"record","name":"Other","namespace":"x","fields":[]}`); !errors.Is(err, ErrUnknownType) {
		t.Fatalf("foreign record: %v", err)
	}
}

func TestCampaignDefaultsFromOlderWriter(t *testing.T) {
	t.Parallel()
	old := `{"type":"record","name":"CampaignDeclared","namespace":"dev.harnessflow","fields":[
 {"name":"event_id","type":"string"},{"name":"campaign_id","type":"string"}]}`
	w, err := resolveWriter(old)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := w.codec.BinaryFromNative(nil, map[string]any{"event_id": "e", "campaign_id": "c"})
	ev, err := decodeWithCodec(w.info, w.codec, body)
	if err != nil {
		t.Fatal(err)
	}
	c := ev.(*CampaignDeclared)
	if c.LabelEpsilon != 0.02 || c.LabelAlpha != 0.05 || c.CampaignID != "c" {
		t.Fatalf("defaults not applied: %+v", c)
	}
}

// TestDeriveEventIDProject: the project is part of every project event's
// identity, so two projects using the same cell (or campaign, sample) ids get
// different event ids; dead letters and checkpoints are not a project's.
func TestDeriveEventIDProject(t *testing.T) {
	t.Parallel()
	pairs := []struct{ a, b Event }{
		{&CellStarted{CellID: "x", Envelope: Envelope{Project: "acme"}}, &CellStarted{CellID: "x", Envelope: Envelope{Project: "evil"}}},
		{&CellFinished{CellID: "x", Envelope: Envelope{Project: "acme"}}, &CellFinished{CellID: "x", Envelope: Envelope{Project: "evil"}}},
		{&TaskAttempt{CellID: "x", TaskID: "t", Envelope: Envelope{Project: "acme"}}, &TaskAttempt{CellID: "x", TaskID: "t", Envelope: Envelope{Project: "evil"}}},
		{&HarnessUpdate{CellID: "x", UpdateID: "u", Envelope: Envelope{Project: "acme"}}, &HarnessUpdate{CellID: "x", UpdateID: "u", Envelope: Envelope{Project: "evil"}}},
		{&CampaignDeclared{CampaignID: "c", Envelope: Envelope{Project: "acme"}}, &CampaignDeclared{CampaignID: "c", Envelope: Envelope{Project: "evil"}}},
		{&RoundMetrics{CellID: "x", Cycle: 1, Envelope: Envelope{Project: "acme"}}, &RoundMetrics{CellID: "x", Cycle: 1, Envelope: Envelope{Project: "evil"}}},
		// Length-prefixed: moving bytes between project and cell id is
		// another identity.
		{&CellStarted{CellID: "bx", Envelope: Envelope{Project: "a"}}, &CellStarted{CellID: "x", Envelope: Envelope{Project: "ab"}}},
	}
	for _, p := range pairs {
		if DeriveEventID(p.a) == DeriveEventID(p.b) {
			t.Errorf("%s: projects %q and %q derive the same id", p.a.Type(), p.a.Header().Project, p.b.Header().Project)
		}
	}
	// The default project keeps the ids derived before projects were
	// hashed (re-sending after an upgrade adds no duplicates), and they
	// are not another project's.
	def := &CellStarted{CellID: "x", Envelope: Envelope{Project: DefaultProject}}
	if got, want := DeriveEventID(def), legacyID(TypeCellStarted, "x"); got != want {
		t.Errorf("default project's id %s, want the unhashed-project id %s", got, want)
	}
	for _, p := range []string{"", "acme", "x"} {
		other := &CellStarted{CellID: "x", Envelope: Envelope{Project: p}}
		if DeriveEventID(other) == DeriveEventID(def) {
			t.Errorf("project %q derives the default project's id", p)
		}
	}
	r1 := &Rejected{SourceTopic: "hf.cells", Partition: 1, Offset: 2, Envelope: Envelope{Project: "acme"}}
	r2 := &Rejected{SourceTopic: "hf.cells", Partition: 1, Offset: 2, Envelope: Envelope{Project: "evil"}}
	if DeriveEventID(r1) != DeriveEventID(r2) {
		t.Error("a dead letter's id depends on the project; its Kafka coordinates identify it")
	}
}

func TestDeriveEventID(t *testing.T) {
	t.Parallel()
	a := &TaskAttempt{CellID: "c", TaskID: "t", Attempt: 1, Cycle: 2, Score: 0.1}
	b := &TaskAttempt{CellID: "c", TaskID: "t", Attempt: 1, Cycle: 2, Score: 0.9, Envelope: Envelope{Source: "s"}}
	c := &TaskAttempt{CellID: "c", TaskID: "t", Attempt: 2, Cycle: 2}
	d := &TaskAttempt{CellID: "ct", TaskID: "", Attempt: 1, Cycle: 2}
	if DeriveEventID(a) != DeriveEventID(b) {
		t.Fatal("non-identifying fields changed the id")
	}
	if DeriveEventID(a) == DeriveEventID(c) || DeriveEventID(a) == DeriveEventID(d) {
		t.Fatal("identifying fields did not change the id")
	}
	if DeriveEventID(&CellStarted{CellID: "x"}) == DeriveEventID(&CellFinished{CellID: "x"}) {
		t.Fatal("type not part of the id")
	}
	if id := DeriveEventID(a); len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
		t.Fatalf("id %q is not 32 hex digits", id)
	}
	for _, ti := range infos {
		for _, f := range ti.idFields {
			if _, ok := ti.byName[f]; !ok {
				t.Errorf("%s: id field %q not in the table", ti.typ, f)
			}
		}
	}
}

func TestZeroTimeRoundTrips(t *testing.T) {
	t.Parallel()
	ev := &CellFinished{CellID: "c", Status: CellFailed}
	b, _ := Encode(ev)
	back, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Header().EventTime.IsZero() {
		t.Fatalf("zero time decoded as %v", back.Header().EventTime)
	}
}

var _ = goavro.Union

func TestSchemaVersionsCompatible(t *testing.T) {
	t.Parallel()
	for _, v := range Versions() {
		if err := CheckCompatible(Schema(v.Type), v.Schema); err != nil {
			t.Errorf("%s v%d cannot be read by the current schema: %v", v.Type, v.Version, err)
		}
	}
	if err := CheckCompatible(Schema(TypeTaskAttempt), v0TaskAttempt); err != nil {
		t.Errorf("v0 task_attempt: %v", err)
	}
	// The current schema as writer, v0 as reader: task_input is dropped
	// (fine), but v0's legacy_note has no default, and double -> float is no
	// promotion.
	if err := CheckCompatible(v0TaskAttempt, Schema(TypeTaskAttempt)); err == nil ||
		err.Error() != "score: writer type double cannot be read as float" {
		t.Errorf("incompatible direction: %v", err)
	}
	noDefault := strings.Replace(Schema(TypeCellFinished), `"fields": [`, `"fields": [{"name":"new_field","type":"string"},`, 1)
	if err := CheckCompatible(noDefault, Schema(TypeCellFinished)); err == nil || err.Error() != "new_field: new field without a default" {
		t.Errorf("field without default: %v", err)
	}
}

// legacyID is DeriveEventID without the project part.
func legacyID(t Type, parts ...string) string {
	b := appendIDPart(nil, string(t))
	for _, p := range parts {
		b = appendIDPart(b, p)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// TestCheckpointPublishedV1StillDecodes: a checkpoint_published written
// before schema v2 (no checkpoint_uri, checkpoint_sha256) decodes with both
// empty, and a v2 event round-trips both, in Avro and in JSON.
func TestCheckpointPublishedV1StillDecodes(t *testing.T) {
	t.Parallel()
	old, err := os.ReadFile(filepath.Join("testdata", "golden", "v1", "checkpoint_published.bin"))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := Decode(old)
	if err != nil {
		t.Fatalf("decode v1 checkpoint_published: %v", err)
	}
	ck := ev.(*CheckpointPublished)
	if ck.CheckpointURI != "" || ck.CheckpointSHA256 != "" || ck.ModelVersion != "rm-000042" {
		t.Fatalf("v1 event decodes to %+v", ck)
	}
	if v := infos[TypeCheckpointPublished].current.version; v != 2 {
		t.Fatalf("checkpoint_published current schema v%d, want v2", v)
	}
	v2 := fixturesV2()[TypeCheckpointPublished]
	b, err := Encode(v2)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(b)
	if err != nil || !reflect.DeepEqual(back, v2) {
		t.Fatalf("v2 round trip: %v\n%#v", err, back)
	}
	j, err := MarshalJSON(v2)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := ParseJSON(j, DefaultLimits())
	if err != nil || !reflect.DeepEqual(jb, v2) {
		t.Fatalf("v2 JSON round trip: %v\n%s\n%#v", err, j, jb)
	}
	if !bytes.Contains(j, []byte(`"checkpoint_sha256":"9f86d0`)) {
		t.Fatalf("JSON lacks checkpoint_sha256: %s", j)
	}
}
