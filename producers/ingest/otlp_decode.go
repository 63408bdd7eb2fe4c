package ingest

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// This file decodes OTLP/HTTP trace export bodies: protobuf and OTLP/JSON,
// plain or gzip (body.go), into the OpenTelemetry project's own wire types.

// otlpEncoding is the encoding of an OTLP/HTTP request, and of its answer.
type otlpEncoding int

const (
	otlpProtobuf otlpEncoding = iota
	otlpJSON
)

// Content types of OTLP/HTTP.
const (
	ctProtobuf = "application/x-protobuf"
	ctJSON     = "application/json"
)

func (e otlpEncoding) contentType() string {
	if e == otlpJSON {
		return ctJSON
	}
	return ctProtobuf
}

// otlpEncodingOf maps a Content-Type header to its encoding; false when it is
// neither of OTLP/HTTP's two (parameters such as charset are ignored).
func otlpEncodingOf(contentType string) (otlpEncoding, bool) {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return 0, false
	}
	switch mt {
	case ctProtobuf:
		return otlpProtobuf, true
	case ctJSON:
		return otlpJSON, true
	}
	return 0, false
}

// decodeOTLPTraces decodes an ExportTraceServiceRequest in enc.
func decodeOTLPTraces(body []byte, enc otlpEncoding) (*coltrace.ExportTraceServiceRequest, error) {
	req := &coltrace.ExportTraceServiceRequest{}
	if enc == otlpProtobuf {
		if err := proto.Unmarshal(body, req); err != nil {
			return nil, fmt.Errorf("decode OTLP protobuf: %w", err)
		}
		return req, nil
	}
	std, err := otlpJSONToProtoJSON(body)
	if err != nil {
		return nil, err
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(std, req); err != nil {
		return nil, fmt.Errorf("decode OTLP/JSON: %w", err)
	}
	return req, nil
}

// otlpIDKeys are the object keys whose values OTLP/JSON writes as hex and
// protojson reads as base64 (the spec's lowerCamelCase names, and the
// snake_case ones protojson also accepts).
var otlpIDKeys = map[string]bool{
	"traceId": true, "spanId": true, "parentSpanId": true,
	"trace_id": true, "span_id": true, "parent_span_id": true,
}

// otlpJSONToProtoJSON rewrites OTLP/JSON into the JSON protojson reads: the
// trace and span ids, hex strings in OTLP/JSON, become base64. Everything
// else OTLP/JSON allows (enums as integers, 64-bit integers as strings or
// numbers, unknown fields) protojson reads as it is, with DiscardUnknown.
func otlpJSONToProtoJSON(body []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decode OTLP/JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("decode OTLP/JSON: more after the request object: send one ExportTraceServiceRequest")
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, errors.New("decode OTLP/JSON: not a JSON object: send one ExportTraceServiceRequest")
	}
	if err := rewriteIDs(v, 0); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// maxJSONDepth bounds the nesting rewriteIDs walks (protojson's own limit is
// 10000; OTLP needs a few dozen levels at most).
const maxJSONDepth = 256

func rewriteIDs(v any, depth int) error {
	if depth > maxJSONDepth {
		return fmt.Errorf("decode OTLP/JSON: nested deeper than %d levels", maxJSONDepth)
	}
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if s, ok := val.(string); ok && otlpIDKeys[k] {
				b, err := hex.DecodeString(s)
				if err != nil {
					return fmt.Errorf("decode OTLP/JSON: %s %q is not hex: OTLP/JSON writes trace and span ids as hex strings", k, s)
				}
				x[k] = base64.StdEncoding.EncodeToString(b)
				continue
			}
			if err := rewriteIDs(val, depth+1); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := rewriteIDs(e, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// encodeOTLP marshals an answer message in enc.
func encodeOTLP(m proto.Message, enc otlpEncoding) ([]byte, error) {
	if enc == otlpJSON {
		return protojson.Marshal(m)
	}
	return proto.Marshal(m)
}
