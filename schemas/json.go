package schemas

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"
)

// This file parses the JSON form of events (ParseJSON); jsonwrite.go writes
// it (MarshalJSON).

// ParseJSON parses the JSON form of one event: an object with "type" set to
// the event's type name and the fields of its schema (names as in the Avro
// schema and the json tags of the structs). It is strict: an unknown type, an
// unknown field, a missing required field, a value of the wrong JSON kind
// (a string or a fraction for an integer, a number for a boolean), an
// integer overflowing its Avro type, and every Validate rule are errors, each
// a *FieldError naming the field; several are joined with errors.Join.
//
// Optional fields and their values when absent: event_id (derived with
// DeriveEventID), event_time (zero), project and source (""), nullable text
// and evolver_model ("" = null), phase scores and other nullable doubles
// (nil), arrays and maps (nil; null is accepted too), label_epsilon (0.02)
// and label_alpha (0.05), task_attempt final (true: the task's last
// attempt), every other number and boolean (0, false).
// Required: the identifying fields, enum fields and the measured outcome
// (task_attempt score and success, labeled_sample effect).
//
// event_time and other timestamps are an RFC 3339 string or integer epoch
// milliseconds; they are kept to the millisecond, in UTC. bytes fields are
// base64 (standard alphabet). The whole text is capped by lim.Event.
// On error the event is nil. Safe for concurrent use.
func ParseJSON(b []byte, lim Limits) (Event, error) {
	return ParseJSONWith(b, lim, Envelope{})
}

// ParseJSONWith is ParseJSON with the project and source of defaults for an
// event whose text names none, applied before its event_id is derived: an
// event's derived id hashes its project (DeriveEventID), so a caller that
// would set the project after parsing (a gateway that takes it from the
// token) must pass it here, or two projects' events would get the id of the
// empty project. defaults' other fields are ignored.
func ParseJSONWith(b []byte, lim Limits, defaults Envelope) (Event, error) {
	lim = lim.withDefaults()
	if len(b) > lim.Event {
		return nil, &FieldError{Code: CodeTooLarge, Msg: "event is " + strconv.Itoa(len(b)) + " bytes, above the " + strconv.Itoa(lim.Event) + "-byte cap"}
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil || obj == nil {
		msg := "not a JSON object"
		if err != nil {
			msg = "invalid JSON: " + err.Error()
		}
		return nil, &FieldError{Code: CodeMalformed, Msg: msg}
	}
	rawType, ok := obj["type"]
	if !ok {
		return nil, &FieldError{Field: "type", Code: CodeMissingField, Msg: `missing required field "type"`}
	}
	tname, ok := jsonString(rawType)
	if !ok {
		return nil, wrongType("", "type", "string", rawType)
	}
	ti := infos[Type(tname)]
	if ti == nil {
		return nil, fieldErr("", "type", CodeUnknownType, "%q is not a known event type", tname)
	}
	p := jsonParser{t: ti.typ}
	var unknown []string
	for k := range obj {
		if _, ok := ti.byName[k]; !ok && k != "type" && !isEnvelope(k) {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		p.add(k, CodeUnknownField, "unknown field "+strconv.Quote(k))
	}
	ev := New(ti.typ)
	h := ev.Header()
	if raw, ok := obj["event_id"]; ok {
		h.EventID = p.str("event_id", raw, true)
	}
	if raw, ok := obj["event_time"]; ok {
		h.EventTime = p.time("event_time", raw)
	}
	if raw, ok := obj["project"]; ok {
		h.Project = p.str("project", raw, true)
	}
	if raw, ok := obj["source"]; ok {
		h.Source = p.str("source", raw, true)
	}
	if h.Project == "" {
		h.Project = defaults.Project
	}
	if h.Source == "" {
		h.Source = defaults.Source
	}
	for i := range ti.fields {
		f := &ti.fields[i]
		raw, ok := obj[f.name]
		if !ok {
			if f.req {
				p.add(f.name, CodeMissingField, "missing required field "+strconv.Quote(f.name))
			}
			if f.hasDef {
				*f.f64(ev) = f.def
			}
			if f.absentTrue {
				*f.bl(ev) = true
			}
			continue
		}
		p.field(f, ev, raw)
	}
	if len(p.errs) > 0 {
		return nil, joinErrs(p.errs)
	}
	if h.EventID == "" {
		h.EventID = DeriveEventID(ev)
	}
	if err := Validate(ev, lim); err != nil {
		return nil, err
	}
	return ev, nil
}

func isEnvelope(k string) bool {
	return k == "event_id" || k == "event_time" || k == "project" || k == "source"
}

type jsonParser struct {
	t    Type
	errs []error
}

func (p *jsonParser) add(field, code, msg string) {
	p.errs = append(p.errs, &FieldError{Type: p.t, Field: field, Code: code, Msg: msg})
}

// wrongType reports a JSON value of the wrong kind.
func wrongType(t Type, field, want string, raw []byte) *FieldError {
	shown := string(raw)
	if len(shown) > 40 {
		shown = shown[:40] + "..."
	}
	return &FieldError{Type: t, Field: field, Code: CodeWrongType, Msg: "want " + want + ", got " + jsonKind(raw) + " " + shown}
}

func (p *jsonParser) wrong(field, want string, raw []byte) {
	p.errs = append(p.errs, wrongType(p.t, field, want, raw))
}

func jsonKind(raw []byte) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	case '[':
		return "array"
	case '{':
		return "object"
	}
	return "number"
}

func isNull(raw []byte) bool { return string(raw) == "null" }

// jsonString decodes a JSON string value.
func jsonString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner), true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// str parses a string; null is "" when nullOK.
func (p *jsonParser) str(field string, raw []byte, nullOK bool) string {
	if nullOK && isNull(raw) {
		return ""
	}
	s, ok := jsonString(raw)
	if !ok {
		p.wrong(field, "string", raw)
	}
	return s
}

func (p *jsonParser) integer(field string, raw []byte, bits int) int64 {
	if jsonKind(raw) != "number" {
		p.wrong(field, "integer", raw)
		return 0
	}
	if bytes.ContainsAny(raw, ".eE") {
		p.wrong(field, "integer", raw)
		return 0
	}
	n, err := strconv.ParseInt(string(raw), 10, bits)
	if err != nil {
		p.add(field, CodeOutOfRange, string(raw)+" is outside the "+map[int]string{32: "int", 64: "long"}[bits]+" range")
		return 0
	}
	return n
}

func (p *jsonParser) double(field string, raw []byte) float64 {
	if jsonKind(raw) != "number" {
		p.wrong(field, "number", raw)
		return 0
	}
	x, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		p.add(field, CodeOutOfRange, string(raw)+" is outside the double range")
		return 0
	}
	return x
}

func (p *jsonParser) time(field string, raw []byte) time.Time {
	switch jsonKind(raw) {
	case "null":
		return time.Time{}
	case "string":
		s, _ := jsonString(raw)
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			p.wrong(field, "RFC 3339 time or epoch milliseconds", raw)
			return time.Time{}
		}
		return time.UnixMilli(t.UnixMilli()).UTC()
	case "number":
		return time.UnixMilli(p.integer(field, raw, 64)).UTC()
	}
	p.wrong(field, "RFC 3339 time or epoch milliseconds", raw)
	return time.Time{}
}

func (p *jsonParser) array(field string, raw []byte) []json.RawMessage {
	if isNull(raw) {
		return nil
	}
	if jsonKind(raw) != "array" {
		p.wrong(field, "array", raw)
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		p.wrong(field, "array", raw)
	}
	return items
}

// object parses a nested record with exactly the given keys.
func (p *jsonParser) object(field string, raw []byte, keys, req []string) map[string]json.RawMessage {
	if jsonKind(raw) != "object" {
		p.wrong(field, "object", raw)
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		p.wrong(field, "object", raw)
		return nil
	}
	var unknown []string
	for k := range m {
		if !contains(keys, k) {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		p.add(field+"."+k, CodeUnknownField, "unknown field "+strconv.Quote(field+"."+k))
	}
	for _, k := range req {
		if _, ok := m[k]; !ok {
			p.add(field+"."+k, CodeMissingField, "missing required field "+strconv.Quote(field+"."+k))
		}
	}
	return m
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func idx(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }

func (p *jsonParser) field(f *field, ev Event, raw []byte) {
	switch f.kind {
	case kString, kEnum:
		*f.str(ev) = p.str(f.name, raw, false)
	case kNullString:
		*f.str(ev) = p.str(f.name, raw, true)
	case kInt:
		*f.i32(ev) = int32(p.integer(f.name, raw, 32))
	case kLong:
		*f.i64(ev) = p.integer(f.name, raw, 64)
	case kDouble:
		*f.f64(ev) = p.double(f.name, raw)
	case kNullDouble:
		if !isNull(raw) {
			x := p.double(f.name, raw)
			*f.pf64(ev) = &x
		}
	case kBool:
		switch string(raw) {
		case "true":
			*f.bl(ev) = true
		case "false":
		default:
			p.wrong(f.name, "boolean", raw)
		}
	case kTime:
		*f.tm(ev) = p.time(f.name, raw)
	case kStrings:
		var ss []string
		for i, it := range p.array(f.name, raw) {
			ss = append(ss, p.str(idx(f.name, i), it, false))
		}
		*f.strs(ev) = ss
	case kArtifacts:
		var as []Artifact
		for i, it := range p.array(f.name, raw) {
			name := idx(f.name, i)
			m := p.object(name, it, []string{"kind", "name", "op", "content", "content_sha256"}, []string{"kind", "name", "op"})
			var a Artifact
			if r, ok := m["kind"]; ok {
				a.Kind = p.str(name+".kind", r, false)
			}
			if r, ok := m["name"]; ok {
				a.Name = p.str(name+".name", r, false)
			}
			if r, ok := m["op"]; ok {
				a.Op = p.str(name+".op", r, false)
			}
			if r, ok := m["content"]; ok {
				a.Content = p.str(name+".content", r, true)
			}
			if r, ok := m["content_sha256"]; ok {
				a.ContentSHA256 = p.str(name+".content_sha256", r, true)
			}
			as = append(as, a)
		}
		*f.arts(ev) = as
	case kOffsets:
		var os []TopicOffset
		for i, it := range p.array(f.name, raw) {
			name := idx(f.name, i)
			keys := []string{"topic", "partition", "offset"}
			m := p.object(name, it, keys, keys)
			var o TopicOffset
			if r, ok := m["topic"]; ok {
				o.Topic = p.str(name+".topic", r, false)
			}
			if r, ok := m["partition"]; ok {
				o.Partition = int32(p.integer(name+".partition", r, 32))
			}
			if r, ok := m["offset"]; ok {
				o.Offset = p.integer(name+".offset", r, 64)
			}
			os = append(os, o)
		}
		*f.offs(ev) = os
	case kMetrics:
		if isNull(raw) {
			return
		}
		if jsonKind(raw) != "object" {
			p.wrong(f.name, "object", raw)
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			p.wrong(f.name, "object", raw)
			return
		}
		var out map[string]float64
		for k, r := range m {
			if out == nil {
				out = make(map[string]float64, len(m))
			}
			out[k] = p.double(f.name+"."+k, r)
		}
		*f.mets(ev) = out
	case kBytes:
		if isNull(raw) {
			return
		}
		s, ok := jsonString(raw)
		if !ok {
			p.wrong(f.name, "base64 string", raw)
			return
		}
		d, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			p.add(f.name, CodeMalformed, "not standard base64: "+err.Error())
			return
		}
		if len(d) > 0 {
			*f.byts(ev) = d
		}
	}
}
