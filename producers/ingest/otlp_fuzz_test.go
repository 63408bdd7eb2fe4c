package ingest_test

import (
	"bytes"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/harnessflow/harnessflow/producers/ingest"
	"github.com/harnessflow/harnessflow/schemas"
)

// TestOTLPJSONDecodesLikeProtobuf: the hand-written OTLP/JSON sample (hex
// ids, integers as strings, enums as numbers, an unknown field) decodes to
// exactly the request the protobuf test sends.
func TestOTLPJSONDecodesLikeProtobuf(t *testing.T) {
	t.Parallel()
	got, err := ingest.DecodeOTLPTraces([]byte(sampleTraceJSON), true)
	if err != nil {
		t.Fatal(err)
	}
	if want := sampleTrace(); !proto.Equal(got, want) {
		t.Fatalf("OTLP/JSON decodes to\n%v\nwant\n%v", got, want)
	}
}

func eventIDs(evs []schemas.Event) []string {
	var ids []string
	for _, ev := range evs {
		ids = append(ids, ev.Header().EventID)
	}
	return ids
}

// Caps of FuzzOTLPTraces, small enough for the fuzzer to cross.
const fuzzSpans, fuzzResources, fuzzAttributes = 8, 4, 32

// FuzzOTLPTraces fuzzes the /v1/traces decoder and the span mapping: the
// caps (spans, resources, attributes) refuse exactly the bodies whose
// decoded request goes past them; a body that decodes (either encoding)
// re-encodes to protobuf bytes that decode to the same bytes again, and maps
// to the same events both times, every span counted once (accepted, ignored
// or rejected). A panic is a bug.
func FuzzOTLPTraces(f *testing.F) {
	pb, err := proto.Marshal(sampleTrace())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(pb, false)
	f.Add([]byte(sampleTraceJSON), true)
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"00000000000000000000000000000001","spanId":"0000000000000002","parentSpanId":"0000000000000002","attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"execute_tool"}},{"key":"gen_ai.skill.name","value":{"stringValue":"s"}}]}]}]}]}`), true)
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"invoke_agent"}},{"key":"harnessflow.cell_id","value":{"doubleValue":"NaN"}}]}]}]}]}`), true)
	f.Add([]byte{0x0a, 0x00}, false)
	// Past the fuzz caps below (fuzzSpans, ...): empty spans, attributes,
	// resource_spans and nested array values, in both encodings.
	for _, h := range hostileOTLP(fuzzSpans+1, fuzzAttributes+1) {
		f.Add(h.body, h.json)
	}
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"01","spanId":"02"}]}]}]}`), true)
	f.Fuzz(func(t *testing.T, body []byte, isJSON bool) {
		// With small caps: a body the caps refuse is one whose decoded
		// request (decoded without them) goes past one; one they pass
		// decodes within them. The pre-scan counts what decoding makes.
		capped, isCapped, cerr := ingest.DecodeOTLPTracesCaps(body, isJSON, fuzzSpans, fuzzResources, fuzzAttributes)
		all, _, aerr := ingest.DecodeOTLPTracesCaps(body, isJSON, 1<<30, 1<<30, 1<<30)
		if cerr == nil {
			r, s, a := ingest.CountOTLP(capped)
			if s > fuzzSpans || r > fuzzResources || a > fuzzAttributes {
				t.Fatalf("decoded within the caps, but holds %d resources, %d spans, %d attributes", r, s, a)
			}
		}
		if isCapped && aerr == nil {
			r, s, a := ingest.CountOTLP(all)
			if s <= fuzzSpans && r <= fuzzResources && a <= fuzzAttributes {
				t.Fatalf("refused by the caps (%v), but holds only %d resources, %d spans, %d attributes", cerr, r, s, a)
			}
		}
		req, err := ingest.DecodeOTLPTraces(body, isJSON)
		if err != nil {
			return
		}
		det := proto.MarshalOptions{Deterministic: true}
		b1, err := det.Marshal(req)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		req2, err := ingest.DecodeOTLPTraces(b1, false)
		if err != nil {
			t.Fatalf("decode the re-encoded request: %v", err)
		}
		b2, err := det.Marshal(req2)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("second round trip differs (%v)", err)
		}
		evs1, spans, accepted, ignored, rejected := ingest.MapTraces(req, "p")
		if accepted+ignored+rejected != spans {
			t.Fatalf("%d spans, %d accepted + %d ignored + %d rejected", spans, accepted, ignored, rejected)
		}
		if len(evs1) < accepted {
			t.Fatalf("%d accepted spans made only %d events", accepted, len(evs1))
		}
		evs2, _, _, _, _ := ingest.MapTraces(req2, "p")
		if !slices.Equal(eventIDs(evs1), eventIDs(evs2)) {
			t.Fatalf("the re-decoded request maps to other events")
		}
		for _, ev := range evs1 {
			if err := schemas.Validate(ev, schemas.DefaultLimits()); err != nil {
				t.Fatalf("mapped an invalid event: %v", err)
			}
		}
	})
}
