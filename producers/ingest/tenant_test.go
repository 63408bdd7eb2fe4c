package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers/ingest"
	"github.com/harnessflow/harnessflow/producers/producerstest"
	"github.com/harnessflow/harnessflow/schemas"
)

// This file tests what one tenant holding one project's tokens can do to
// the others through the gateway (issue 35): send the pipeline's own event
// types, take the in-flight budget with several tokens or with uploads that
// declare a tiny length and stall, and make the OTLP decoder allocate
// gigabytes from a small gzip body.

// TestInternalTypesRefused: /v1/events answers 400 naming the type to each
// of the pipeline's derived types (alone, or among valid events), with a
// tenant token, and nothing of such a request reaches any topic.
func TestInternalTypesRefused(t *testing.T) {
	t.Parallel()
	g := startGateway(t, 1<<20)
	for i, typ := range producerstest.DerivedTypes {
		forged := jsonOf(t, producerstest.Derived(typ, i, ""))
		for _, body := range []string{forged, "[" + jsonOf(t, producerstest.TaskAttempt(i, "")) + "," + forged + "]"} {
			code, resp := g.post("tok-a", body)
			var items []ingest.ItemError
			if code != http.StatusBadRequest || json.Unmarshal(resp, &items) != nil || len(items) != 1 ||
				!strings.Contains(items[0].Error, string(typ)) || !strings.Contains(items[0].Error, "written by the pipeline") {
				t.Fatalf("%s: %d %s, want 400 with one item naming the type", typ, code, resp)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, typ := range producerstest.DerivedTypes {
		msgs, err := producerstest.ReadTopic(ctx, g.addr, schemas.TopicFor(typ))
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 0 {
			t.Errorf("%d messages on %s after refused requests", len(msgs), schemas.TopicFor(typ))
		}
	}
	if n := len(g.stored()); n != 0 {
		t.Errorf("%d raw events stored from refused requests, want 0", n)
	}
}

// stall opens a connection that sends an upload's headers (and head, the
// start of its body) and then nothing: the gateway holds the request until
// its read timeout. The connection closes when the test ends (before the
// gateway stops).
func stall(t *testing.T, g *gateway, token string, contentLength int, head string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s", token, contentLength, head)
}

// TestInflightBudgetIsPerProject: eight stalled uploads over four tokens of
// projA take projA's share only (a quarter of the budget, shared by its
// tokens): a fifth token of projA is refused with a 503 naming the project's
// budget, and projB's request is accepted. Before, each token had its own
// share and the eight took the whole budget from projB.
func TestInflightBudgetIsPerProject(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	const maxBody = 64 << 10
	g := runGateway(t, ingest.Config{Brokers: []string{b.Addr()}, MaxBody: maxBody, ReadTimeout: 20 * time.Second,
		Tokens: map[string]string{"tok-a2": "projA", "tok-a3": "projA", "tok-a4": "projA", "tok-a5": "projA"}})
	for i := 0; i < 8; i++ {
		stall(t, g, []string{"tok-a", "tok-a2", "tok-a3", "tok-a4"}[i%4], maxBody, "[")
	}
	one := func(n int) string { return jsonOf(t, producerstest.TaskAttempt(n, "")) }
	var msg []byte
	testenv.Eventually(t, 30*time.Second, "projA's stalled uploads fill its share", func() bool {
		var code int
		code, msg = g.post("tok-a5", one(1))
		return code == http.StatusServiceUnavailable
	})
	if !strings.Contains(string(msg), "this project's in-flight budget") {
		t.Errorf("503 for projA's fifth token: %s; want it to say the project's budget is full", msg)
	}
	if code, msg := g.post("tok-b", one(2)); code != http.StatusAccepted {
		t.Fatalf("projB while projA's uploads stall over four tokens: %d %s, want 202", code, msg)
	}
}

// TestTinyContentLengthUploadsAreBounded: an upload declaring
// Content-Length: 1 and then stalling takes MinHold (64 KiB) of the budget,
// not one byte, so one project has at most MaxInflightPerProject/MinHold of
// them in flight (32 with MaxBody 1 MiB): the next is refused 503 and
// another project is served. Before, their number was bounded only by open
// files.
func TestTinyContentLengthUploadsAreBounded(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	g := runGateway(t, ingest.Config{Brokers: []string{b.Addr()}, MaxBody: 1 << 20, ReadTimeout: 20 * time.Second})
	for i := 0; i < 40; i++ {
		stall(t, g, "tok-a", 1, "")
	}
	var msg []byte
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last answer to projA: %s", msg)
		}
	})
	testenv.Eventually(t, 30*time.Second, "32 stalled one-byte uploads fill projA's share", func() bool {
		var code int
		code, msg = g.post("tok-a", jsonOf(t, producerstest.TaskAttempt(1, "")))
		if code == http.StatusAccepted {
			// It was read before some stalled uploads (a loaded machine),
			// took a share while delivered, and one of them was refused
			// 503 meanwhile: one stalled upload more takes its place.
			stall(t, g, "tok-a", 1, "")
		}
		return code == http.StatusServiceUnavailable && strings.Contains(string(msg), " 32 requests of this project")
	})
	if code, msg := g.post("tok-b", jsonOf(t, producerstest.TaskAttempt(2, ""))); code != http.StatusAccepted {
		t.Fatalf("projB while projA stalls: %d %s, want 202", code, msg)
	}
}

// hostile is an OTLP body of many empty items.
type hostile struct {
	name string
	body []byte
	json bool
}

func pbField(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// pbRepeat is n empty occurrences of field num.
func pbRepeat(num protowire.Number, n int) []byte {
	one := pbField(nil, num, nil)
	return bytes.Repeat(one, n)
}

// hostileOTLP are bodies of n empty spans, resource_spans and scope_spans,
// and of a empty attributes, span events, array elements and entity ref
// keys, in protobuf and (the first three kinds) OTLP/JSON.
func hostileOTLP(n, a int) []hostile {
	req := func(rs []byte) []byte { return pbField(nil, 1, rs) }
	inSpan := func(span []byte) []byte { return req(pbField(nil, 2, pbField(nil, 2, span))) }
	jsonList := func(pre string, n int, post string) []byte {
		return []byte(pre + strings.TrimSuffix(strings.Repeat("{},", n), ",") + post)
	}
	return []hostile{
		{"protobuf spans", req(pbField(nil, 2, pbRepeat(2, n))), false},
		{"protobuf resource_spans", pbRepeat(1, n), false},
		{"protobuf scope_spans", req(pbRepeat(2, n)), false},
		{"protobuf attributes", inSpan(pbRepeat(9, a)), false},
		{"protobuf span events", inSpan(pbRepeat(11, a)), false},
		{"protobuf array values", inSpan(pbField(nil, 9, pbField(nil, 2, pbField(nil, 5, pbRepeat(1, a))))), false},
		{"protobuf entity ref keys", req(pbField(nil, 1, pbField(nil, 3, pbRepeat(3, a)))), false},
		{"json spans", jsonList(`{"resourceSpans":[{"scopeSpans":[{"spans":[`, n, `]}]}]}`), true},
		{"json resource_spans", jsonList(`{"resource_spans":[`, n, `]}`), true},
		{"json attributes", jsonList(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"attributes":[`, a, `]}]}]}]}`), true},
	}
}

// TestOTLPHostileBodiesRefused: gzip bodies of a few KB that inflate to
// 2 MiB (MaxBody) of empty spans, attributes or resource_spans, far past
// the caps, are answered 413 naming the cap, in both encodings. Before,
// empty attributes and resource_spans were answered 200 after decoding
// them all (8 MiB of empty spans took 832 MB).
func TestOTLPHostileBodiesRefused(t *testing.T) {
	t.Parallel()
	const maxBody = 2 << 20
	g := startGateway(t, maxBody)
	const size = maxBody - 64
	for _, h := range hostileOTLP(size/3, size/3) {
		t.Run(h.name, func(t *testing.T) {
			body := h.body
			if len(body) > maxBody {
				t.Fatalf("%d bytes, over MaxBody", len(body))
			}
			ct := "application/x-protobuf"
			if h.json {
				ct = "application/json"
			}
			code, _, resp := g.postOTLP("tok-a", ct, "gzip", gzipped(t, body))
			if code != http.StatusRequestEntityTooLarge || !bytes.Contains(resp, []byte("over the cap of one request")) {
				t.Fatalf("%d bytes inflated: %d %.300q, want 413 naming the cap", len(body), code, resp)
			}
		})
	}
	if n := len(g.stored()); n != 0 {
		t.Errorf("%d events stored from refused requests", n)
	}
}

// allocated is the bytes the heap allocated while f ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestOTLPDecodeMemoryIsBoundedByCaps: decoding an 8 MiB hostile body
// allocates at most a few times the body (the decoders stop at the cap), not
// the ~100 bytes an empty span or attribute costs once decoded (832 MB for
// 8 MiB of empty spans before).
func TestOTLPDecodeMemoryIsBoundedByCaps(t *testing.T) {
	t.Parallel()
	const size = 8 << 20
	d := ingest.DefaultConfig()
	for _, h := range hostileOTLP(size/3, size/3) {
		var capped bool
		var err error
		n := allocated(func() {
			_, capped, err = ingest.DecodeOTLPTracesCaps(h.body, h.json, d.MaxEvents, d.MaxOTLPResources, d.MaxOTLPAttributes)
		})
		t.Logf("%s: %d bytes: %v; %d bytes allocated", h.name, len(h.body), err, n)
		if !capped {
			t.Errorf("%s: %v, want a cap error", h.name, err)
		}
		if n > 64<<20 {
			t.Errorf("%s: decoding allocated %d MiB, want at most 64 MiB", h.name, n>>20)
		}
	}
}

// BenchmarkOTLPHostileBody reports the bytes one decode of an 8 MiB hostile
// body allocates (alloc-bytes/op, the bound on its peak heap), next to a
// clean request of 10000 spans.
func BenchmarkOTLPHostileBody(b *testing.B) {
	const size = 8 << 20
	d := ingest.DefaultConfig()
	cases := hostileOTLP(size/3, size/3)
	clean := sampleTrace()
	spans := clean.ResourceSpans[0].ScopeSpans[0].Spans
	for len(spans) < d.MaxEvents-len(clean.ResourceSpans[0].ScopeSpans[0].Spans) {
		spans = append(spans, clean.ResourceSpans[0].ScopeSpans[0].Spans...)
	}
	clean.ResourceSpans[0].ScopeSpans[0].Spans = spans
	cleanPB, err := proto.Marshal(clean)
	if err != nil {
		b.Fatal(err)
	}
	cases = append(cases, hostile{"clean protobuf 10000 spans", cleanPB, false})
	for _, h := range cases {
		b.Run(strings.ReplaceAll(h.name, " ", "_"), func(b *testing.B) {
			b.SetBytes(int64(len(h.body)))
			b.ReportAllocs()
			var total uint64
			for i := 0; i < b.N; i++ {
				total += allocated(func() {
					_, _, _ = ingest.DecodeOTLPTracesCaps(h.body, h.json, d.MaxEvents, d.MaxOTLPResources, d.MaxOTLPAttributes)
				})
			}
			b.ReportMetric(float64(total)/float64(b.N), "alloc-bytes/op")
		})
	}
}
