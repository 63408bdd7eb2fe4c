package ingest

import (
	"errors"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"

	"github.com/harnessflow/harnessflow/schemas"
)

// DecodeOTLPTraces exposes the /v1/traces decoder to the external tests.
func DecodeOTLPTraces(body []byte, isJSON bool) (*coltrace.ExportTraceServiceRequest, error) {
	enc := otlpProtobuf
	if isJSON {
		enc = otlpJSON
	}
	return decodeOTLPTraces(body, enc, defaultOTLPCaps())
}

// MapTraces exposes the span mapping to the external tests: the events
// (a trace's cell_started first), and the counts of spans, accepted,
// ignored and rejected spans.
func MapTraces(req *coltrace.ExportTraceServiceRequest, project string) (evs []schemas.Event, spans, accepted, ignored, rejected int) {
	res := mapTraces(req, project, schemas.DefaultLimits())
	for _, m := range res.events {
		evs = append(evs, m.ev)
	}
	return evs, res.spans, res.accepted, res.ignored, len(res.rejected)
}

// RejectMessages exposes the rejection messages of mapping req.
func RejectMessages(req *coltrace.ExportTraceServiceRequest, project string) []string {
	return mapTraces(req, project, schemas.DefaultLimits()).rejected
}

// DecodeOTLPTracesCaps decodes with the given caps; capped says the body
// went past one of them (a 413).
func DecodeOTLPTracesCaps(body []byte, isJSON bool, spans, resources, attributes int) (req *coltrace.ExportTraceServiceRequest, capped bool, err error) {
	enc := otlpProtobuf
	if isJSON {
		enc = otlpJSON
	}
	req, err = decodeOTLPTraces(body, enc, otlpCaps{spans: spans, resources: resources, attributes: attributes})
	var ce *otlpCapError
	return req, errors.As(err, &ce), err
}

// CountOTLP counts a decoded request's items as the caps do: resource_spans,
// scope_spans (the larger of the two is returned as resources), spans, and
// attributes (every key-value, array element, span event, link and entity
// ref key).
func CountOTLP(req *coltrace.ExportTraceServiceRequest) (resources, spans, attributes int) {
	var kvs func([]*commonpb.KeyValue)
	var val func(*commonpb.AnyValue)
	val = func(v *commonpb.AnyValue) {
		if a := v.GetArrayValue(); a != nil {
			attributes += len(a.GetValues())
			for _, e := range a.GetValues() {
				val(e)
			}
		}
		if l := v.GetKvlistValue(); l != nil {
			kvs(l.GetValues())
		}
	}
	kvs = func(l []*commonpb.KeyValue) {
		attributes += len(l)
		for _, kv := range l {
			val(kv.GetValue())
		}
	}
	scopes := 0
	for _, rs := range req.GetResourceSpans() {
		resources++
		kvs(rs.GetResource().GetAttributes())
		for _, er := range rs.GetResource().GetEntityRefs() {
			attributes += 1 + len(er.GetIdKeys()) + len(er.GetDescriptionKeys())
		}
		for _, ss := range rs.GetScopeSpans() {
			scopes++
			kvs(ss.GetScope().GetAttributes())
			for _, s := range ss.GetSpans() {
				spans++
				kvs(s.GetAttributes())
				attributes += len(s.GetEvents()) + len(s.GetLinks())
				for _, e := range s.GetEvents() {
					kvs(e.GetAttributes())
				}
				for _, l := range s.GetLinks() {
					kvs(l.GetAttributes())
				}
			}
		}
	}
	return max(resources, scopes), spans, attributes
}
