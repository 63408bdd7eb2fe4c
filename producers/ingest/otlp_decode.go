package ingest

import (
	"errors"
	"fmt"
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

// decodeOTLPTraces decodes an ExportTraceServiceRequest in enc, its caps
// enforced first (otlp_limits.go): past one it returns an *otlpCapError and
// decodes nothing.
func decodeOTLPTraces(body []byte, enc otlpEncoding, caps otlpCaps) (*coltrace.ExportTraceServiceRequest, error) {
	req := &coltrace.ExportTraceServiceRequest{}
	if enc == otlpProtobuf {
		if err := scanOTLPProtobuf(body, caps); err != nil {
			var ce *otlpCapError
			if errors.As(err, &ce) {
				return nil, err
			}
			return nil, fmt.Errorf("decode OTLP protobuf: %w", err)
		}
		if err := proto.Unmarshal(body, req); err != nil {
			return nil, fmt.Errorf("decode OTLP protobuf: %w", err)
		}
		return req, nil
	}
	std, err := scanOTLPJSON(body, caps)
	if err != nil {
		return nil, err
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(std, req); err != nil {
		return nil, fmt.Errorf("decode OTLP/JSON: %w", err)
	}
	return req, nil
}

// encodeOTLP marshals an answer message in enc.
func encodeOTLP(m proto.Message, enc otlpEncoding) ([]byte, error) {
	if enc == otlpJSON {
		return protojson.Marshal(m)
	}
	return proto.Marshal(m)
}
