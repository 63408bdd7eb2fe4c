package schemas

import (
	"bytes"
	"context"
	"testing"
)

// FuzzDecode: Decode never panics; whatever decodes re-encodes, and the
// re-encoding decodes to the same event (compared by its canonical bytes,
// since NaN != NaN).
func FuzzDecode(f *testing.F) {
	for _, ev := range fixturesV1() {
		b, _ := Encode(ev)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := Decode(b)
		if err != nil {
			if ev != nil {
				t.Fatal("event returned with an error")
			}
			return
		}
		roundTripAvro(t, ev)
	})
}

func roundTripAvro(t *testing.T, ev Event) {
	b2, err := Encode(ev)
	if err != nil {
		t.Fatalf("decoded event does not encode: %v", err)
	}
	ev2, err := Decode(b2)
	if err != nil {
		t.Fatalf("re-encoded bytes do not decode: %v", err)
	}
	b3, err := Encode(ev2)
	if err != nil || !bytes.Equal(b2, b3) {
		t.Fatalf("round trip changed the event: %x vs %x (%v)", b2, b3, err)
	}
}

// FuzzParseJSON: ParseJSON never panics; whatever parses marshals, and the
// marshaled JSON parses to the same event.
func FuzzParseJSON(f *testing.F) {
	for _, ev := range fixturesV1() {
		j, _ := MarshalJSON(ev)
		f.Add(j)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := ParseJSON(b, DefaultLimits())
		if err != nil {
			return
		}
		j, err := MarshalJSON(ev)
		if err != nil {
			t.Fatalf("parsed event does not marshal: %v", err)
		}
		ev2, err := ParseJSON(j, DefaultLimits())
		if err != nil {
			t.Fatalf("marshaled JSON does not parse: %v\n%s", err, j)
		}
		j2, err := MarshalJSON(ev2)
		if err != nil || !bytes.Equal(j, j2) {
			t.Fatalf("JSON round trip changed:\n%s\n%s", j, j2)
		}
		roundTripAvro(t, ev2)
	})
}

// FuzzDecodeConfluent: Confluent-framed input through a Decoder backed by a
// registry that knows every current schema (ids 1..11 in AllTypes order).
func FuzzDecodeConfluent(f *testing.F) {
	reg, srv := newFakeRegistry(f)
	for _, typ := range AllTypes {
		reg.add(Subject(typ), Schema(typ))
	}
	dec := &Decoder{Registry: NewRegistry(srv.URL, srv.Client())}
	for i, typ := range AllTypes {
		b, _ := Encode(fixturesV1()[typ])
		f.Add(append([]byte{0, 0, 0, 0, byte(i + 1)}, b[10:]...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := dec.Decode(context.Background(), b)
		if err != nil {
			return
		}
		roundTripAvro(t, ev)
	})
}
