package schemas

import (
	"encoding/base64"
	"errors"
	"math"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"
)

// This file writes the JSON form of events (MarshalJSON); json.go parses it.

// MarshalJSON returns the JSON form of ev: "type", the envelope, then the
// fields in schema order. Nullable values are written as null, empty arrays
// as [], times as RFC 3339 in UTC with milliseconds (null when zero), bytes
// as base64. An empty EventID is written as DeriveEventID(ev). A NaN or
// infinite double is an error (JSON cannot carry it). ParseJSON of the
// output gives back an equal event. Safe for concurrent use.
func MarshalJSON(ev Event) ([]byte, error) {
	ti, err := lookup(ev)
	if err != nil {
		return nil, err
	}
	w := jsonWriter{t: ti.typ, b: make([]byte, 0, 512)}
	w.b = appendJSONEnvelope(w.b, ti.typ, ev)
	for i := range ti.fields {
		f := &ti.fields[i]
		w.b = append(w.b, ',', '"')
		w.b = append(w.b, f.name...)
		w.b = append(w.b, '"', ':')
		w.field(f, ev)
	}
	w.b = append(w.b, '}')
	if len(w.errs) > 0 {
		return nil, errors.Join(w.errs...)
	}
	return w.b, nil
}

// appendJSONEnvelope opens the object of an event of type t and writes
// "type" and the envelope; an empty EventID is written as DeriveEventID(ev).
func appendJSONEnvelope(b []byte, t Type, ev Event) []byte {
	h := ev.Header()
	id := h.EventID
	if id == "" {
		id = DeriveEventID(ev)
	}
	b = append(b, `{"type":`...)
	b = appendJSONString(b, string(t))
	b = append(b, `,"event_id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"event_time":`...)
	b = appendJSONTime(b, h.EventTime)
	b = append(b, `,"project":`...)
	b = appendJSONString(b, h.Project)
	b = append(b, `,"source":`...)
	b = appendJSONString(b, h.Source)
	return b
}

// jsonWriter appends the field values of one event of type t to b,
// collecting an error for each double that JSON cannot carry.
type jsonWriter struct {
	t    Type
	b    []byte
	errs []error
}

// num writes x; a NaN or infinity is recorded as an error against name and
// written as 0 so the output stays well-formed until the error is returned.
func (w *jsonWriter) num(name string, x float64) {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		w.errs = append(w.errs, fieldErr(w.t, name, CodeOutOfRange, "%v cannot be written as JSON", x))
		w.b = append(w.b, '0')
		return
	}
	w.b = appendJSONFloat(w.b, x)
}

// field writes the value of f in ev (its name is already written).
func (w *jsonWriter) field(f *field, ev Event) {
	switch f.kind {
	case kString, kEnum:
		w.b = appendJSONString(w.b, *f.str(ev))
	case kNullString:
		if s := *f.str(ev); s == "" {
			w.b = append(w.b, "null"...)
		} else {
			w.b = appendJSONString(w.b, s)
		}
	case kInt:
		w.b = strconv.AppendInt(w.b, int64(*f.i32(ev)), 10)
	case kLong:
		w.b = strconv.AppendInt(w.b, *f.i64(ev), 10)
	case kDouble:
		w.num(f.name, *f.f64(ev))
	case kNullDouble:
		if p := *f.pf64(ev); p == nil {
			w.b = append(w.b, "null"...)
		} else {
			w.num(f.name, *p)
		}
	case kBool:
		w.b = strconv.AppendBool(w.b, *f.bl(ev))
	case kTime:
		w.b = appendJSONTime(w.b, *f.tm(ev))
	case kStrings:
		w.b = appendJSONStrings(w.b, *f.strs(ev))
	case kArtifacts:
		w.b = appendJSONArtifacts(w.b, *f.arts(ev))
	case kOffsets:
		w.b = appendJSONOffsets(w.b, *f.offs(ev))
	case kMetrics:
		w.metrics(f.name, *f.mets(ev))
	case kBytes:
		w.b = append(w.b, '"')
		w.b = base64.StdEncoding.AppendEncode(w.b, *f.byts(ev))
		w.b = append(w.b, '"')
	}
}

// metrics writes m as an object with its keys sorted, so the output is
// deterministic; each value is checked by num against name.key.
func (w *jsonWriter) metrics(name string, m map[string]float64) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	w.b = append(w.b, '{')
	for j, k := range keys {
		if j > 0 {
			w.b = append(w.b, ',')
		}
		w.b = appendJSONString(w.b, k)
		w.b = append(w.b, ':')
		w.num(name+"."+k, m[k])
	}
	w.b = append(w.b, '}')
}

// appendJSONStrings writes ss as an array of strings ([] when empty).
func appendJSONStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for j, s := range ss {
		if j > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

// appendJSONArtifacts writes as as an array of Artifact objects ([] when
// empty), every field present.
func appendJSONArtifacts(b []byte, as []Artifact) []byte {
	b = append(b, '[')
	for j, a := range as {
		if j > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"kind":`...)
		b = appendJSONString(b, a.Kind)
		b = append(b, `,"name":`...)
		b = appendJSONString(b, a.Name)
		b = append(b, `,"op":`...)
		b = appendJSONString(b, a.Op)
		b = append(b, `,"content":`...)
		b = appendJSONString(b, a.Content)
		b = append(b, `,"content_sha256":`...)
		b = appendJSONString(b, a.ContentSHA256)
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendJSONOffsets writes os as an array of TopicOffset objects ([] when
// empty).
func appendJSONOffsets(b []byte, os []TopicOffset) []byte {
	b = append(b, '[')
	for j, o := range os {
		if j > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"topic":`...)
		b = appendJSONString(b, o.Topic)
		b = append(b, `,"partition":`...)
		b = strconv.AppendInt(b, int64(o.Partition), 10)
		b = append(b, `,"offset":`...)
		b = strconv.AppendInt(b, o.Offset, 10)
		b = append(b, '}')
	}
	return append(b, ']')
}

func appendJSONTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	return append(b, '"')
}

// appendJSONFloat writes x like encoding/json does.
func appendJSONFloat(b []byte, x float64) []byte {
	abs := math.Abs(x)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	return strconv.AppendFloat(b, x, format, -1, 64)
}

const hexDigits = "0123456789abcdef"

// appendJSONString writes s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, `\u202`...)
			b = append(b, hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
