package schemas

import (
	"fmt"
	"math"
	"time"

	"github.com/linkedin/goavro/v2"
)

// This file converts between typed events and goavro's native values. It is
// the slow, general path: bytes written with an older compiled-in schema or
// with a writer schema fetched from a registry are decoded by goavro with
// that writer schema, then resolved to the current struct by field name
// (fields the writer lacks take their defaults, fields the reader lacks are
// dropped, int/long/float/double promote as Avro allows). The hot path
// (avro.go) never builds these maps.

// decodeWithCodec decodes an Avro binary body with a writer codec and
// resolves it to ti's struct. goavro panics are turned into ErrMalformed.
func decodeWithCodec(ti *typeInfo, codec *goavro.Codec, body []byte) (ev Event, err error) {
	defer func() {
		if p := recover(); p != nil {
			ev, err = nil, fieldErr(ti.typ, "", CodeMalformed, "decode with writer schema: %v", p)
		}
	}()
	native, rest, err := codec.NativeFromBinary(body)
	if err != nil {
		return nil, fieldErr(ti.typ, "", CodeMalformed, "decode with writer schema: %v", err)
	}
	if len(rest) != 0 {
		return nil, fieldErr(ti.typ, "", CodeMalformed, "%d trailing bytes", len(rest))
	}
	m, ok := native.(map[string]any)
	if !ok {
		return nil, fieldErr(ti.typ, "", CodeMalformed, "writer schema is not a record")
	}
	return fromNative(ti, m)
}

// fromNative resolves a goavro record value to a typed event: the envelope,
// then each field of ti in schema order. A field the writer lacks keeps its
// zero value or, for a double with a default, takes the default. Every value
// that cannot be read as its field's type is an error; several are joined.
func fromNative(ti *typeInfo, m map[string]any) (Event, error) {
	ev := New(ti.typ)
	r := nativeReader{t: ti.typ}
	r.envelope(ev.Header(), m)
	for i := range ti.fields {
		f := &ti.fields[i]
		v, ok := m[f.name]
		if !ok {
			if f.hasDef {
				*f.f64(ev) = f.def
			}
			continue
		}
		r.field(f, ev, v)
	}
	if len(r.errs) > 0 {
		return nil, joinErrs(r.errs)
	}
	return ev, nil
}

// nativeReader reads goavro native values into the fields of one event of
// type t, collecting an error for each value it cannot read.
type nativeReader struct {
	t    Type
	errs []error
}

// bad records that the writer value v of field cannot be read as want.
func (r *nativeReader) bad(field string, v any, want string) {
	r.errs = append(r.errs, fieldErr(r.t, field, CodeMalformed, "writer value %T cannot be read as %s", v, want))
}

// str reads v as a string (null is ""); any other value is recorded as bad.
func (r *nativeReader) str(field string, v any) string {
	s, ok := nativeString(v)
	if !ok {
		r.bad(field, v, "string")
	}
	return s
}

// envelope reads the envelope fields present in m into h.
func (r *nativeReader) envelope(h *Envelope, m map[string]any) {
	if v, ok := m["event_id"]; ok {
		h.EventID = r.str("event_id", v)
	}
	if v, ok := m["event_time"]; ok {
		t, ok := nativeTime(v)
		if !ok {
			r.bad("event_time", v, "timestamp-millis")
		}
		h.EventTime = t
	}
	if v, ok := m["project"]; ok {
		h.Project = r.str("project", v)
	}
	if v, ok := m["source"]; ok {
		h.Source = r.str("source", v)
	}
}

// field reads the writer value v of f into ev, promoting numbers as Avro
// allows; arrays, maps and bytes are read by the helpers below.
func (r *nativeReader) field(f *field, ev Event, v any) {
	switch f.kind {
	case kString:
		*f.str(ev) = r.str(f.name, v)
	case kNullString:
		if u := unwrapUnion(v); u != nil {
			*f.str(ev) = r.str(f.name, u)
		}
	case kEnum:
		s := r.str(f.name, v)
		if symbolIndex(f.symbols, s) < 0 {
			r.errs = append(r.errs, badEnum(r.t, f.name, s, f.symbols))
		}
		*f.str(ev) = s
	case kInt:
		n, ok := nativeInt(v)
		if !ok || n < math.MinInt32 || n > math.MaxInt32 {
			r.bad(f.name, v, "int")
		}
		*f.i32(ev) = int32(n)
	case kLong:
		n, ok := nativeInt(v)
		if !ok {
			r.bad(f.name, v, "long")
		}
		*f.i64(ev) = n
	case kDouble:
		x, ok := nativeFloat(v)
		if !ok {
			r.bad(f.name, v, "double")
		}
		*f.f64(ev) = x
	case kNullDouble:
		if u := unwrapUnion(v); u != nil {
			x, ok := nativeFloat(u)
			if !ok {
				r.bad(f.name, u, "double")
			}
			*f.pf64(ev) = &x
		}
	case kBool:
		b, ok := unwrapUnion(v).(bool)
		if !ok {
			r.bad(f.name, v, "boolean")
		}
		*f.bl(ev) = b
	case kTime:
		t, ok := nativeTime(v)
		if !ok {
			r.bad(f.name, v, "timestamp-millis")
		}
		*f.tm(ev) = t
	case kStrings:
		*f.strs(ev) = r.strings(f.name, v)
	case kArtifacts:
		*f.arts(ev) = r.artifacts(f.name, v)
	case kOffsets:
		*f.offs(ev) = r.offsets(f.name, v)
	case kMetrics:
		*f.mets(ev) = r.metrics(f.name, v)
	case kBytes:
		r.bytes(f, ev, v)
	}
}

// strings reads an array<string> (null is a nil slice).
func (r *nativeReader) strings(name string, v any) []string {
	arr, ok := unwrapUnion(v).([]any)
	if !ok && unwrapUnion(v) != nil {
		r.bad(name, v, "array")
	}
	var ss []string
	for j, x := range arr {
		ss = append(ss, r.str(fmt.Sprintf("%s[%d]", name, j), x))
	}
	return ss
}

// artifacts reads an array<Artifact>, checking each kind and op symbol.
func (r *nativeReader) artifacts(name string, v any) []Artifact {
	arr, _ := unwrapUnion(v).([]any)
	var as []Artifact
	for j, x := range arr {
		am, ok := unwrapUnion(x).(map[string]any)
		if !ok {
			r.bad(fmt.Sprintf("%s[%d]", name, j), x, "Artifact")
			continue
		}
		p := fmt.Sprintf("%s[%d].", name, j)
		a := Artifact{
			Kind: r.str(p+"kind", am["kind"]), Name: r.str(p+"name", am["name"]),
			Op: r.str(p+"op", am["op"]), Content: r.str(p+"content", am["content"]),
			ContentSHA256: r.str(p+"content_sha256", am["content_sha256"]),
		}
		if symbolIndex(artifactKinds, a.Kind) < 0 {
			r.errs = append(r.errs, badEnum(r.t, p+"kind", a.Kind, artifactKinds))
		}
		if symbolIndex(artifactOps, a.Op) < 0 {
			r.errs = append(r.errs, badEnum(r.t, p+"op", a.Op, artifactOps))
		}
		as = append(as, a)
	}
	return as
}

// offsets reads an array<TopicOffset>.
func (r *nativeReader) offsets(name string, v any) []TopicOffset {
	arr, _ := unwrapUnion(v).([]any)
	var os []TopicOffset
	for j, x := range arr {
		om, ok := unwrapUnion(x).(map[string]any)
		if !ok {
			r.bad(fmt.Sprintf("%s[%d]", name, j), x, "TopicOffset")
			continue
		}
		p, _ := nativeInt(om["partition"])
		o, _ := nativeInt(om["offset"])
		os = append(os, TopicOffset{Topic: r.str(fmt.Sprintf("%s[%d].topic", name, j), om["topic"]), Partition: int32(p), Offset: o})
	}
	return os
}

// metrics reads a map<double> (an empty or null map is nil).
func (r *nativeReader) metrics(name string, v any) map[string]float64 {
	mm, _ := unwrapUnion(v).(map[string]any)
	var out map[string]float64
	for k, x := range mm {
		fv, ok := nativeFloat(x)
		if !ok {
			r.bad(name+"."+k, x, "double")
		}
		if out == nil {
			out = map[string]float64{}
		}
		out[k] = fv
	}
	return out
}

// bytes reads a bytes value (or a string) into f; empty and null leave the
// field nil.
func (r *nativeReader) bytes(f *field, ev Event, v any) {
	switch p := unwrapUnion(v).(type) {
	case []byte:
		if len(p) > 0 {
			*f.byts(ev) = append([]byte(nil), p...)
		}
	case string:
		if len(p) > 0 {
			*f.byts(ev) = []byte(p)
		}
	case nil:
	default:
		r.bad(f.name, v, "bytes")
	}
}

// unwrapUnion returns the value of a goavro union ({"branch": value}) or v.
func unwrapUnion(v any) any {
	if m, ok := v.(map[string]any); ok && len(m) == 1 {
		for k, x := range m {
			switch k {
			case "string", "bytes", "int", "long", "float", "double", "boolean", "array", "map",
				"long.timestamp-millis":
				return x
			}
		}
	}
	return v
}

func nativeString(v any) (string, bool) {
	switch x := unwrapUnion(v).(type) {
	case string:
		return x, true
	case []byte:
		return string(x), true
	case nil:
		return "", true
	}
	return "", false
}

func nativeInt(v any) (int64, bool) {
	switch x := unwrapUnion(v).(type) {
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case int:
		return int64(x), true
	case time.Time:
		return x.UnixMilli(), true
	}
	return 0, false
}

func nativeFloat(v any) (float64, bool) {
	switch x := unwrapUnion(v).(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int32:
		return float64(x), true
	case int64:
		return float64(x), true
	}
	return 0, false
}

func nativeTime(v any) (time.Time, bool) {
	switch x := unwrapUnion(v).(type) {
	case time.Time:
		return time.UnixMilli(x.UnixMilli()).UTC(), true
	case int64:
		return time.UnixMilli(x).UTC(), true
	case int32:
		return time.UnixMilli(int64(x)).UTC(), true
	}
	return time.Time{}, false
}

// toNative returns ev as goavro native data for its current schema.
func toNative(ev Event) (map[string]any, error) {
	ti, err := lookup(ev)
	if err != nil {
		return nil, err
	}
	h := ev.Header()
	id := h.EventID
	if id == "" {
		id = DeriveEventID(ev)
	}
	m := map[string]any{
		"event_id": id, "event_time": time.UnixMilli(h.EventTime.UnixMilli()).UTC(),
		"project": h.Project, "source": h.Source,
	}
	for i := range ti.fields {
		f := &ti.fields[i]
		var v any
		switch f.kind {
		case kString, kEnum:
			v = *f.str(ev)
		case kNullString:
			if s := *f.str(ev); s != "" {
				v = goavro.Union("string", s)
			}
		case kInt:
			v = *f.i32(ev)
		case kLong:
			v = *f.i64(ev)
		case kDouble:
			v = *f.f64(ev)
		case kNullDouble:
			if p := *f.pf64(ev); p != nil {
				v = goavro.Union("double", *p)
			}
		case kBool:
			v = *f.bl(ev)
		case kTime:
			v = time.UnixMilli(f.tm(ev).UnixMilli()).UTC()
		case kStrings:
			arr := []any{}
			for _, s := range *f.strs(ev) {
				arr = append(arr, s)
			}
			v = arr
		case kArtifacts:
			arr := []any{}
			for _, a := range *f.arts(ev) {
				arr = append(arr, map[string]any{"kind": a.Kind, "name": a.Name, "op": a.Op, "content": a.Content, "content_sha256": a.ContentSHA256})
			}
			v = arr
		case kOffsets:
			arr := []any{}
			for _, o := range *f.offs(ev) {
				arr = append(arr, map[string]any{"topic": o.Topic, "partition": o.Partition, "offset": o.Offset})
			}
			v = arr
		case kMetrics:
			mm := map[string]any{}
			for k, x := range *f.mets(ev) {
				mm[k] = x
			}
			v = mm
		case kBytes:
			p := *f.byts(ev)
			if p == nil {
				p = []byte{}
			}
			v = p
		}
		m[f.name] = v
	}
	return m, nil
}
