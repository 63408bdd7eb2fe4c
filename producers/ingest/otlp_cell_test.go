package ingest_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/harnessflow/harnessflow/producers/ingest"
	"github.com/harnessflow/harnessflow/schemas"
)

// cellResource is the resource of a spans-only agent: the cell's
// attributes, set once per process.
func cellResource(extra ...*commonpb.KeyValue) *resourcepb.Resource {
	return &resourcepb.Resource{Attributes: append([]*commonpb.KeyValue{
		kv("service.name", "solver"), kv("harnessflow.campaign_id", "camp-o"), kv("harnessflow.cell_id", "cell-alone"),
		kv("harnessflow.benchmark", "swe"), kv("harnessflow.agent_model", "opus"), kv("harnessflow.evolver_model", "evo"),
		kv("harnessflow.seed", 7), kv("harnessflow.route", "in_situ"), kv("harnessflow.h0_version", "h0"),
		kv("harnessflow.max_attempts", 1), kv("harnessflow.task_count", 2),
	}, extra...)}
}

// aloneTrace is one attempt of task at [startMS, startMS+100] in its own
// trace, with a load_skill child, under res; finish adds a root-level span
// that ends the cell.
func aloneTrace(res *resourcepb.Resource, trace, task string, startMS int, finish bool) *coltrace.ExportTraceServiceRequest {
	invoke := kv("gen_ai.operation.name", "invoke_agent")
	tool := kv("gen_ai.operation.name", "execute_tool")
	spans := []*tracepb.Span{
		span(trace, "00000000000000a1", "", "invoke_agent solver", startMS, startMS+100, okCode, invoke,
			kv("harnessflow.task_id", task), kv("harnessflow.score", 1.0), kv("harnessflow.success", true)),
		span(trace, "00000000000000c1", "00000000000000a1", "execute_tool load_skill pdf", startMS+10, startMS+20, unset, tool,
			kv("gen_ai.tool.name", "load_skill"), kv("gen_ai.skill.name", "pdf")),
	}
	if finish {
		spans = append(spans, span(trace, "00000000000000f1", "", "cell run", startMS+150, startMS+200, okCode,
			kv("harnessflow.cell_status", "completed"), kv("harnessflow.cell_attempts", 2)))
	}
	return &coltrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource: res, ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}},
	}}}
}

func postPB(t *testing.T, g *gateway, req *coltrace.ExportTraceServiceRequest) *coltrace.ExportTracePartialSuccess {
	t.Helper()
	pb, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	code, hdr, b := g.postOTLP("tok-a", "application/x-protobuf", "", pb)
	if code != http.StatusOK {
		t.Fatalf("code %d: %s", code, b)
	}
	return exportResponse(t, "application/x-protobuf", hdr, b).GetPartialSuccess()
}

// byType counts events by type.
func byType(evs []schemas.Event) map[schemas.Type][]schemas.Event {
	m := map[schemas.Type][]schemas.Event{}
	for _, ev := range evs {
		m[ev.Type()] = append(m[ev.Type()], ev)
	}
	return m
}

// TestOTLPTraceOpensAndEndsItsCell: a spans-only agent whose resource
// carries the cell's attributes needs no cell_started on /v1/events: its
// first trace sends one, made from the attributes, before the trace's
// events, with the id /v1/events derives for that cell (so retries and the
// next traces are the same event, and the gateway does not send it again
// once acknowledged); a span with harnessflow.cell_status sends the
// cell's cell_finished, whose id is derived likewise.
func TestOTLPTraceOpensAndEndsItsCell(t *testing.T) {
	t.Parallel()
	g := startGateway(t, 0)
	if ps := postPB(t, g, aloneTrace(cellResource(), traceA, "t1", 0, false)); ps != nil {
		t.Fatalf("partial success %v, want none", ps)
	}
	first := g.stored()
	got := byType(first)
	if len(got[schemas.TypeCellStarted]) != 1 || len(got[schemas.TypeTaskAttempt]) != 1 || len(got[schemas.TypeSkillEvent]) != 1 || len(first) != 3 {
		t.Fatalf("first trace: %d events %v, want a cell_started, a task_attempt and a skill_event", len(first), got)
	}
	cs := got[schemas.TypeCellStarted][0].(*schemas.CellStarted)
	want := &schemas.CellStarted{
		Envelope:   schemas.Envelope{EventTime: time.Unix(0, int64(at(0))).UTC(), Project: "projA", Source: ingest.OTLPSource},
		CampaignID: "camp-o", CellID: "cell-alone", Benchmark: "swe", AgentModel: "opus", EvolverModel: "evo", Seed: 7,
		Route: schemas.RouteInSitu, H0Version: "h0", MaxAttempts: 1, TaskCount: 2,
	}
	want.EventID = schemas.DeriveEventID(want)
	if jsonOf(t, cs) != jsonOf(t, want) {
		t.Errorf("cell_started\n got %s\nwant %s", jsonOf(t, cs), jsonOf(t, want))
	}
	// The same id as a cell_started of the cell sent on /v1/events without
	// an event_id.
	viaEvents, err := schemas.ParseJSONWith([]byte(`{"type":"cell_started","campaign_id":"camp-o","cell_id":"cell-alone","benchmark":"swe",`+
		`"agent_model":"opus","route":"in_situ"}`), schemas.Limits{}, schemas.Envelope{Project: "projA"})
	if err != nil || viaEvents.Header().EventID != cs.EventID {
		t.Errorf("/v1/events' cell_started id %v (%v), the trace's %s: want equal", viaEvents, err, cs.EventID)
	}
	if a := got[schemas.TypeTaskAttempt][0].(*schemas.TaskAttempt); a.CellID != "cell-alone" || !a.Final {
		t.Errorf("attempt %+v, want of cell-alone, final (the default)", a)
	}

	// A retry of the trace, then the cell's second trace, which ends it:
	// no second cell_started, a cell_finished.
	if ps := postPB(t, g, aloneTrace(cellResource(), traceA, "t1", 0, false)); ps != nil {
		t.Fatalf("retry: partial success %v", ps)
	}
	if ps := postPB(t, g, aloneTrace(cellResource(), traceB, "t2", 1000, true)); ps != nil {
		t.Fatalf("second trace: partial success %v", ps)
	}
	all := byType(g.stored())
	if n := len(all[schemas.TypeCellStarted]); n != 1 {
		t.Errorf("%d cell_started events after a retry and a second trace, want 1 (the gateway sends an acknowledged one once)", n)
	}
	if n := len(all[schemas.TypeTaskAttempt]); n != 3 {
		t.Errorf("%d attempts, want 3 (t1, its retry, t2)", n)
	}
	fins := all[schemas.TypeCellFinished]
	if len(fins) != 1 {
		t.Fatalf("%d cell_finished events, want 1", len(fins))
	}
	fin := fins[0].(*schemas.CellFinished)
	wantFin := &schemas.CellFinished{Envelope: schemas.Envelope{EventTime: time.Unix(0, int64(at(1200))).UTC(), Project: "projA", Source: ingest.OTLPSource},
		CellID: "cell-alone", Status: schemas.CellCompleted, Attempts: 2}
	wantFin.EventID = schemas.DeriveEventID(wantFin)
	if jsonOf(t, fin) != jsonOf(t, wantFin) {
		t.Errorf("cell_finished\n got %s\nwant %s", jsonOf(t, fin), jsonOf(t, wantFin))
	}
}

// TestOTLPCellAttributesRefuseTheirTrace: a trace whose cell attributes do
// not make a valid cell_started (harnessflow.campaign_id without the route)
// is refused whole, the reason naming the attribute; a span that ends a
// cell with a status that is none is refused with its trace too; a trace
// without harnessflow.campaign_id opens no cell (its cell_started comes
// from /v1/events, as before).
func TestOTLPCellAttributesRefuseTheirTrace(t *testing.T) {
	t.Parallel()
	noRoute := cellResource()
	for i, a := range noRoute.Attributes {
		if a.Key == "harnessflow.route" {
			noRoute.Attributes = append(noRoute.Attributes[:i], noRoute.Attributes[i+1:]...)
			break
		}
	}
	msgs := ingest.RejectMessages(aloneTrace(noRoute, traceA, "t1", 0, false), "projA")
	t.Logf("rejections: %q", msgs)
	if len(msgs) != 2 || !strings.Contains(msgs[0], `cell_started: missing required field "route"`) ||
		!strings.Contains(msgs[1], "0000000000000c1") || !strings.Contains(msgs[1], "refused with its trace") {
		t.Errorf("rejections %q, want the attempt's (route missing) and its skill span's", msgs)
	}

	bad := aloneTrace(cellResource(), traceA, "t1", 0, true)
	bad.ResourceSpans[0].ScopeSpans[0].Spans[2].Attributes[0] = kv("harnessflow.cell_status", "done")
	evs, _, accepted, _, rejected := ingest.MapTraces(bad, "projA")
	msgs = ingest.RejectMessages(bad, "projA")
	if len(evs) != 0 || accepted != 0 || rejected != 3 || !strings.Contains(msgs[0], `cell_finished.status: "done" is not one of`) {
		t.Errorf("%d events, %d accepted, %d rejected (%q), want the trace of 3 spans refused for the status", len(evs), accepted, rejected, msgs)
	}

	plain := aloneTrace(&resourcepb.Resource{Attributes: []*commonpb.KeyValue{kv("harnessflow.cell_id", "cell-x")}}, traceA, "t1", 0, false)
	evs, _, _, _, rejected = ingest.MapTraces(plain, "projA")
	if rejected != 0 || len(byType(evs)[schemas.TypeCellStarted]) != 0 || len(evs) != 2 {
		t.Errorf("without harnessflow.campaign_id: %d events %v, %d rejected; want the attempt and the skill event only", len(evs), byType(evs), rejected)
	}
}

// TestOmittedFinalIsTrueOnBothEndpoints: an attempt that does not say
// final is final on /v1/events as on /v1/traces.
func TestOmittedFinalIsTrueOnBothEndpoints(t *testing.T) {
	t.Parallel()
	g := startGateway(t, 0)
	if code, body := g.post("tok-a", `{"type":"task_attempt","cell_id":"c-f","task_id":"t-events","attempt":1,"status":"ok","score":1,"success":true}`); code != http.StatusAccepted {
		t.Fatalf("/v1/events: %d %s", code, body)
	}
	if ps := postPB(t, g, aloneTrace(&resourcepb.Resource{Attributes: []*commonpb.KeyValue{kv("harnessflow.cell_id", "c-f")}}, traceA, "t-traces", 0, false)); ps != nil {
		t.Fatalf("/v1/traces: partial success %v", ps)
	}
	n := 0
	for _, ev := range g.stored() {
		if a, ok := ev.(*schemas.TaskAttempt); ok {
			n++
			if !a.Final {
				t.Errorf("attempt %s (source %s): final false, want true (omitted)", a.TaskID, a.Source)
			}
		}
	}
	if n != 2 {
		t.Fatalf("%d attempts, want 2", n)
	}
}
