package ingest_test

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/harnessflow/harnessflow/producers/ingest"
	"github.com/harnessflow/harnessflow/schemas"
)

// baseNS is the sample trace's start: 2026-12-01T10:00:00Z.
const baseNS = uint64(1796119200000000000)

func at(ms int) uint64 { return baseNS + uint64(ms)*1e6 }

func unhex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// kv builds an attribute from a Go value (string, int, float64, bool,
// []string).
func kv(k string, v any) *commonpb.KeyValue {
	var av *commonpb.AnyValue
	switch x := v.(type) {
	case string:
		av = &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: x}}
	case int:
		av = &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: int64(x)}}
	case float64:
		av = &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: x}}
	case bool:
		av = &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: x}}
	case []string:
		arr := &commonpb.ArrayValue{}
		for _, s := range x {
			arr.Values = append(arr.Values, &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}})
		}
		av = &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: arr}}
	default:
		panic("kv: unsupported type")
	}
	return &commonpb.KeyValue{Key: k, Value: av}
}

const (
	traceA = "0102030405060708090a0b0c0d0e0f10"
	traceB = "11111111111111111111111111111111"
	traceC = "22222222222222222222222222222222"
	traceD = "33333333333333333333333333333333"
)

func span(trace, id, parent, name string, startMS, endMS int, code tracepb.Status_StatusCode, attrs ...*commonpb.KeyValue) *tracepb.Span {
	s := &tracepb.Span{
		TraceId: unhex(trace), SpanId: unhex(id), Name: name, Kind: tracepb.Span_SPAN_KIND_INTERNAL,
		StartTimeUnixNano: at(startMS), EndTimeUnixNano: at(endMS), Attributes: attrs,
		Status: &tracepb.Status{Code: code},
	}
	if parent != "" {
		s.ParentSpanId = unhex(parent)
	}
	return s
}

const (
	okCode    = tracepb.Status_STATUS_CODE_OK
	unset     = tracepb.Status_STATUS_CODE_UNSET
	errorCode = tracepb.Status_STATUS_CODE_ERROR
)

// sampleTrace is the request both encodings send (sampleTraceJSON is the
// same by hand): two attempts with skill loads, in traces A and D, spans to
// ignore, and spans to reject: trace C's attempt (score 1.5) with its skill
// span (refused with its trace), and trace B's orphan skill span. See
// wantSample for what it becomes.
func sampleTrace() *coltrace.ExportTraceServiceRequest {
	invoke := kv("gen_ai.operation.name", "invoke_agent")
	tool := kv("gen_ai.operation.name", "execute_tool")
	return &coltrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{
		{
			Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{kv("service.name", "solver")}},
			ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{
				span(traceA, "0000000000000a01", "", "invoke_agent solver", 0, 1500, okCode, invoke,
					kv("harnessflow.cell_id", "cell-otlp"), kv("harnessflow.task_id", "t1"), kv("harnessflow.stream_idx", 3),
					kv("harnessflow.cycle", 2), kv("harnessflow.attempt", 2), kv("harnessflow.harness_version", "h2"),
					kv("harnessflow.score", 0.75), kv("harnessflow.success", true), kv("harnessflow.final", false),
					kv("harnessflow.skills_available", 4), kv("gen_ai.usage.input_tokens", 100), kv("gen_ai.usage.output_tokens", 50)),
				span(traceA, "0000000000000b01", "0000000000000a01", "execute_tool plan", 10, 90, unset, tool, kv("gen_ai.tool.name", "plan")),
				span(traceA, "0000000000000c01", "0000000000000b01", "execute_tool load_skill pdf", 20, 30, unset, tool,
					kv("gen_ai.tool.name", "load_skill"), kv("gen_ai.skill.name", "pdf"), kv("harnessflow.turn", 2)),
				span(traceA, "0000000000000c02", "0000000000000a01", "execute_tool skills review", 40, 50, okCode, tool,
					kv("gen_ai.tool.name", "skills"), kv("gen_ai.skill.name", "review")),
				span(traceA, "0000000000000c03", "0000000000000a01", "execute_tool load_skill_resource review references/rules.md", 60, 70, unset, tool,
					kv("gen_ai.tool.name", "load_skill_resource"), kv("gen_ai.skill.name", "review"), kv("gen_ai.skill.resource.name", "references/rules.md")),
				span(traceA, "0000000000000c04", "0000000000000a01", "execute_tool run_skill_script review scripts/check.py", 70, 80, unset, tool,
					kv("gen_ai.tool.name", "run_skill_script"), kv("gen_ai.skill.name", "review"), kv("gen_ai.skill.resource.name", "scripts/check.py"),
					kv("process.executable.name", "python")),
				span(traceA, "0000000000000d01", "0000000000000a01", "chat model-x", 80, 90, unset, kv("gen_ai.operation.name", "chat")),
				span(traceD, "0000000000000a02", "", "invoke_agent solver", 2000, 2250, errorCode, invoke,
					kv("harnessflow.cell_id", "cell-otlp"), kv("harnessflow.task_id", "t2"), kv("harnessflow.score", 0), kv("harnessflow.success", false)),
				span(traceD, "0000000000000c05", "0000000000000a02", "execute_tool read_skill", 2100, 2150, unset, tool,
					kv("gen_ai.tool.name", "read_skill"), kv("harnessflow.skill_name", "csv"), kv("harnessflow.skill_status", "not_found"), kv("harnessflow.turn", 1)),
				span(traceD, "0000000000000a03", "", "invoke_agent helper", 3000, 3100, unset, invoke),
				span(traceC, "0000000000000a04", "", "invoke_agent solver", 3200, 3300, unset, invoke,
					kv("harnessflow.cell_id", "cell-otlp"), kv("harnessflow.task_id", "t3"), kv("harnessflow.score", 1.5), kv("harnessflow.success", true)),
				span(traceC, "0000000000000c06", "0000000000000a04", "execute_tool load_skill zip", 3210, 3220, unset, tool,
					kv("gen_ai.tool.name", "load_skill"), kv("gen_ai.skill.name", "zip")),
			}}},
		},
		{
			ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{
				span(traceB, "0000000000000e01", "0000000000000f01", "execute_tool load_skill x", 4000, 4100, unset, tool,
					kv("gen_ai.tool.name", "load_skill"), kv("gen_ai.skill.name", "x")),
			}}},
		},
	}}
}

// sampleTraceJSON is sampleTrace in OTLP/JSON, written by hand: hex ids,
// 64-bit integers as strings and as numbers, enums as names and as
// integers, and a field this receiver does not know.
const sampleTraceJSON = `{"resourceSpans":[
 {"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"solver"}}]},
  "scopeSpans":[{"spans":[
  {"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0000000000000a01","name":"invoke_agent solver","kind":1,
   "startTimeUnixNano":"1796119200000000000","endTimeUnixNano":"1796119201500000000","status":{"code":"STATUS_CODE_OK"},
   "futureField":{"x":1},
   "attributes":[
    {"key":"gen_ai.operation.name","value":{"stringValue":"invoke_agent"}},
    {"key":"harnessflow.cell_id","value":{"stringValue":"cell-otlp"}},
    {"key":"harnessflow.task_id","value":{"stringValue":"t1"}},
    {"key":"harnessflow.stream_idx","value":{"intValue":"3"}},
    {"key":"harnessflow.cycle","value":{"intValue":2}},
    {"key":"harnessflow.attempt","value":{"intValue":"2"}},
    {"key":"harnessflow.harness_version","value":{"stringValue":"h2"}},
    {"key":"harnessflow.score","value":{"doubleValue":0.75}},
    {"key":"harnessflow.success","value":{"boolValue":true}},
    {"key":"harnessflow.final","value":{"boolValue":false}},
    {"key":"harnessflow.skills_available","value":{"intValue":"4"}},
    {"key":"gen_ai.usage.input_tokens","value":{"intValue":"100"}},
    {"key":"gen_ai.usage.output_tokens","value":{"intValue":50}}]},
  {"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0000000000000b01","parentSpanId":"0000000000000a01","name":"execute_tool plan","kind":"SPAN_KIND_INTERNAL",
   "startTimeUnixNano":"1796119200010000000","endTimeUnixNano":"1796119200090000000","status":{},
   "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"execute_tool"}},{"key":"gen_ai.tool.name","value":{"stringValue":"plan"}}]},
  {"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0000000000000c01","parentSpanId":"0000000000000b01","name":"execute_tool load_skill pdf","kind":1,
   "startTimeUnixNano":"1796119200020000000","endTimeUnixNano":"1796119200030000000","status":{"code":0},
   "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"execute_tool"}},{"key":"gen_ai.tool.name","value":{"stringValue":"load_skill"}},
    {"key":"gen_ai.skill.name","value":{"stringValue":"pdf"}},{"key":"harnessflow.turn","value":{"intValue":"2"}}]},
  {"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0000000000000c02","parentSpanId":"0000000000000a01","name":"execute_tool skills review","kind":1,
   "startTimeUnixNano":"1796119200040000000","endTimeUnixNano":"1796119200050000000","status":{"code":1},
   "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"execute_tool"}},{"key":"gen_ai.tool.name","value":{"stringValue":"skills"}},
    {"key":"gen_ai.skill.name","value":{"stringValue":"review"}}]},
  {"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0000000000000c03","parentSpanId":"0000000000000a01","name":"execute_tool load_skill_resource review references/rules.md","kind":1,
   "startTimeUnixNano":"1796119200060000000","endTimeUnixNano":"1796119200070000000","status":{},
   "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"execute_tool"}},{"key":"gen_ai.tool.name","value":{"stringValue":"load_skill_resource"}},
    {"key":"gen_ai.skill.name","value":{"stringValue":"review"}},{"key":"gen_ai.skill.resource.name","value":{"stringValue":"references/rules.md"}}]},
  {"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0000000000000c04","parentSpanId":"0000000000000a01","name":"execute_tool run_skill_script review scripts/check.py","kind":1,
   "startTimeUnixNano":"1796119200070000000","endTimeUnixNano":"1796119200080000000","status":{},
   "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"execute_tool"}},{"key":"gen_ai.tool.name","value":{"stringValue":"run_skill_script"}},
    {"key":"gen_ai.skill.name","value":{"stringValue":"review"}},{"key":"gen_ai.skill.resource.name","value":{"stringValue":"scripts/check.py"}},
    {"key":"process.executable.name","value":{"stringValue":"python"}}]},
  {"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0000000000000d01","parentSpanId":"0000000000000a01","name":"chat model-x","kind":1,
   "startTimeUnixNano":"1796119200080000000","endTimeUnixNano":"1796119200090000000","status":{},
   "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"chat"}}]},
  {"traceId":"33333333333333333333333333333333","spanId":"0000000000000a02","name":"invoke_agent solver","kind":1,
   "startTimeUnixNano":"1796119202000000000","endTimeUnixNano":"1796119202250000000","status":{"code":2},
   "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"invoke_agent"}},{"key":"harnessflow.cell_id","value":{"stringValue":"cell-otlp"}},
    {"key":"harnessflow.task_id","value":{"stringValue":"t2"}},{"key":"harnessflow.score","value":{"intValue":"0"}},{"key":"harnessflow.success","value":{"boolValue":false}}]},
  {"traceId":"33333333333333333333333333333333","spanId":"0000000000000c05","parentSpanId":"0000000000000a02","name":"execute_tool read_skill","kind":1,
   "startTimeUnixNano":"1796119202100000000","endTimeUnixNano":"1796119202150000000","status":{},
   "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"execute_tool"}},{"key":"gen_ai.tool.name","value":{"stringValue":"read_skill"}},
    {"key":"harnessflow.skill_name","value":{"stringValue":"csv"}},{"key":"harnessflow.skill_status","value":{"stringValue":"not_found"}},
    {"key":"harnessflow.turn","value":{"intValue":1}}]},
  {"traceId":"33333333333333333333333333333333","spanId":"0000000000000a03","name":"invoke_agent helper","kind":1,
   "startTimeUnixNano":"1796119203000000000","endTimeUnixNano":"1796119203100000000","status":{},
   "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"invoke_agent"}}]},
  {"traceId":"22222222222222222222222222222222","spanId":"0000000000000a04","name":"invoke_agent solver","kind":1,
   "startTimeUnixNano":"1796119203200000000","endTimeUnixNano":"1796119203300000000","status":{},
   "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"invoke_agent"}},{"key":"harnessflow.cell_id","value":{"stringValue":"cell-otlp"}},
    {"key":"harnessflow.task_id","value":{"stringValue":"t3"}},{"key":"harnessflow.score","value":{"doubleValue":1.5}},{"key":"harnessflow.success","value":{"boolValue":true}}]},
  {"traceId":"22222222222222222222222222222222","spanId":"0000000000000c06","parentSpanId":"0000000000000a04","name":"execute_tool load_skill zip","kind":1,
   "startTimeUnixNano":"1796119203210000000","endTimeUnixNano":"1796119203220000000","status":{},
   "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"execute_tool"}},{"key":"gen_ai.tool.name","value":{"stringValue":"load_skill"}},
    {"key":"gen_ai.skill.name","value":{"stringValue":"zip"}}]}
 ]}]},
 {"scopeSpans":[{"spans":[
  {"traceId":"11111111111111111111111111111111","spanId":"0000000000000e01","parentSpanId":"0000000000000f01","name":"execute_tool load_skill x","kind":1,
   "startTimeUnixNano":"1796119204000000000","endTimeUnixNano":"1796119204100000000","status":{},
   "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"execute_tool"}},{"key":"gen_ai.tool.name","value":{"stringValue":"load_skill"}},
    {"key":"gen_ai.skill.name","value":{"stringValue":"x"}}]}
 ]}]}
]}`

// wantSample is what sampleTrace becomes, span by span (event ids aside),
// for a token of projA.
func wantSample() []schemas.Event {
	env := func(endMS int) schemas.Envelope {
		return schemas.Envelope{EventTime: time.Unix(0, int64(at(endMS))).UTC(), Project: "projA", Source: ingest.OTLPSource}
	}
	return []schemas.Event{
		// a01: invoke_agent with every harnessflow attribute; its skills
		// loaded are its load_skill descendants', the grandchild c01's first.
		&schemas.TaskAttempt{Envelope: env(1500), CellID: "cell-otlp", TaskID: "t1", StreamIdx: 3, Cycle: 2, Attempt: 2,
			HarnessVersion: "h2", Status: "ok", Score: 0.75, Success: true, Final: false, SkillsAvailable: 4,
			SkillsLoaded: []string{"pdf", "review"}, InputTokens: 100, OutputTokens: 50, DurationMs: 1500},
		// c01: a load_skill grandchild of a01 (through the plan span b01).
		&schemas.SkillEvent{Envelope: env(30), CellID: "cell-otlp", TaskID: "t1", Attempt: 2, Turn: 2, Tool: "load_skill", SkillName: "pdf", Status: "loaded"},
		// c02: the GenAI conventions' load-skill span (a framework's own tool name).
		&schemas.SkillEvent{Envelope: env(50), CellID: "cell-otlp", TaskID: "t1", Attempt: 2, Turn: 0, Tool: "load_skill", SkillName: "review", Status: "loaded"},
		// c03: the conventions' read-skill-resource span.
		&schemas.SkillEvent{Envelope: env(70), CellID: "cell-otlp", TaskID: "t1", Attempt: 2, Turn: 0, Tool: "load_skill_reference", SkillName: "review", Status: "loaded"},
		// a02 (trace D): defaults (attempt 1, final true), status ERROR -> error.
		&schemas.TaskAttempt{Envelope: env(2250), CellID: "cell-otlp", TaskID: "t2", Attempt: 1, Status: "error",
			Score: 0, Success: false, Final: true, SkillsLoaded: []string{}, DurationMs: 250},
		// c05: harnessflow.skill_name and skill_status.
		&schemas.SkillEvent{Envelope: env(2150), CellID: "cell-otlp", TaskID: "t2", Attempt: 1, Turn: 1, Tool: "read_skill", SkillName: "csv", Status: "not_found"},
	}
}

// Ignored: b01 (plan), c04 (a skill script run), d01 (chat), a03 (no
// cell). Rejected: a04 (score 1.5), c06 (a04's skill span: refused with
// its trace), e01 (no invoke_agent ancestor).
const sampleIgnored, sampleRejected = 4, 3

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// postOTLP posts body to /v1/traces.
func (g *gateway) postOTLP(token, contentType, contentEncoding string, body []byte) (int, http.Header, []byte) {
	g.t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.url+"/v1/traces", bytes.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if contentEncoding != "" {
		req.Header.Set("Content-Encoding", contentEncoding)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// exportResponse decodes a 200 answer in the encoding of contentType.
func exportResponse(t *testing.T, contentType string, hdr http.Header, b []byte) *coltrace.ExportTraceServiceResponse {
	t.Helper()
	if got := hdr.Get("Content-Type"); got != contentType {
		t.Fatalf("answer Content-Type %q, want the request's %q", got, contentType)
	}
	resp := &coltrace.ExportTraceServiceResponse{}
	var err error
	if contentType == "application/json" {
		err = protojson.Unmarshal(b, resp)
	} else {
		err = proto.Unmarshal(b, resp)
	}
	if err != nil {
		t.Fatalf("answer %q: %v", b, err)
	}
	return resp
}

// canonical strips the event id (checked apart) and writes the event's JSON.
func canonical(t *testing.T, ev schemas.Event) string {
	t.Helper()
	h := ev.Header()
	id := h.EventID
	h.EventID = ""
	defer func() { h.EventID = id }()
	if ta, ok := ev.(*schemas.TaskAttempt); ok && ta.SkillsLoaded == nil {
		ta.SkillsLoaded = []string{}
	}
	return jsonOf(t, ev)
}

func checkSample(t *testing.T, got []schemas.Event) {
	t.Helper()
	var gotJSON, wantJSON []string
	ids := map[string]bool{}
	for _, ev := range got {
		id := ev.Header().EventID
		if len(id) != 32 || ids[id] {
			t.Errorf("event id %q: want 32 hex characters, unique", id)
		}
		ids[id] = true
		gotJSON = append(gotJSON, canonical(t, ev))
	}
	for _, ev := range wantSample() {
		wantJSON = append(wantJSON, canonical(t, ev))
	}
	sort.Strings(gotJSON)
	sort.Strings(wantJSON)
	if !slices.Equal(gotJSON, wantJSON) {
		t.Errorf("events:\n got %s\nwant %s", strings.Join(gotJSON, "\n     "), strings.Join(wantJSON, "\n     "))
	}
}

// TestOTLPMapsSpans sends the sample trace in each encoding and checks the
// events in Kafka span by span, the partial success, and that a retried
// export gets the same event ids (so it is deduplicated downstream).
func TestOTLPMapsSpans(t *testing.T) {
	t.Parallel()
	pb, err := proto.Marshal(sampleTrace())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, contentType string
		body              []byte
	}{
		{"protobuf", "application/x-protobuf", pb},
		{"json", "application/json", []byte(sampleTraceJSON)},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := startGateway(t, 0)
			code, hdr, b := g.postOTLP("tok-a", c.contentType, "", c.body)
			if code != http.StatusOK {
				t.Fatalf("code %d: %s", code, b)
			}
			ps := exportResponse(t, c.contentType, hdr, b).GetPartialSuccess()
			t.Logf("partial success: %v", ps)
			if ps.GetRejectedSpans() != sampleRejected {
				t.Errorf("rejected_spans %d, want %d (%q)", ps.GetRejectedSpans(), sampleRejected, ps.GetErrorMessage())
			}
			for _, want := range []string{"0000000000000a04", "score", "0000000000000e01", "invoke_agent ancestor",
				`span 0000000000000c06 (trace 22222222222222222222222222222222, "execute_tool load_skill zip"): refused with its trace, whose span 0000000000000a04`} {
				if !strings.Contains(ps.GetErrorMessage(), want) {
					t.Errorf("error_message %q lacks %q", ps.GetErrorMessage(), want)
				}
			}
			first := g.stored()
			checkSample(t, first)

			// The exporter retries the same request: same ids.
			if code, _, b := g.postOTLP("tok-a", c.contentType, "", c.body); code != http.StatusOK {
				t.Fatalf("retry: code %d: %s", code, b)
			}
			all := g.stored()
			if len(all) != 2*len(first) {
				t.Fatalf("%d events after the retry, want %d", len(all), 2*len(first))
			}
			ids := map[string]int{}
			for _, ev := range all {
				ids[ev.Header().EventID]++
			}
			for id, n := range ids {
				if n != 2 {
					t.Errorf("event id %s appears %d times after a retry, want 2 (the same ids)", id, n)
				}
			}
		})
	}
}

func TestOTLPAnswers(t *testing.T) {
	t.Parallel()
	g := startGateway(t, 64<<10)
	pb, err := proto.Marshal(sampleTrace())
	if err != nil {
		t.Fatal(err)
	}
	status := func(b []byte) string {
		var st spb.Status
		if err := protojson.Unmarshal(b, &st); err != nil {
			return "undecodable status " + string(b)
		}
		return st.GetMessage()
	}
	for _, c := range []struct {
		name, token, ct, ce string
		body                []byte
		code                int
		msg                 string
	}{
		{"no token", "", "application/json", "", []byte(sampleTraceJSON), 401, "bearer token"},
		{"unknown token", "tok-x", "application/json", "", []byte(sampleTraceJSON), 401, "bearer token"},
		{"text/plain", "tok-a", "text/plain", "", []byte(sampleTraceJSON), 415, "application/x-protobuf"},
		{"no content type", "tok-a", "", "", pb, 415, "application/json"},
		{"brotli", "tok-a", "application/json", "br", []byte(sampleTraceJSON), 415, "gzip"},
		{"bad gzip", "tok-a", "application/json", "gzip", []byte(sampleTraceJSON), 400, "gzip"},
		{"malformed json", "tok-a", "application/json", "", []byte(`{"resourceSpans":[`), 400, "OTLP/JSON"},
		{"base64 ids", "tok-a", "application/json", "", []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"AQIDBAUGBwgJCgsMDQ4PEA=="}]}]}]}`), 400, "hex"},
		{"short trace id", "tok-a", "application/json", "", []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0102","spanId":"0000000000000a01"}]}]}]}`), 400, "traceId is 2 bytes, want 16"},
		{"long span id", "tok-a", "application/json", "", []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"` + traceA + `","spanId":"0000000000000a0102"}]}]}]}`), 400, "spanId is 9 bytes, want 8"},
		{"short parent id", "tok-a", "application/json", "", []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"` + traceA + `","spanId":"0000000000000a01","parent_span_id":"0a"}]}]}]}`), 400, "parent_span_id is 1 bytes, want 8"},
		{"short link trace id", "tok-a", "application/json", "", []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"links":[{"traceId":"01"}]}]}]}]}`), 400, "want 16"},
		{"short protobuf span id", "tok-a", "application/x-protobuf", "", shortSpanID(t), 400, ""},
		{"gzip bomb", "tok-a", "application/json", "gzip", gzipped(t, bytes.Repeat([]byte(" "), 1<<20)), 413, "decompressed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, hdr, b := g.postOTLP(c.token, c.ct, c.ce, c.body)
			if code != c.code {
				t.Fatalf("code %d, want %d: %s", code, c.code, b)
			}
			if hdr.Get("Content-Type") == "application/json" && !strings.Contains(status(b), c.msg) {
				t.Errorf("message %q lacks %q", status(b), c.msg)
			}
		})
	}
	if len(g.stored()) != 0 {
		t.Fatal("a failed request produced events")
	}

	// gzip, both encodings: the same events as plain.
	for _, c := range []struct {
		ct   string
		body []byte
	}{{"application/x-protobuf", pb}, {"application/json", []byte(sampleTraceJSON)}} {
		code, hdr, b := g.postOTLP("tok-a", c.ct, "gzip", gzipped(t, c.body))
		if code != http.StatusOK {
			t.Fatalf("gzip %s: code %d: %s", c.ct, code, b)
		}
		if n := exportResponse(t, c.ct, hdr, b).GetPartialSuccess().GetRejectedSpans(); n != sampleRejected {
			t.Errorf("gzip %s: rejected %d", c.ct, n)
		}
	}
	if got := len(g.stored()); got != 2*len(wantSample()) {
		t.Errorf("%d events after two gzip exports, want %d", got, 2*len(wantSample()))
	}
}

// TestOTLPProjectRules: a span naming another project than the token's is
// rejected (and counted) with its trace, the other traces of the request
// are accepted; a request
// of spans that map to nothing is a plain success.
func TestOTLPProjectRules(t *testing.T) {
	t.Parallel()
	g := startGateway(t, 0)
	req := sampleTrace()
	a01 := req.ResourceSpans[0].ScopeSpans[0].Spans[0]
	a01.Attributes = append(a01.Attributes, kv("harnessflow.project", "projB"))
	pb, _ := proto.Marshal(req)
	code, hdr, b := g.postOTLP("tok-a", "application/x-protobuf", "", pb)
	if code != http.StatusOK {
		t.Fatalf("code %d: %s", code, b)
	}
	ps := exportResponse(t, "application/x-protobuf", hdr, b).GetPartialSuccess()
	// a01 and, with it, its trace's skill spans c01, c02, c03.
	if ps.GetRejectedSpans() != sampleRejected+4 || !strings.Contains(ps.GetErrorMessage(), `project "projB" is not this token's project`) {
		t.Errorf("partial success %v", ps)
	}
	if got := len(g.stored()); got != len(wantSample())-4 {
		t.Errorf("%d events, want %d (trace D's)", got, len(wantSample())-4)
	}

	only := &coltrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{
		span(traceA, "0000000000000d01", "", "GET /", 0, 10, unset, kv("http.request.method", "GET")),
	}}}}}}
	pb, _ = proto.Marshal(only)
	code, hdr, b = g.postOTLP("tok-b", "application/x-protobuf", "", pb)
	if code != http.StatusOK {
		t.Fatalf("code %d: %s", code, b)
	}
	if ps := exportResponse(t, "application/x-protobuf", hdr, b).GetPartialSuccess(); ps != nil {
		t.Errorf("partial success %v for a request of ignored spans, want none", ps)
	}
}

// shortSpanID is the sample trace in protobuf with a 4-byte span id.
func shortSpanID(t *testing.T) []byte {
	req := sampleTrace()
	req.ResourceSpans[0].ScopeSpans[0].Spans[1].SpanId = []byte{1, 2, 3, 4}
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
