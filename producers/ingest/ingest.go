// Package ingest is harnessflow's HTTP gateway for agents in any language:
// POST /v1/events takes one JSON event, a JSON array of events or NDJSON,
// authenticated by a bearer token scoped to a project, validates every event
// and answers 202 only once the brokers acknowledged all of them. POST
// /v1/traces takes OpenTelemetry traces (OTLP/HTTP, protobuf or JSON) and
// maps GenAI agent spans to the same events (docs/otlp.md). It also serves
// /healthz and Prometheus /metrics.
package ingest

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/schemas"
)

// Source is the envelope source the gateway sets on events that have none.
const Source = "ingest"

// Config configures the gateway. Zero fields take the documented defaults.
type Config struct {
	// Brokers to produce to. Required.
	Brokers []string
	// Listen is the HTTP host:port; port 0 picks a free port (see Addr).
	// Default: 127.0.0.1:8080.
	Listen string
	// Tokens maps bearer token → project. Merged with TokensFile (a token in
	// both takes this map's project). Default: none.
	Tokens map[string]string
	// TokensFile is a file of "TOKEN PROJECT" lines (see LoadTokens).
	// Default: "" (none). At least one token must come from either.
	TokensFile string
	// MaxBody caps a request body in bytes; above it the answer is 413.
	// Default: 8 MiB.
	MaxBody int64
	// MaxEvents caps the events of one request; above it the answer is 413.
	// Default: 10000.
	MaxEvents int
	// DeliveryTimeout bounds how long a request waits for the brokers to
	// acknowledge its events; then it fails with 503. Default: 30s.
	DeliveryTimeout time.Duration
	// MaxInflight caps the body bytes of the requests being handled at
	// once (a request counts its Content-Length, or MaxBody when unknown);
	// past it a request is answered 503 with Retry-After at once, instead
	// of every client's events piling up in memory while the brokers are
	// slow or away. Default: 8 x MaxBody.
	MaxInflight int64
	// Limits caps field and event sizes. Default: schemas.DefaultLimits().
	Limits schemas.Limits
	// MaxInflightPerProject caps the in-flight body bytes of one project's
	// requests, all its tokens together, beside MaxInflight, so that one
	// tenant's slow uploads or bursts cannot take the budget of the others
	// however many tokens it holds; past it the project's request is
	// answered 503 with Retry-After. Default: a quarter of MaxInflight, and
	// at least MaxBody.
	MaxInflightPerProject int64
	// MaxInflightPerToken is the former name of MaxInflightPerProject (a
	// token's share is now its project's).
	//
	// Deprecated: set MaxInflightPerProject; this is used only when that is
	// zero.
	MaxInflightPerToken int64
	// MinHold is the least a request takes of the in-flight budgets, whatever
	// its Content-Length (which it may never send: a stalled upload holds a
	// connection, a goroutine and buffers all the same). It bounds the
	// requests in flight at once: MaxInflightPerProject/MinHold of one
	// project (256 with the defaults), MaxInflight/MinHold in all (1024), so
	// that uploads declaring a tiny Content-Length and then stalling cannot
	// pile up until the gateway runs out of open files. A request of unknown
	// length or gzip-encoded takes MaxBody. Default: 64 KiB, at most MaxBody.
	MinHold int64
	// MaxOTLPAttributes caps the attributes of one /v1/traces request: every
	// key-value of its resources, scopes, spans, span events and links (the
	// elements of array and kvlist values included) plus the span events and
	// links themselves. It is enforced while the body is decoded, so a body
	// of millions of empty attributes is refused (413) before it is decoded.
	// Default: 262144 (2^18; 26 a span at MaxEvents spans).
	MaxOTLPAttributes int
	// MaxOTLPResources caps the resource_spans, and apart the scope_spans,
	// of one /v1/traces request (413 past it), enforced while decoding.
	// Default: MaxEvents.
	MaxOTLPResources int
	// ReadTimeout bounds the reading of one request body (and of its
	// headers, at most 10s of it): a slower upload is answered 408 and
	// releases its share of the in-flight budget. Default: 60s.
	ReadTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long between
	// requests. Default: 120s (longer than clients' usual 90s idle pools).
	IdleTimeout time.Duration
	// TLSCert and TLSKey are PEM files of a certificate (chain) and its key:
	// with both, the gateway serves HTTPS only. Default: "" (plain HTTP).
	TLSCert, TLSKey string
}

// DefaultConfig is the configuration New fills in for the fields left zero
// (MaxInflight follows MaxBody: 8 x MaxBody).
func DefaultConfig() Config {
	var c Config
	c.setDefaults()
	return c
}

func (c *Config) setDefaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if c.MaxBody == 0 {
		c.MaxBody = 8 << 20
	}
	if c.MaxEvents == 0 {
		c.MaxEvents = 10000
	}
	if c.DeliveryTimeout == 0 {
		c.DeliveryTimeout = 30 * time.Second
	}
	if c.MaxInflight == 0 {
		c.MaxInflight = 8 * c.MaxBody
	}
	if c.MaxInflightPerProject == 0 {
		c.MaxInflightPerProject = c.MaxInflightPerToken
	}
	if c.MaxInflightPerProject == 0 {
		c.MaxInflightPerProject = max(c.MaxInflight/4, c.MaxBody)
	}
	if c.MinHold == 0 {
		c.MinHold = min(64<<10, c.MaxBody)
	}
	if c.MaxOTLPAttributes == 0 {
		c.MaxOTLPAttributes = 1 << 18
	}
	if c.MaxOTLPResources == 0 {
		c.MaxOTLPResources = c.MaxEvents
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = 60 * time.Second
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 120 * time.Second
	}
	if c.Limits == (schemas.Limits{}) {
		c.Limits = schemas.DefaultLimits()
	}
}

// Validate reports every problem of the configuration, joined. Tokens from
// TokensFile are not loaded here (New does).
func (c *Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, kafkax.ErrNoBrokers)
	}
	if len(c.Tokens) == 0 && c.TokensFile == "" {
		errs = append(errs, ErrNoTokens)
	}
	if c.MaxBody < 1 {
		errs = append(errs, fmt.Errorf("max body %d: must be positive", c.MaxBody))
	}
	if c.MaxEvents < 1 {
		errs = append(errs, fmt.Errorf("max events %d: must be positive", c.MaxEvents))
	}
	if c.MaxInflight < c.MaxBody {
		errs = append(errs, fmt.Errorf("max in-flight bytes %d: must be at least max body (%d)", c.MaxInflight, c.MaxBody))
	}
	if c.MaxInflightPerProject < c.MaxBody || c.MaxInflightPerProject > c.MaxInflight {
		errs = append(errs, fmt.Errorf("max in-flight bytes per project %d: must be between max body (%d) and max in-flight bytes (%d)", c.MaxInflightPerProject, c.MaxBody, c.MaxInflight))
	}
	if c.MinHold < 1 || c.MinHold > c.MaxBody {
		errs = append(errs, fmt.Errorf("min hold %d: must be between 1 and max body (%d)", c.MinHold, c.MaxBody))
	}
	if c.MaxOTLPAttributes < 1 || c.MaxOTLPResources < 1 {
		errs = append(errs, fmt.Errorf("max OTLP attributes %d, max OTLP resources %d: must be positive", c.MaxOTLPAttributes, c.MaxOTLPResources))
	}
	if c.ReadTimeout < 0 || c.IdleTimeout < 0 {
		errs = append(errs, fmt.Errorf("read timeout %s, idle timeout %s: must not be negative", c.ReadTimeout, c.IdleTimeout))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("TLS needs both a certificate and its key (--tls-cert and --tls-key), or neither"))
	}
	if c.DeliveryTimeout < 0 {
		errs = append(errs, fmt.Errorf("delivery timeout %s: must not be negative", c.DeliveryTimeout))
	}
	for tok, proj := range c.Tokens {
		if tok == "" || proj == "" {
			errs = append(errs, errors.New("tokens: empty token or project"))
			break
		}
	}
	return errors.Join(errs...)
}

// Option is an optional collaborator of New.
type Option func(*options)

// options are what New's Options set.
type options struct {
	log zerolog.Logger
	reg prometheus.Registerer
	ln  net.Listener
}

// WithLogger sets the logger. Default: a disabled logger.
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.log = l } }

// WithRegisterer registers the gateway's metrics (hf_ingest_*) with r.
// The gateway's /metrics serves r when r is a *prometheus.Registry, and
// otherwise a registry of its own (obs.NewRegistry) that holds the same
// metrics. Default: a registry of its own.
func WithRegisterer(r prometheus.Registerer) Option { return func(o *options) { o.reg = r } }

// WithListener serves on ln (already bound; closed when Run ends) instead of
// binding Config.Listen.
func WithListener(ln net.Listener) Option { return func(o *options) { o.ln = ln } }

// Server is the ingest gateway. Its methods are safe for concurrent use; Run
// is called once.
type Server struct {
	cfg    Config
	log    zerolog.Logger
	reg    *prometheus.Registry // what /metrics serves
	ln     net.Listener         // WithListener's, or nil: bind cfg.Listen
	tokens *tokenSet
	prod   *producers.Producer

	ready   chan struct{}
	addr    atomic.Value // string
	running atomic.Bool
	once    sync.Once
	// inflight holds the in-flight body bytes, taken by the requests handled.
	inflight *budget
	// opened: cell_started events made from trace attributes and acknowledged.
	opened  *openedCells
	tlsCert *tls.Certificate // nil: plain HTTP

	metrics
}

// New validates cfg, loads the tokens and prepares the gateway; Run serves.
func New(cfg Config, opts ...Option) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("ingest config: %w", err)
	}
	o := options{log: zerolog.Nop()}
	for _, opt := range opts {
		opt(&o)
	}
	tokens := map[string]string{}
	if cfg.TokensFile != "" {
		ft, err := LoadTokens(cfg.TokensFile)
		if err != nil {
			return nil, err
		}
		for k, v := range ft {
			tokens[k] = v
		}
	}
	for k, v := range cfg.Tokens {
		tokens[k] = v
	}
	if len(tokens) == 0 {
		return nil, ErrNoTokens
	}
	var cert *tls.Certificate
	if cfg.TLSCert != "" {
		c, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("ingest TLS: load the certificate %s and key %s (PEM files): %w", cfg.TLSCert, cfg.TLSKey, err)
		}
		cert = &c
	}
	prod, err := producers.New(producers.Config{
		Brokers: cfg.Brokers, Source: Source, Limits: cfg.Limits, MaxElapsedTime: cfg.DeliveryTimeout,
	}, producers.WithLogger(o.log))
	if err != nil {
		return nil, err
	}
	regs, served := registries(o.reg)
	ts := newTokenSet(tokens)
	s := &Server{
		cfg: cfg, log: o.log, reg: served, ln: o.ln, tokens: ts, prod: prod, tlsCert: cert,
		ready: make(chan struct{}), inflight: newBudget(cfg.MaxInflight, cfg.MaxInflightPerProject, ts.projects),
		opened: newOpenedCells(openedCellsSize), metrics: newMetrics(),
	}
	if err := s.metrics.register(regs...); err != nil {
		_ = prod.Close(context.Background())
		return nil, err
	}
	return s, nil
}

// Run creates the topics if needed, serves until ctx ends, then drains the
// producer. It returns an error if the listener or the brokers fail at start.
func (s *Server) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("ingest: Run called twice")
	}
	defer s.closeProducer()
	if err := kafkax.EnsureAllTopics(ctx, s.cfg.Brokers); err != nil {
		if s.ln != nil {
			s.ln.Close()
		}
		return err
	}
	ln := s.ln
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", s.cfg.Listen); err != nil {
			return fmt.Errorf("ingest listen on %s: %w", s.cfg.Listen, err)
		}
	}
	a := ln.Addr().String()
	s.addr.Store(a)
	close(s.ready)
	s.log.Info().Str("addr", a).Msg("ingest listening")
	// A request in flight at a stop waits for its acknowledgement up to
	// DeliveryTimeout: it gets that long to answer (202 or 503) before
	// the server closes, so a clean stop ends cleanly.
	if s.tlsCert != nil {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{*s.tlsCert}, MinVersion: tls.VersionTLS12})
	}
	return obs.ServeServer(ctx, ln, s.httpServer(), s.cfg.DeliveryTimeout+5*time.Second)
}

// httpServer is the gateway's http.Server: headers within 10s (at most
// ReadTimeout), a whole request within ReadTimeout past them (the body
// handlers set their own deadline), idle connections closed after
// IdleTimeout.
func (s *Server) httpServer() *http.Server {
	hdr := min(10*time.Second, s.cfg.ReadTimeout)
	return &http.Server{
		Handler: s.Handler(), ReadHeaderTimeout: hdr, ReadTimeout: hdr + s.cfg.ReadTimeout,
		IdleTimeout: s.cfg.IdleTimeout, ErrorLog: log.New(io.Discard, "", 0),
	}
}

func (s *Server) closeProducer() {
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.prod.Close(ctx); err != nil {
			s.log.Error().Err(err).Msg("close producer")
		}
	})
}

// Ready is closed once the gateway listens (Addr is then valid).
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Addr is the address the gateway listens on; "" before Ready.
func (s *Server) Addr() string {
	a, _ := s.addr.Load().(string)
	return a
}

// Handler returns the gateway's HTTP handler: /v1/events, /v1/traces
// (OTLP/HTTP, see otlp.go), /healthz (liveness), /readyz (503 until it
// listens, and while no broker answers: check "kafka") and /metrics.
func (s *Server) Handler() http.Handler {
	mux := obs.Mux(s.reg, nil, obs.WithReady("ingest", s.ready),
		obs.WithCheck("kafka", func(ctx context.Context) error { return kafkax.Ping(ctx, s.cfg.Brokers) }))
	mux.HandleFunc("/v1/events", s.handleEvents)
	mux.HandleFunc("/v1/traces", s.handleTraces)
	return mux
}

// ItemError is one rejected item of a request body (the 400 and 403 answers
// are a JSON list of them).
type ItemError struct {
	Index int    `json:"index"`
	Error string `json:"error"`
}

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	code, reason, n := s.events1(w, r)
	s.requests.WithLabelValues(strconv.Itoa(code)).Inc()
	s.latency.Observe(time.Since(start).Seconds())
	if reason != "" {
		s.rejections.WithLabelValues(reason).Inc()
	}
	if n > 0 {
		s.events.Add(float64(n))
	}
	s.log.Debug().Int("code", code).Str("reason", reason).Int("events", n).Dur("took", time.Since(start)).Msg("request")
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

type errorBody struct {
	Error string `json:"error"`
}

// events1 answers one request and returns the status, the rejection reason
// ("" when accepted) and the number of accepted events.
func (s *Server) events1(w http.ResponseWriter, r *http.Request) (int, string, int) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{"use POST"})
		return http.StatusMethodNotAllowed, reasonMethod, 0
	}
	tok, project, known := s.authorize(r)
	if !known {
		w.Header().Set("WWW-Authenticate", `Bearer realm="harnessflow"`)
		writeJSON(w, http.StatusUnauthorized, errorBody{"missing or unknown bearer token: send the header Authorization: Bearer <token>"})
		return http.StatusUnauthorized, reasonUnauthorized, 0
	}
	if r.ContentLength > s.cfg.MaxBody {
		writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{fmt.Sprintf("request body is over the %d-byte cap", s.cfg.MaxBody)})
		return http.StatusRequestEntityTooLarge, reasonTooLarge, 0
	}
	l, busy := s.inflight.acquire(tok, s.hold(r))
	if l == nil {
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, errorBody{busy})
		return http.StatusServiceUnavailable, reasonBusy, 0
	}
	defer l.release()
	body, err := s.readRequestBody(w, r)
	if err != nil {
		f := s.classifyBodyError(w, err)
		writeJSON(w, f.code, errorBody{f.msg})
		return f.code, f.reason, 0
	}
	items, ierr := splitItems(body, s.cfg.MaxEvents)
	if ierr != nil {
		writeJSON(w, http.StatusBadRequest, []ItemError{*ierr})
		return http.StatusBadRequest, reasonInvalid, 0
	}
	if len(items) > s.cfg.MaxEvents {
		writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{fmt.Sprintf("more than %d events, over the %d-event cap of one request: split them over several requests", s.cfg.MaxEvents, s.cfg.MaxEvents)})
		return http.StatusRequestEntityTooLarge, reasonTooLarge, 0
	}
	evs := make([]schemas.Event, 0, len(items))
	var invalid, forbidden []ItemError
	for i, raw := range items {
		// The token's project before the id is derived: derived ids hash
		// the project, so two projects' id-less events stay two events.
		ev, err := schemas.ParseJSONWith(raw, s.cfg.Limits, schemas.Envelope{Project: project, Source: Source})
		if err != nil {
			invalid = append(invalid, ItemError{i, err.Error()})
			continue
		}
		// The derived types are the pipeline's own: a tenant's would replace
		// what the pipeline derived (dead letters, samples, checkpoints).
		if err := producers.CheckProducerType(ev.Type()); err != nil {
			invalid = append(invalid, ItemError{i, err.Error()})
			continue
		}
		if err := claimProject(ev, project); err != nil {
			forbidden = append(forbidden, ItemError{i, err.Error()})
		}
		evs = append(evs, ev)
	}
	if len(forbidden) > 0 {
		writeJSON(w, http.StatusForbidden, forbidden)
		return http.StatusForbidden, reasonForbidden, 0
	}
	if len(invalid) > 0 {
		writeJSON(w, http.StatusBadRequest, invalid)
		return http.StatusBadRequest, reasonInvalid, 0
	}
	l.deliver()
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.DeliveryTimeout)
	defer cancel()
	if err := s.prod.EmitSync(ctx, evs...); err != nil {
		var ie *producers.InvalidEventError
		if errors.As(err, &ie) {
			writeJSON(w, http.StatusBadRequest, []ItemError{{ie.Index, ie.Err.Error()}})
			return http.StatusBadRequest, reasonInvalid, 0
		}
		if r.Context().Err() != nil {
			// The client went away first: no one to answer, and no fault
			// of the brokers. 499 is the usual code for it in access logs.
			s.log.Warn().Int("events", len(evs)).Msg("client went away before the brokers acknowledged its events; they may or may not be written (a resend is idempotent)")
			return 499, reasonClientGone, 0
		}
		s.log.Error().Err(err).Int("events", len(evs)).Msg("delivery failed")
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, errorBody{"events not acknowledged by the brokers (" + err.Error() +
			"): some may be written, none is confirmed; resend the same request later: the same events get the same event ids, so a resend does not duplicate them"})
		return http.StatusServiceUnavailable, reasonDelivery, 0
	}
	writeJSON(w, http.StatusAccepted, map[string]int{"accepted": len(evs)})
	return http.StatusAccepted, "", len(evs)
}

// claimProject applies a token's project rules to an event: one without a
// project takes the token's, one naming another project is refused; one
// without a source gets Source.
func claimProject(ev schemas.Event, project string) error {
	h := ev.Header()
	switch {
	case h.Project == "":
		h.Project = project
	case h.Project != project:
		return fmt.Errorf("project %q is not this token's project", h.Project)
	}
	if h.Source == "" {
		h.Source = Source
	}
	return nil
}

// splitItems splits a body into its events: one JSON object, a JSON array of
// objects, or several objects separated by newlines (NDJSON). It stops after
// limit+1 events (the caller rejects more than limit), so that a body of many
// tiny items costs no more than the cap's worth of them.
func splitItems(body []byte, limit int) ([]json.RawMessage, *ItemError) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, &ItemError{0, "empty body: send a JSON event, an array of events or NDJSON"}
	}
	if body[0] == '[' {
		return splitArray(body, limit)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var vals []json.RawMessage
	for len(vals) <= limit {
		var v json.RawMessage
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, &ItemError{len(vals), "malformed JSON: " + err.Error()}
		}
		if len(v) > 0 && v[0] == '[' {
			return nil, &ItemError{len(vals), "an array among several values: send one array, or NDJSON objects"}
		}
		vals = append(vals, v)
	}
	return vals, nil
}

// splitArray reads the elements of a body that is one JSON array, up to
// limit+1 of them.
func splitArray(body []byte, limit int) ([]json.RawMessage, *ItemError) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil { // the '['
		return nil, &ItemError{0, "malformed JSON array: " + err.Error()}
	}
	var arr []json.RawMessage
	for dec.More() {
		if len(arr) > limit {
			return arr, nil
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, &ItemError{len(arr), "malformed JSON array: " + err.Error()}
		}
		arr = append(arr, v)
	}
	if _, err := dec.Token(); err != nil { // the ']'
		return nil, &ItemError{len(arr), "malformed JSON array: " + err.Error()}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &ItemError{len(arr), "malformed JSON: more after the array: send one array, or NDJSON objects"}
	}
	if len(arr) == 0 {
		return nil, &ItemError{0, "empty array: no events"}
	}
	return arr, nil
}
