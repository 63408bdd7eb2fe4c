package ingest

import (
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/harnessflow/harnessflow/schemas"
)

// This file maps OTLP spans to harnessflow events (the table in docs/otlp.md):
// an invoke_agent span with harnessflow.cell_id becomes a task_attempt, a
// skill-tool execute_tool span a skill_event; every other span is ignored.
// Each event is built as its JSON form and parsed by schemas.ParseJSON, the
// path every /v1/events event takes, so the same validation applies.

// OTLPSource is the envelope source of the events made from OTLP spans.
const OTLPSource = "ingest:otlp"

// Attribute names the mapping reads.
const (
	attrOperation   = "gen_ai.operation.name"
	attrToolName    = "gen_ai.tool.name"
	attrSkillName   = "gen_ai.skill.name"
	attrSkillRes    = "gen_ai.skill.resource.name"
	attrProcessExec = "process.executable.name"
	attrInputTok    = "gen_ai.usage.input_tokens"
	attrOutputTok   = "gen_ai.usage.output_tokens"
	hf              = "harnessflow."
	attrCellID      = hf + "cell_id"
	attrTaskID      = hf + "task_id"
	attrAttempt     = hf + "attempt"
	attrProject     = hf + "project"
	attrSkillsLoad  = hf + "skills_loaded"
	attrHFSkillName = hf + "skill_name"
	attrSkillStatus = hf + "skill_status"
	attrTurn        = hf + "turn"
	attrStatus      = hf + "status"
	attrCampaign    = hf + "campaign_id"
	attrCellStatus  = hf + "cell_status"
	attrCellAttempt = hf + "cell_attempts"

	opInvokeAgent = "invoke_agent"
	opExecuteTool = "execute_tool"
)

// attemptAttrs are the task_attempt fields read from harnessflow.<field>
// attributes as they are (ParseJSON checks their types and ranges).
var attemptAttrs = []string{
	"cell_id", "task_id", "stream_idx", "cycle", "attempt", "harness_version",
	"score", "success", "final", "skills_available", "task_input",
}

// skillTools are the tool names that are skill_event tools as they are.
var skillTools = map[string]bool{
	schemas.ToolLoadSkill: true, schemas.ToolReadSkill: true, schemas.ToolListSkills: true, schemas.ToolLoadSkillReference: true,
}

// maxAncestry bounds the parent chain walked from a skill span to its
// invoke_agent span (and so cuts any cycle of parent ids).
const maxAncestry = 64

// spanKind is what the mapping makes of a span.
type spanKind int

const (
	kindIgnored spanKind = iota
	kindAttempt
	kindSkill
)

// spanKey identifies a span within one request: trace id and span id bytes.
type spanKey struct{ trace, span string }

// otlpSpan is one span of a request with what the mapping knows of it.
type otlpSpan struct {
	s     *tracepb.Span
	res   map[string]*commonpb.AnyValue // the resource's attributes
	attrs map[string]*commonpb.AnyValue // the span's own
	kind  spanKind
	tool  string    // kindSkill: the skill_event tool
	owner *otlpSpan // kindSkill: the invoke_agent ancestor, if in the request
	skill []string  // kindAttempt: skills loaded by its descendants
	// finish: the span carries harnessflow.cell_status (its own attribute,
	// never its resource's): it ends its cell.
	finish bool
}

// get returns the span's attribute k, else its resource's.
func (sp *otlpSpan) get(k string) *commonpb.AnyValue {
	if v, ok := sp.attrs[k]; ok {
		return v
	}
	return sp.res[k]
}

func (sp *otlpSpan) str(k string) string { return sp.get(k).GetStringValue() }

// id names the span in rejection messages.
func (sp *otlpSpan) id() string {
	return fmt.Sprintf("span %x (trace %x, %q)", sp.s.GetSpanId(), sp.s.GetTraceId(), sp.s.GetName())
}

// mapTraces maps every span of req. project is the token's project (the
// same rules as /v1/events: an event may not name another project). A
// trace's spans are accepted or refused together (otlp_trace.go).
func mapTraces(req *coltrace.ExportTraceServiceRequest, project string, lim schemas.Limits) otlpResult {
	spans, index := flattenSpans(req)
	res := otlpResult{spans: len(spans)}
	for _, sp := range spans {
		classify(sp)
	}
	for _, sp := range spans {
		if sp.kind == kindSkill {
			sp.owner = ancestor(sp, index)
		}
	}
	collectSkillsLoaded(spans)
	traces := newTraceSet()
	for _, sp := range spans {
		if sp.kind == kindIgnored && !sp.finish {
			res.ignored++
			continue
		}
		tr := traces.of(sp)
		tr.spans = append(tr.spans, sp)
		evs, err := mapSpan(sp, project, lim)
		if err != nil {
			tr.refuse(sp, err.Error())
			continue
		}
		if src, err := tr.openCell(sp, project, lim); err != nil {
			tr.refuse(src, err.Error())
			continue
		}
		for _, ev := range evs {
			tr.events = append(tr.events, otlpMapped{ev: ev, span: sp, trace: tr})
		}
	}
	res.traces = traces.list
	res.assemble()
	return res
}

// mapSpan makes the events of one span: its task_attempt or skill_event,
// and its cell's cell_finished when it carries harnessflow.cell_status.
func mapSpan(sp *otlpSpan, project string, lim schemas.Limits) ([]schemas.Event, error) {
	var evs []schemas.Event
	if sp.kind != kindIgnored {
		var obj map[string]any
		var err error
		if sp.kind == kindAttempt {
			obj = attemptJSON(sp)
		} else {
			obj, err = skillJSON(sp)
		}
		if err != nil {
			return nil, err
		}
		ev, err := parseClaimed(obj, project, lim)
		if err != nil {
			return nil, err
		}
		// The id of the token's project: another tenant reusing these
		// trace and span ids makes other events.
		h := ev.Header()
		h.EventID = otlpEventID(ev.Type(), h.Project, sp.s)
		evs = append(evs, ev)
	}
	if sp.finish {
		ev, err := parseClaimed(finishJSON(sp), project, lim)
		if err != nil {
			return nil, fmt.Errorf("the cell_finished of its %s: %w", attrCellStatus, err)
		}
		// The id a cell_finished without event_id gets on /v1/events: one
		// finish per cell, however many spans or retries say so.
		ev.Header().EventID = schemas.DeriveEventID(ev)
		evs = append(evs, ev)
	}
	return evs, nil
}

// parseClaimed parses an event's JSON form and applies the token's
// project to it.
func parseClaimed(obj map[string]any, project string, lim schemas.Limits) (schemas.Event, error) {
	ev, err := parseMapped(obj, lim)
	if err != nil {
		return nil, err
	}
	if err := claimProject(ev, project); err != nil {
		return nil, err
	}
	return ev, nil
}

// flattenSpans lists the request's spans in order and indexes them by
// (trace id, span id); of two spans with the same ids the first is indexed.
func flattenSpans(req *coltrace.ExportTraceServiceRequest) ([]*otlpSpan, map[spanKey]*otlpSpan) {
	var spans []*otlpSpan
	index := map[spanKey]*otlpSpan{}
	for _, rs := range req.GetResourceSpans() {
		res := attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				if s == nil {
					continue
				}
				sp := &otlpSpan{s: s, res: res, attrs: attrMap(s.GetAttributes())}
				spans = append(spans, sp)
				k := spanKey{string(s.GetTraceId()), string(s.GetSpanId())}
				if _, dup := index[k]; !dup {
					index[k] = sp
				}
			}
		}
	}
	return spans, index
}

func attrMap(kvs []*commonpb.KeyValue) map[string]*commonpb.AnyValue {
	m := make(map[string]*commonpb.AnyValue, len(kvs))
	for _, kv := range kvs {
		if kv != nil {
			m[kv.GetKey()] = kv.GetValue()
		}
	}
	return m
}

// classify sets sp.kind (and sp.tool for a skill span) and sp.finish.
func classify(sp *otlpSpan) {
	_, sp.finish = sp.attrs[attrCellStatus]
	switch sp.str(attrOperation) {
	case opInvokeAgent:
		if sp.str(attrCellID) != "" {
			sp.kind = kindAttempt
		}
	case opExecuteTool:
		if t := skillTool(sp); t != "" {
			sp.kind, sp.tool = kindSkill, t
		}
	}
}

// skillTool returns the skill_event tool of an execute_tool span, or "".
// harnessflow's own tool names map as they are. The OpenTelemetry GenAI
// conventions' skill refinements of execute_tool carry no fixed tool name
// (each framework has its own): a span with gen_ai.skill.resource.name is a
// "read skill resource" span (load_skill_reference), one with only
// gen_ai.skill.name a "load skill" span (load_skill); one that ran a process
// (process.executable.name, the "execute command" refinement) is no load.
func skillTool(sp *otlpSpan) string {
	name := sp.str(attrToolName)
	if skillTools[name] {
		return name
	}
	if sp.str(attrProcessExec) != "" {
		return ""
	}
	if sp.str(attrSkillRes) != "" {
		return schemas.ToolLoadSkillReference
	}
	if sp.str(attrSkillName) != "" {
		return schemas.ToolLoadSkill
	}
	return ""
}

// ancestor returns the nearest invoke_agent span with harnessflow.cell_id
// that sp descends from in the request, following parent span ids within
// sp's trace; nil when none is in the request.
func ancestor(sp *otlpSpan, index map[spanKey]*otlpSpan) *otlpSpan {
	trace, parent := sp.s.GetTraceId(), sp.s.GetParentSpanId()
	for range maxAncestry {
		if len(parent) == 0 {
			return nil
		}
		p := index[spanKey{string(trace), string(parent)}]
		if p == nil {
			return nil
		}
		if p.kind == kindAttempt {
			return p
		}
		parent = p.s.GetParentSpanId()
	}
	return nil
}

// collectSkillsLoaded sets each attempt span's skills loaded: the skill
// names of its load_skill and read_skill descendants whose status is
// loaded, first load first, each once.
func collectSkillsLoaded(spans []*otlpSpan) {
	var loads []*otlpSpan
	for _, sp := range spans {
		if sp.kind == kindSkill && sp.owner != nil && (sp.tool == schemas.ToolLoadSkill || sp.tool == schemas.ToolReadSkill) &&
			skillStatus(sp) == schemas.SkillLoaded && skillName(sp) != "" {
			loads = append(loads, sp)
		}
	}
	slices.SortStableFunc(loads, func(a, b *otlpSpan) int {
		return cmp.Compare(a.s.GetStartTimeUnixNano(), b.s.GetStartTimeUnixNano())
	})
	for _, sp := range loads {
		if n := skillName(sp); !slices.Contains(sp.owner.skill, n) {
			sp.owner.skill = append(sp.owner.skill, n)
		}
	}
}

func skillName(sp *otlpSpan) string {
	if n := sp.str(attrSkillName); n != "" {
		return n
	}
	return sp.str(attrHFSkillName)
}

// skillStatus is harnessflow.skill_status, else loaded, or not_found when
// the span's status is ERROR.
func skillStatus(sp *otlpSpan) string {
	if st := sp.str(attrSkillStatus); st != "" {
		return st
	}
	if sp.s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		return schemas.SkillNotFound
	}
	return schemas.SkillLoaded
}

// envelope starts an event's JSON form: type, the event id derived from the
// span's ids, event_time (the span's end, else its start), source and,
// when the span or its resource names one, project.
func envelope(t schemas.Type, sp *otlpSpan) map[string]any {
	obj := map[string]any{"type": string(t), "event_id": otlpEventID(t, "", sp.s), "source": OTLPSource}
	if ns := cmp.Or(sp.s.GetEndTimeUnixNano(), sp.s.GetStartTimeUnixNano()); ns > 0 {
		obj["event_time"] = int64(ns / 1e6)
	}
	if v := sp.get(attrProject); v != nil {
		obj["project"] = jsonValue(v)
	}
	return obj
}

// otlpEventID derives an event id from the event type, the project and the
// span's trace and span ids: the hex of the first 16 bytes of their SHA-256,
// so that a retried export carries the same ids and is deduplicated
// downstream, and two projects' spans never share one.
func otlpEventID(t schemas.Type, project string, s *tracepb.Span) string {
	var b []byte
	for _, part := range [][]byte{[]byte("otlp"), []byte(t), []byte(project), s.GetTraceId(), s.GetSpanId()} {
		b = binary.AppendUvarint(b, uint64(len(part)))
		b = append(b, part...)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// attemptJSON is the task_attempt JSON form of an invoke_agent span.
func attemptJSON(sp *otlpSpan) map[string]any {
	obj := envelope(schemas.TypeTaskAttempt, sp)
	for _, f := range attemptAttrs {
		if v := sp.get(hf + f); v != nil {
			obj[f] = jsonValue(v)
		}
	}
	if _, ok := obj["attempt"]; !ok {
		obj["attempt"] = 1
	}
	for attr, f := range map[string]string{attrInputTok: "input_tokens", attrOutputTok: "output_tokens"} {
		if v := sp.get(attr); v != nil {
			obj[f] = jsonValue(v)
		}
	}
	start, end := sp.s.GetStartTimeUnixNano(), sp.s.GetEndTimeUnixNano()
	if start > 0 && end > 0 {
		obj["duration_ms"] = (int64(end) - int64(start)) / 1e6
	}
	obj["status"] = schemas.StatusOK
	if sp.s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		obj["status"] = schemas.StatusError
	}
	if v := sp.get(attrStatus); v != nil {
		obj["status"] = jsonValue(v)
	}
	loaded := slices.Clone(sp.skill)
	for _, v := range sp.get(attrSkillsLoad).GetArrayValue().GetValues() {
		if n := v.GetStringValue(); n != "" && !slices.Contains(loaded, n) {
			loaded = append(loaded, n)
		}
	}
	obj["skills_loaded"] = loaded
	if loaded == nil {
		obj["skills_loaded"] = []string{}
	}
	return obj
}

// skillJSON is the skill_event JSON form of a skill span: cell, task and
// attempt come from its invoke_agent ancestor, else from its own
// harnessflow.cell_id, task_id and attempt (a trace exported in several
// requests), else the span is rejected.
func skillJSON(sp *otlpSpan) (map[string]any, error) {
	obj := envelope(schemas.TypeSkillEvent, sp)
	src := sp.owner
	if src == nil {
		if sp.str(attrCellID) == "" {
			return nil, fmt.Errorf("skill span without an invoke_agent ancestor that has %s in this request: "+
				"export the whole trace in one request, or set %s, %s and %s on the skill span", attrCellID, attrCellID, attrTaskID, attrAttempt)
		}
		src = sp
	}
	for _, f := range []string{"cell_id", "task_id", "attempt"} {
		if v := src.get(hf + f); v != nil {
			obj[f] = jsonValue(v)
		}
	}
	if _, ok := obj["attempt"]; !ok {
		obj["attempt"] = 1
	}
	obj["turn"] = 0
	if v := sp.get(attrTurn); v != nil {
		obj["turn"] = jsonValue(v)
	}
	obj["tool"] = sp.tool
	obj["skill_name"] = skillName(sp)
	obj["status"] = skillStatus(sp)
	return obj, nil
}

// finishJSON is the cell_finished JSON form of a span with
// harnessflow.cell_status: its cell (harnessflow.cell_id), the status and
// harnessflow.cell_attempts, both the span's own attributes; event_time is
// the span's end.
func finishJSON(sp *otlpSpan) map[string]any {
	obj := envelope(schemas.TypeCellFinished, sp)
	if v := sp.get(attrCellID); v != nil {
		obj["cell_id"] = jsonValue(v)
	}
	obj["status"] = jsonValue(sp.attrs[attrCellStatus])
	if v, ok := sp.attrs[attrCellAttempt]; ok {
		obj["attempts"] = jsonValue(v)
	}
	return obj
}

// parseMapped parses an event's JSON form like any /v1/events event.
func parseMapped(obj map[string]any, lim schemas.Limits) (schemas.Event, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", obj["type"], err)
	}
	ev, err := schemas.ParseJSON(b, lim)
	if err != nil {
		return nil, err // a *FieldError, or several, each naming type and field
	}
	return ev, nil
}

// jsonValue is an attribute value as a JSON value: strings, booleans and
// numbers as they are, arrays and key-value lists as arrays and objects,
// bytes as base64, a non-finite double as its name (a string, so that
// ParseJSON reports a wrong type instead of failing to write it).
func jsonValue(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		if math.IsNaN(x.DoubleValue) || math.IsInf(x.DoubleValue, 0) {
			return fmt.Sprint(x.DoubleValue)
		}
		return x.DoubleValue
	case *commonpb.AnyValue_ArrayValue:
		out := make([]any, 0, len(x.ArrayValue.GetValues()))
		for _, e := range x.ArrayValue.GetValues() {
			out = append(out, jsonValue(e))
		}
		return out
	case *commonpb.AnyValue_KvlistValue:
		out := map[string]any{}
		for _, kv := range x.KvlistValue.GetValues() {
			out[kv.GetKey()] = jsonValue(kv.GetValue())
		}
		return out
	case *commonpb.AnyValue_BytesValue:
		return base64.StdEncoding.EncodeToString(x.BytesValue)
	}
	return nil
}
