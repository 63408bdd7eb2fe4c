package ingest

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
)

// This file enforces the caps of one /v1/traces request (spans, resources
// and scopes, attributes; Config.MaxEvents, MaxOTLPResources,
// MaxOTLPAttributes) before the body is decoded into the OpenTelemetry
// types: a pre-scan of the protobuf wire format, and a streaming walk of
// OTLP/JSON that also rewrites its hex ids for protojson. Both stop at the
// first item past a cap, so a small gzip body of millions of empty spans,
// attributes or resource_spans (a few bytes each on the wire, hundreds once
// decoded) is refused after reading the cap's worth of them, and what is
// decoded afterwards is bounded by the caps and MaxBody. Both also check the
// length of trace ids (16 bytes) and span ids (8 bytes); an empty id is
// left to the mapping.

// otlpCaps are the caps of one request.
type otlpCaps struct {
	spans, resources, attributes int
}

// defaultOTLPCaps are the caps of a gateway with the default Config.
func defaultOTLPCaps() otlpCaps {
	c := DefaultConfig()
	return c.otlpCaps()
}

func (c *Config) otlpCaps() otlpCaps {
	return otlpCaps{spans: c.MaxEvents, resources: c.MaxOTLPResources, attributes: c.MaxOTLPAttributes}
}

// otlpCapError is a request with more items of one kind than its cap
// allows; /v1/traces answers it 413.
type otlpCapError struct {
	what string // "spans", ...
	cap  int
	flag string // the ingest flag that sets the cap
}

func (e *otlpCapError) Error() string {
	return fmt.Sprintf("more than %d %s, over the cap of one request (%s %d): export fewer spans per request (e.g. a smaller max_export_batch_size), or fewer attributes a span",
		e.cap, e.what, e.flag, e.cap)
}

// maxOTLPDepth bounds the nesting of OTLP messages a body may have (the
// request is 6 levels deep to a span's attribute value; each array or
// kvlist value adds 2). protobuf's own limit is 10000.
const maxOTLPDepth = 64

// otlpMsg is a message type of an OTLP trace export.
type otlpMsg int

const (
	msgNone otlpMsg = iota // a field the caps do not look into
	msgRequest
	msgResourceSpans
	msgResource
	msgEntityRef
	msgScopeSpans
	msgScope
	msgSpan
	msgEvent
	msgLink
	msgKeyValue
	msgAnyValue
	msgArray
	msgKvlist
	msgStrings // a repeated string (EntityRef's keys): each counts as an attribute
)

// counter is what a field's items count toward.
type counter int

const (
	cntNone counter = iota
	cntResources
	cntScopes
	cntSpans
	cntAttributes
)

// idLen is the byte length of an id field: 16 for a trace id, 8 for a span id.
type otlpField struct {
	num    protowire.Number
	json   [2]string // lowerCamelCase and proto names, as protojson reads them
	msg    otlpMsg
	count  counter
	repeat bool
	idLen  int
}

// otlpFields lists, per message, every message-typed or repeated field
// (those that can multiply what decoding allocates) and the ids.
var otlpFields = map[otlpMsg][]otlpField{
	msgRequest:       {{num: 1, json: [2]string{"resourceSpans", "resource_spans"}, msg: msgResourceSpans, count: cntResources, repeat: true}},
	msgResourceSpans: {{num: 1, json: [2]string{"resource", "resource"}, msg: msgResource}, {num: 2, json: [2]string{"scopeSpans", "scope_spans"}, msg: msgScopeSpans, count: cntScopes, repeat: true}},
	msgResource: {
		{num: 1, json: [2]string{"attributes", "attributes"}, msg: msgKeyValue, count: cntAttributes, repeat: true},
		{num: 3, json: [2]string{"entityRefs", "entity_refs"}, msg: msgEntityRef, count: cntAttributes, repeat: true},
	},
	msgEntityRef: {
		{num: 3, json: [2]string{"idKeys", "id_keys"}, msg: msgStrings, count: cntAttributes, repeat: true},
		{num: 4, json: [2]string{"descriptionKeys", "description_keys"}, msg: msgStrings, count: cntAttributes, repeat: true},
	},
	msgScopeSpans: {{num: 1, json: [2]string{"scope", "scope"}, msg: msgScope}, {num: 2, json: [2]string{"spans", "spans"}, msg: msgSpan, count: cntSpans, repeat: true}},
	msgScope:      {{num: 3, json: [2]string{"attributes", "attributes"}, msg: msgKeyValue, count: cntAttributes, repeat: true}},
	msgSpan: {
		{num: 1, json: [2]string{"traceId", "trace_id"}, idLen: 16},
		{num: 2, json: [2]string{"spanId", "span_id"}, idLen: 8},
		{num: 4, json: [2]string{"parentSpanId", "parent_span_id"}, idLen: 8},
		{num: 9, json: [2]string{"attributes", "attributes"}, msg: msgKeyValue, count: cntAttributes, repeat: true},
		{num: 11, json: [2]string{"events", "events"}, msg: msgEvent, count: cntAttributes, repeat: true},
		{num: 13, json: [2]string{"links", "links"}, msg: msgLink, count: cntAttributes, repeat: true},
	},
	msgEvent: {{num: 3, json: [2]string{"attributes", "attributes"}, msg: msgKeyValue, count: cntAttributes, repeat: true}},
	msgLink: {
		{num: 1, json: [2]string{"traceId", "trace_id"}, idLen: 16},
		{num: 2, json: [2]string{"spanId", "span_id"}, idLen: 8},
		{num: 4, json: [2]string{"attributes", "attributes"}, msg: msgKeyValue, count: cntAttributes, repeat: true},
	},
	msgKeyValue: {{num: 2, json: [2]string{"value", "value"}, msg: msgAnyValue}},
	msgAnyValue: {{num: 5, json: [2]string{"arrayValue", "array_value"}, msg: msgArray}, {num: 6, json: [2]string{"kvlistValue", "kvlist_value"}, msg: msgKvlist}},
	msgArray:    {{num: 1, json: [2]string{"values", "values"}, msg: msgAnyValue, count: cntAttributes, repeat: true}},
	msgKvlist:   {{num: 1, json: [2]string{"values", "values"}, msg: msgKeyValue, count: cntAttributes, repeat: true}},
}

func fieldByNum(m otlpMsg, num protowire.Number) *otlpField {
	fs := otlpFields[m]
	for i := range fs {
		if fs[i].num == num {
			return &fs[i]
		}
	}
	return nil
}

func fieldByJSON(m otlpMsg, key string) *otlpField {
	fs := otlpFields[m]
	for i := range fs {
		if fs[i].json[0] == key || fs[i].json[1] == key {
			return &fs[i]
		}
	}
	return nil
}

// otlpCounts counts a request's items against its caps.
type otlpCounts struct {
	caps                                 otlpCaps
	resources, scopes, spans, attributes int
}

// add counts one item of c; past its cap it returns an *otlpCapError.
func (n *otlpCounts) add(c counter) error {
	switch c {
	case cntResources:
		if n.resources++; n.resources > n.caps.resources {
			return &otlpCapError{"resource_spans", n.caps.resources, "--max-otlp-resources"}
		}
	case cntScopes:
		if n.scopes++; n.scopes > n.caps.resources {
			return &otlpCapError{"scope_spans", n.caps.resources, "--max-otlp-resources"}
		}
	case cntSpans:
		if n.spans++; n.spans > n.caps.spans {
			return &otlpCapError{"spans", n.caps.spans, "--max-events"}
		}
	case cntAttributes:
		if n.attributes++; n.attributes > n.caps.attributes {
			return &otlpCapError{"attributes (key-values at every level, array and kvlist elements, span events and links)", n.caps.attributes, "--max-otlp-attributes"}
		}
	}
	return nil
}

// idError is a trace or span id of the wrong length.
func idError(name string, got, want int) error {
	return fmt.Errorf("%s is %d bytes, want %d: OTLP trace ids are 16 bytes and span ids 8 (32 and 16 hex characters in OTLP/JSON)", name, got, want)
}

// scanOTLPProtobuf counts the items of a protobuf ExportTraceServiceRequest
// against caps and checks its ids, without decoding it. It returns an
// *otlpCapError past a cap, another error for malformed wire data or a bad
// id.
func scanOTLPProtobuf(b []byte, caps otlpCaps) error {
	n := otlpCounts{caps: caps}
	return n.scanProto(b, msgRequest, 0)
}

func (n *otlpCounts) scanProto(b []byte, m otlpMsg, depth int) error {
	if depth > maxOTLPDepth {
		return fmt.Errorf("nested deeper than %d messages", maxOTLPDepth)
	}
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
		f := fieldByNum(m, num)
		if typ != protowire.BytesType || f == nil {
			// Any other field, or a known one of the wrong wire type
			// (protobuf keeps it as unknown bytes): skipped.
			l = protowire.ConsumeFieldValue(num, typ, b)
			if l < 0 {
				return protowire.ParseError(l)
			}
			b = b[l:]
			continue
		}
		v, l := protowire.ConsumeBytes(b)
		if l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
		if f.idLen > 0 {
			if len(v) != 0 && len(v) != f.idLen {
				return idError(f.json[1], len(v), f.idLen)
			}
			continue
		}
		if err := n.add(f.count); err != nil {
			return err
		}
		if f.msg != msgStrings {
			if err := n.scanProto(v, f.msg, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// discardJSON skips a JSON value without keeping it (json.Decoder hands an
// Unmarshaler a slice of its own buffer).
type discardJSON struct{}

func (discardJSON) UnmarshalJSON([]byte) error { return nil }

// jsonWalk is the state of scanOTLPJSON.
type jsonWalk struct {
	otlpCounts
	dec  *json.Decoder
	body []byte
	out  []byte // body with the ids rewritten so far, up to done
	done int64
}

// scanOTLPJSON counts the items of an OTLP/JSON ExportTraceServiceRequest
// against caps, streaming, and returns it as the JSON protojson reads: the
// trace and span ids, hex strings in OTLP/JSON, become base64 (checked for
// their length first). It returns an *otlpCapError past a cap, another
// error (naming OTLP/JSON) for anything else wrong.
func scanOTLPJSON(body []byte, caps otlpCaps) ([]byte, error) {
	w := &jsonWalk{otlpCounts: otlpCounts{caps: caps}, dec: json.NewDecoder(bytes.NewReader(body)), body: body}
	w.dec.UseNumber()
	tok, err := w.dec.Token()
	if err != nil {
		return nil, fmt.Errorf("decode OTLP/JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("decode OTLP/JSON: not a JSON object: send one ExportTraceServiceRequest")
	}
	if err := w.object(msgRequest, 0); err != nil {
		var ce *otlpCapError
		if errors.As(err, &ce) {
			return nil, err
		}
		return nil, fmt.Errorf("decode OTLP/JSON: %w", err)
	}
	if _, err := w.dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("decode OTLP/JSON: more after the request object: send one ExportTraceServiceRequest")
	}
	if w.out == nil {
		return body, nil
	}
	return append(w.out, body[w.done:]...), nil
}

// object walks the members of an object of type m whose '{' was read, and
// its '}'.
func (w *jsonWalk) object(m otlpMsg, depth int) error {
	if depth > maxOTLPDepth {
		return fmt.Errorf("nested deeper than %d objects", maxOTLPDepth)
	}
	for w.dec.More() {
		tok, err := w.dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		f := fieldByJSON(m, key)
		switch {
		case f == nil:
			err = w.dec.Decode(&discardJSON{})
		case f.idLen > 0:
			err = w.id(key, f.idLen)
		case f.repeat:
			err = w.array(f, depth)
		default:
			err = w.value(f.msg, depth)
		}
		if err != nil {
			return err
		}
	}
	_, err := w.dec.Token() // '}'
	return err
}

// array walks a repeated field's value: each element counts.
func (w *jsonWalk) array(f *otlpField, depth int) error {
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok { // null, or a scalar protojson refuses
		return nil
	}
	if d == '{' { // not an array: protojson refuses it
		return w.object(msgNone, depth+1)
	}
	for w.dec.More() {
		if err := w.add(f.count); err != nil {
			return err
		}
		if f.msg == msgStrings {
			if err := w.dec.Decode(&discardJSON{}); err != nil {
				return err
			}
			continue
		}
		if err := w.value(f.msg, depth+1); err != nil {
			return err
		}
	}
	_, err = w.dec.Token() // ']'
	return err
}

// value walks a value that should be an object of type m.
func (w *jsonWalk) value(m otlpMsg, depth int) error {
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	switch {
	case !ok:
		return nil // null or a scalar
	case d == '{':
		return w.object(m, depth+1)
	}
	// An array where an object belongs: protojson refuses it; walk it
	// (unknown members are not counted, nothing of it is decoded).
	for w.dec.More() {
		if err := w.value(msgNone, depth+1); err != nil {
			return err
		}
	}
	_, err = w.dec.Token()
	return err
}

// id reads an id member's value: a hex string of want bytes (or empty),
// rewritten to base64.
func (w *jsonWalk) id(key string, want int) error {
	var raw json.RawMessage
	if err := w.dec.Decode(&raw); err != nil {
		return err
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return nil // not a string: protojson refuses it
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return fmt.Errorf("%s %q is not hex: OTLP/JSON writes trace and span ids as hex strings", key, s)
	}
	if len(b) != 0 && len(b) != want {
		return idError(key, len(b), want)
	}
	end := w.dec.InputOffset()
	start := end - int64(len(raw))
	if w.out == nil {
		w.out = make([]byte, 0, len(w.body)+len(w.body)/8)
	}
	w.out = append(w.out, w.body[w.done:start]...)
	w.out = append(w.out, '"')
	w.out = base64.StdEncoding.AppendEncode(w.out, b)
	w.out = append(w.out, '"')
	w.done = end
	return nil
}
