package ingest

import (
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"

	"github.com/harnessflow/harnessflow/schemas"
)

// DecodeOTLPTraces exposes the /v1/traces decoder to the external tests.
func DecodeOTLPTraces(body []byte, isJSON bool) (*coltrace.ExportTraceServiceRequest, error) {
	enc := otlpProtobuf
	if isJSON {
		enc = otlpJSON
	}
	return decodeOTLPTraces(body, enc)
}

// MapTraces exposes the span mapping to the external tests: the events,
// and the counts of spans, ignored and rejected spans.
func MapTraces(req *coltrace.ExportTraceServiceRequest, project string) (evs []schemas.Event, spans, ignored, rejected int) {
	res := mapTraces(req, project, schemas.DefaultLimits())
	for _, m := range res.events {
		evs = append(evs, m.ev)
	}
	return evs, res.spans, res.ignored, len(res.rejected)
}
