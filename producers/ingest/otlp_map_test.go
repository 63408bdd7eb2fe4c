package ingest_test

import (
	"slices"
	"strings"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/harnessflow/harnessflow/producers/ingest"
	"github.com/harnessflow/harnessflow/schemas"
)

// TestOTLPMapFallbacks covers what the sample trace does not: a skill span
// exported without its invoke_agent span (it carries the ids itself), the
// resource's attributes as a fallback, harnessflow.skills_loaded and
// harnessflow.status on the invoke_agent span, and an attempt whose end is
// before its start (rejected: negative duration; in a trace of its own, so
// the others stay accepted).
func TestOTLPMapFallbacks(t *testing.T) {
	t.Parallel()
	invoke := kv("gen_ai.operation.name", "invoke_agent")
	req := &coltrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{kv("harnessflow.harness_version", "h9"), kv("harnessflow.cell_id", "cell-r")}},
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{
			span(traceA, "0000000000000c01", "00000000000000a0", "execute_tool load_skill pdf", 10, 20, unset,
				kv("gen_ai.operation.name", "execute_tool"), kv("gen_ai.tool.name", "load_skill"), kv("gen_ai.skill.name", "pdf"),
				kv("harnessflow.task_id", "t9"), kv("harnessflow.attempt", 3), kv("harnessflow.turn", 4)),
			span(traceA, "0000000000000a01", "", "invoke_agent", 0, 100, unset, invoke,
				kv("harnessflow.task_id", "t8"), kv("harnessflow.score", 1), kv("harnessflow.success", true),
				kv("harnessflow.status", "timeout"), kv("harnessflow.skills_loaded", []string{"a", "b"})),
			span(traceB, "0000000000000a02", "", "invoke_agent", 200, 100, unset, invoke,
				kv("harnessflow.task_id", "t7"), kv("harnessflow.score", 1), kv("harnessflow.success", true)),
		}}},
	}}}
	evs, spans, accepted, ignored, rejected := ingest.MapTraces(req, "p")
	if spans != 3 || accepted != 2 || ignored != 0 || rejected != 1 || len(evs) != 2 {
		t.Fatalf("%d spans: %d accepted (%d events), %d ignored, %d rejected; want 3: 2 (2), 0, 1", spans, accepted, len(evs), ignored, rejected)
	}
	se, ok := evs[0].(*schemas.SkillEvent)
	if !ok || se.CellID != "cell-r" || se.TaskID != "t9" || se.Attempt != 3 || se.Turn != 4 || se.SkillName != "pdf" {
		t.Errorf("skill event %+v, want cell-r/t9/3 turn 4 pdf from the span and its resource", evs[0])
	}
	ta, ok := evs[1].(*schemas.TaskAttempt)
	if !ok || ta.HarnessVersion != "h9" || ta.Status != "timeout" || !slices.Equal(ta.SkillsLoaded, []string{"a", "b"}) || ta.Project != "p" {
		t.Errorf("attempt %+v, want harness h9 (resource), status timeout, skills [a b], project p", evs[1])
	}
}

// TestOTLPEventIDsAreTheProjects: the same export from two projects' tokens
// (the same trace and span ids) makes events with different ids, so one
// tenant cannot get another's spans dropped as duplicates; the same
// project's retried export keeps its ids.
func TestOTLPEventIDsAreTheProjects(t *testing.T) {
	t.Parallel()
	ids := func(project string) []string {
		evs, _, _, _, _ := ingest.MapTraces(sampleTrace(), project)
		var out []string
		for _, ev := range evs {
			out = append(out, ev.Header().EventID)
		}
		return out
	}
	a, again, b := ids("acme"), ids("acme"), ids("globex")
	if len(a) == 0 || strings.Join(a, ",") != strings.Join(again, ",") {
		t.Fatalf("a retried export changed its ids: %v vs %v", a, again)
	}
	for _, x := range a {
		if slices.Contains(b, x) {
			t.Fatalf("event id %s is both acme's and globex's", x)
		}
	}
}
