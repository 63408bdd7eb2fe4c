package ingest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/schemas"
)

// This file serves POST /v1/traces, OTLP/HTTP's trace export
// (https://opentelemetry.io/docs/specs/otlp/#otlphttp): an
// ExportTraceServiceRequest in protobuf (application/x-protobuf) or OTLP/JSON
// (application/json), optionally gzip (Content-Encoding: gzip, inflated up to
// MaxBody bytes), with the same bearer tokens and project rules as
// /v1/events. Its spans become events (otlp_map.go) produced like
// /v1/events' events, acknowledged before the answer. The answer is an
// ExportTraceServiceResponse in the request's encoding: 200 with the spans
// that became no event counted in partial_success.rejected_spans and named
// in partial_success.error_message (a trace is accepted or refused whole:
// otlp_trace.go); spans that are not agent, skill or cell-ending spans are
// ignored, never rejected. A
// failure of the whole request is a google.rpc.Status with its HTTP code:
// 413 past a cap of otlp_limits.go, enforced before the body is decoded.

// maxRejectMessages caps the rejections named in one error_message.
const maxRejectMessages = 10

// otlpAnswer is what traces1 did, for the metrics.
type otlpAnswer struct {
	code     int
	reason   string // a rejection reason of the whole request, or ""
	accepted int    // spans whose events were acknowledged
	events   int    // events acknowledged (a span may make two; a trace's cell a cell_started)
	ignored  int
	rejected int
}

func (s *Server) handleTraces(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	a := s.traces1(w, r)
	s.otlpRequests.WithLabelValues(strconv.Itoa(a.code)).Inc()
	if a.reason != "" {
		s.rejections.WithLabelValues(a.reason).Inc()
	}
	s.otlpSpans.WithLabelValues(outcomeAccepted).Add(float64(a.accepted))
	s.otlpSpans.WithLabelValues(outcomeIgnored).Add(float64(a.ignored))
	s.otlpSpans.WithLabelValues(outcomeRejected).Add(float64(a.rejected))
	if a.events > 0 {
		s.events.Add(float64(a.events))
	}
	s.log.Debug().Int("code", a.code).Str("reason", a.reason).Int("accepted", a.accepted).Int("events", a.events).Int("ignored", a.ignored).
		Int("rejected", a.rejected).Dur("took", time.Since(start)).Msg("otlp request")
}

// writeOTLP writes m in enc with the HTTP status code.
func writeOTLP(w http.ResponseWriter, code int, enc otlpEncoding, m proto.Message) {
	b, err := encodeOTLP(m, enc)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte("encode answer: "+err.Error())
	}
	w.Header().Set("Content-Type", enc.contentType())
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// fail answers a failed request: a google.rpc.Status, as OTLP/HTTP asks.
func fail(w http.ResponseWriter, code int, enc otlpEncoding, c codes.Code, reason, msg string) otlpAnswer {
	writeOTLP(w, code, enc, &spb.Status{Code: int32(c), Message: msg})
	return otlpAnswer{code: code, reason: reason}
}

// traces1 answers one /v1/traces request.
func (s *Server) traces1(w http.ResponseWriter, r *http.Request) otlpAnswer {
	enc, known := otlpEncodingOf(r.Header.Get("Content-Type"))
	if !known {
		enc = otlpJSON // the answers before the 415
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return fail(w, http.StatusMethodNotAllowed, enc, codes.Unimplemented, reasonMethod, "use POST")
	}
	tok, project, knownTok := s.authorize(r)
	if !knownTok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="harnessflow"`)
		return fail(w, http.StatusUnauthorized, enc, codes.Unauthenticated, reasonUnauthorized,
			"missing or unknown bearer token: send the header Authorization: Bearer <token> (OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20<token>)")
	}
	if !known {
		return fail(w, http.StatusUnsupportedMediaType, enc, codes.InvalidArgument, reasonMediaType,
			fmt.Sprintf("Content-Type %q: send OTLP as %s or %s", r.Header.Get("Content-Type"), ctProtobuf, ctJSON))
	}
	const fewer = ": export fewer spans per request (e.g. a smaller max_export_batch_size)"
	if r.ContentLength > s.cfg.MaxBody {
		return fail(w, http.StatusRequestEntityTooLarge, enc, codes.ResourceExhausted, reasonTooLarge,
			fmt.Sprintf("request body is over the %d-byte cap", s.cfg.MaxBody)+fewer)
	}
	l, busy := s.inflight.acquire(tok, s.hold(r))
	if l == nil {
		w.Header().Set("Retry-After", "1")
		return fail(w, http.StatusServiceUnavailable, enc, codes.Unavailable, reasonBusy, busy)
	}
	defer l.release()
	body, err := s.readRequestBody(w, r)
	if err != nil {
		f := s.classifyBodyError(w, err)
		c, msg := codes.InvalidArgument, f.msg
		switch f.code {
		case http.StatusRequestEntityTooLarge:
			c, msg = codes.ResourceExhausted, msg+fewer
		case http.StatusRequestTimeout:
			c = codes.DeadlineExceeded
		}
		return fail(w, f.code, enc, c, f.reason, msg)
	}
	req, err := decodeOTLPTraces(body, enc, s.cfg.otlpCaps())
	if err != nil {
		var ce *otlpCapError
		if errors.As(err, &ce) {
			return fail(w, http.StatusRequestEntityTooLarge, enc, codes.ResourceExhausted, reasonTooLarge, err.Error())
		}
		return fail(w, http.StatusBadRequest, enc, codes.InvalidArgument, reasonInvalid, err.Error())
	}
	if n := countSpans(req); n > s.cfg.MaxEvents {
		return fail(w, http.StatusRequestEntityTooLarge, enc, codes.ResourceExhausted, reasonTooLarge,
			fmt.Sprintf("%d spans, over the %d-span cap of one request: export fewer spans per request", n, s.cfg.MaxEvents))
	}
	res := mapTraces(req, project, s.cfg.Limits)
	l.deliver()
	a, events, ok := s.emitMapped(w, r, enc, &res)
	if !ok {
		return a
	}
	resp := &coltrace.ExportTraceServiceResponse{}
	if len(res.rejected) > 0 {
		resp.PartialSuccess = &coltrace.ExportTracePartialSuccess{
			RejectedSpans: int64(len(res.rejected)), ErrorMessage: rejectMessage(res.rejected),
		}
	}
	writeOTLP(w, http.StatusOK, enc, resp)
	return otlpAnswer{code: http.StatusOK, accepted: res.accepted, events: events, ignored: res.ignored, rejected: len(res.rejected)}
}

// emitMapped produces the accepted traces' events and waits for their
// acknowledgement, like /v1/events; a cell_started the brokers already
// acknowledged for an earlier trace (openedCells) is not sent again. An
// event the producer refuses (its checks run after ParseJSON's) refuses
// its trace, and the other traces' events are sent again. On a delivery
// failure it answers the request itself and returns false; else it returns
// the number of events acknowledged.
func (s *Server) emitMapped(w http.ResponseWriter, r *http.Request, enc otlpEncoding, res *otlpResult) (otlpAnswer, int, bool) {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.DeliveryTimeout)
	defer cancel()
	for {
		var evs []schemas.Event
		var sent []otlpMapped
		for _, m := range res.events {
			if m.ev.Type() == schemas.TypeCellStarted && s.opened.has(m.ev.Header().EventID) {
				continue
			}
			evs, sent = append(evs, m.ev), append(sent, m)
		}
		if len(evs) == 0 {
			return otlpAnswer{}, 0, true
		}
		err := s.prod.EmitSync(ctx, evs...)
		var ie *producers.InvalidEventError
		if errors.As(err, &ie) && ie.Index >= 0 && ie.Index < len(sent) {
			m := sent[ie.Index]
			why := ie.Error()
			if m.ev.Type() == schemas.TypeCellStarted {
				why = "its cell's cell_started, made from the cell attributes: " + why
			}
			m.trace.refuse(m.span, why)
			res.assemble()
			continue
		}
		if err == nil {
			for _, m := range sent {
				if m.ev.Type() == schemas.TypeCellStarted {
					s.opened.add(m.ev.Header().EventID)
				}
			}
			return otlpAnswer{}, len(evs), true
		}
		if r.Context().Err() != nil {
			s.log.Warn().Int("events", len(evs)).Msg("OTLP client went away before the brokers acknowledged its events; they may or may not be written (a resend is idempotent)")
			return otlpAnswer{code: 499, reason: reasonClientGone}, 0, false
		}
		s.log.Error().Err(err).Int("events", len(evs)).Msg("delivery failed")
		w.Header().Set("Retry-After", "5")
		return fail(w, http.StatusServiceUnavailable, enc, codes.Unavailable, reasonDelivery, "events not acknowledged by the brokers ("+err.Error()+
			"): some may be written, none is confirmed; the exporter retries the same spans later, and they get the same event ids, so nothing is duplicated"), 0, false
	}
}

func countSpans(req *coltrace.ExportTraceServiceRequest) int {
	n := 0
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += len(ss.GetSpans())
		}
	}
	return n
}

// rejectMessage joins the first maxRejectMessages rejections.
func rejectMessage(rejected []string) string {
	msg := fmt.Sprintf("%d spans rejected (an event field F comes from the span attribute harnessflow.F, the tokens from gen_ai.usage.*: see docs/otlp.md): ", len(rejected))
	if len(rejected) > maxRejectMessages {
		return msg + strings.Join(rejected[:maxRejectMessages], "; ") + fmt.Sprintf("; and %d more", len(rejected)-maxRejectMessages)
	}
	return msg + strings.Join(rejected, "; ")
}
