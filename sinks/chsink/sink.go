// Package chsink is the ClickHouse sink: a Kafka consumer group over every raw
// and derived topic that writes each event to its table (DESIGN.md §5) in
// large named-column native inserts, and commits offsets only after the rows
// are in ClickHouse.
//
// Delivery is at-least-once from Kafka and exactly-once in effect: a row's
// ReplacingMergeTree version comes from its Kafka coordinates, tables dedupe
// on event id, and the analyst views aggregate over deduplicated data, so a
// redelivered batch or a full replay changes no figure. When ClickHouse is
// down the sink stops fetching (its buffers are bounded), retries with
// bounded backoff, and resumes where it stopped. Undecodable messages become
// rows of rejected_events (stage decode) with their coordinates.
//
// Inserts run in their own goroutines (Config.Inserters batches in flight,
// one queued), so decoding overlaps inserting and one batch's client-side
// encoding overlaps another's server-side write. After each task_attempts insert the sink
// recomputes the cell_scores summaries of that insert's cells
// (chddl.RecomputeCellScores, in a second goroutine that coalesces queued
// cells); a batch's offsets are committed only once it is inserted and, for
// attempts, summarized.
package chsink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/infra/kafkatopics"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/schemas"
)

// Config configures a Sink. Zero fields take the defaults on each field.
type Config struct {
	// Brokers are the Kafka bootstrap brokers. Required.
	Brokers []string
	// ClickHouse is the server's native-protocol host:port. Required unless a
	// writer is given with WithWriter (and SkipMigrate is set).
	ClickHouse string
	// Database receives the rows. Default: "harnessflow".
	Database string
	// Group is the Kafka consumer group. Default: "hf-sink".
	Group string
	// Topics to consume. Default: every topic of infra/kafkatopics but hf.outcomes
	// (raw, derived and the DLQ).
	Topics []string
	// MaxRows flushes a table's buffer at this many rows. Default: 50000.
	MaxRows int
	// MaxBytes flushes a table's buffer at this many message bytes.
	// Default: 16 MiB.
	MaxBytes int
	// MaxAge flushes a table's buffer when its oldest row is this old.
	// Default: 1s.
	MaxAge time.Duration
	// MaxBufferedRows bounds the rows buffered over all tables; past it the
	// largest buffer is flushed before more is read. Batches handed to the
	// inserters (at most Inserters in flight and one queued) are not counted.
	// Default: 4 × MaxRows.
	MaxBufferedRows int
	// Inserters is how many batches may be inserted at once (each on its own
	// connection). Rows deduplicate on event id with versions from their Kafka
	// coordinates, so the order in which concurrent batches land does not
	// matter; offsets are still committed only below every batch not done.
	// Default: 2.
	Inserters int
	// InsertTimeout bounds one insert attempt. Default: 60s.
	InsertTimeout time.Duration
	// RetryMaxElapsed bounds the retries of one failing insert (ClickHouse
	// down); past it Run returns the error, with the batch's offsets
	// uncommitted. Default: 15m.
	RetryMaxElapsed time.Duration
	// RetryMaxInterval caps the wait between retries. Default: 5s.
	RetryMaxInterval time.Duration
	// DrainTimeout bounds the final flush and commit after ctx ends.
	// Default: 30s.
	DrainTimeout time.Duration
	// PayloadCap caps the payload kept in rejected_events for an undecodable
	// message. Default: 64 KiB.
	PayloadCap int
	// SkipMigrate skips applying infra/chddl's migrations at start.
	// Default: false (migrate).
	SkipMigrate bool
}

func (c *Config) setDefaults() {
	if c.Database == "" {
		c.Database = chddl.DefaultDatabase
	}
	if c.Group == "" {
		c.Group = "hf-sink"
	}
	if len(c.Topics) == 0 {
		c.Topics = DefaultTopics()
	}
	if c.MaxRows == 0 {
		c.MaxRows = 50000
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = 16 << 20
	}
	if c.MaxAge == 0 {
		c.MaxAge = time.Second
	}
	if c.MaxBufferedRows == 0 {
		c.MaxBufferedRows = 4 * c.MaxRows
	}
	if c.Inserters == 0 {
		c.Inserters = 2
	}
	if c.InsertTimeout == 0 {
		c.InsertTimeout = 60 * time.Second
	}
	if c.RetryMaxElapsed == 0 {
		c.RetryMaxElapsed = 15 * time.Minute
	}
	if c.RetryMaxInterval == 0 {
		c.RetryMaxInterval = 5 * time.Second
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.PayloadCap == 0 {
		c.PayloadCap = 64 << 10
	}
}

// Validate reports every problem of the config (after defaults).
func (c *Config) Validate(haveWriter bool) error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, ErrNoBrokers)
	}
	if strings.TrimSpace(c.ClickHouse) == "" && !haveWriter {
		errs = append(errs, ErrNoClickHouse)
	}
	if c.MaxRows < 0 || c.MaxBytes < 0 || c.MaxAge < 0 || c.MaxBufferedRows < 0 || c.Inserters < 0 {
		errs = append(errs, ErrBadLimits)
	}
	for _, t := range c.Topics {
		if _, ok := kafkatopics.Lookup(t); !ok {
			errs = append(errs, fmt.Errorf("chsink: unknown topic %q", t))
		}
	}
	return errors.Join(errs...)
}

// DefaultTopics returns every topic but the internal hf.outcomes.
func DefaultTopics() []string {
	var out []string
	for _, t := range kafkatopics.Names() {
		if t != schemas.TopicOutcomes {
			out = append(out, t)
		}
	}
	return out
}

// Option is a test seam.
type Option func(*Sink)

// WithLogger sets the logger. Default: no logging.
func WithLogger(l zerolog.Logger) Option { return func(s *Sink) { s.log = l } }

// WithRegisterer registers the sink's metrics with r. Default: none.
func WithRegisterer(r prometheus.Registerer) Option { return func(s *Sink) { s.reg = r } }

// WithWriter replaces the ClickHouse writer (a real server is still the
// default and what the tests use).
func WithWriter(w BatchWriter) Option { return func(s *Sink) { s.w = w } }

// Sink consumes Kafka topics into ClickHouse tables. Run it once.
type Sink struct {
	cfg Config
	log zerolog.Logger
	reg prometheus.Registerer
	w   BatchWriter
	m   *sinkMetrics

	// Owned by Run's goroutine only.
	bufs      map[*table]*buffer
	buffered  int
	fetched   map[tp]int64 // highest offset read per partition
	first     map[tp]int64 // first offset read per partition
	committed map[tp]int64 // highest offset committed per partition
	awaiting  []*job       // handed to the inserter, not done yet, in order

	// The workers (inserter, recomputer): jobs in, done flags, a note on
	// progress and the first error of each out.
	ins      chan *job
	recs     chan *job
	doneNote chan struct{}
	workErr  chan error
	failed   atomic.Bool  // a worker failed: the others only drain jobs
	inflight atomic.Int64 // jobs handed to the inserters and not inserted yet

	// ownWriter: w is the ConnWriter Run opened (not WithWriter's).
	ownWriter bool

	statsMu sync.Mutex
	stats   Stats
}

// job is one table buffer handed to the inserter, with its lowest offset
// per partition: those offsets are not committed before the job is done
// (inserted and, for task_attempts, its cells' cell_scores recomputed).
type job struct {
	t       *table
	rows    []row
	bytes   int
	pending map[tp]int64
	cells   []string // task_attempts: the cells to recompute
	done    atomic.Bool
}

// tp is a topic partition.
type tp struct {
	topic     string
	partition int
}

// buffer holds one table's rows awaiting insert.
type buffer struct {
	rows    []row
	bytes   int
	first   time.Time    // when the oldest row arrived
	pending map[tp]int64 // lowest buffered offset per partition
}

// Stats are counters of a sink's progress, safe to read while it runs.
type Stats struct {
	// Rows is rows inserted, Rejected the undecodable messages among them.
	Rows, Rejected int64
	// Inserts is successful inserts, Retries failed attempts that were retried.
	Inserts, Retries int64
	// Commits is successful offset commits, Committed the messages read
	// since Run began whose offsets are committed.
	Commits, Committed int64
}

// New checks cfg and returns a Sink; it connects to nothing until Run.
func New(cfg Config, opts ...Option) (*Sink, error) {
	cfg.setDefaults()
	s := &Sink{log: zerolog.Nop(), bufs: map[*table]*buffer{}, fetched: map[tp]int64{}, first: map[tp]int64{}, committed: map[tp]int64{}}
	for _, o := range opts {
		o(s)
	}
	if err := cfg.Validate(s.w != nil); err != nil {
		return nil, err
	}
	s.cfg = cfg
	s.m = newMetrics(s.reg)
	return s, nil
}

// Stats returns a snapshot of the counters.
func (s *Sink) Stats() Stats {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	return s.stats
}

func (s *Sink) addStats(f func(*Stats)) {
	s.statsMu.Lock()
	f(&s.stats)
	s.statsMu.Unlock()
}

// Run connects, migrates (unless Config.SkipMigrate), and consumes until ctx
// ends or a fatal error (an insert that failed past RetryMaxElapsed, a
// permanent ClickHouse error). A Kafka error (a fetch or an offset commit
// failing, as during a broker restart) is not fatal: the consumer starts
// again after a backoff, from the committed offsets, and what was buffered
// and not committed is read again (inserts are idempotent). On cancel it
// flushes what it buffered and commits, bounded by DrainTimeout, and returns
// nil.
func (s *Sink) Run(ctx context.Context) error {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = 200*time.Millisecond, 10*time.Second, 0
	for {
		err := s.runOnce(ctx)
		var ke *kafkaError
		if err == nil || ctx.Err() != nil || !errors.As(err, &ke) {
			return err
		}
		d := bo.NextBackOff()
		s.log.Warn().Err(err).Dur("retry_in", d).Msg("Kafka error; the consumer starts again from the committed offsets")
		s.m.kafkaRestarts.Inc()
		s.reset()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(d):
		}
	}
}

// kafkaError marks a Kafka fetch or commit failure: Run starts the consumer
// again instead of stopping.
type kafkaError struct{ err error }

func (e *kafkaError) Error() string { return e.err.Error() }
func (e *kafkaError) Unwrap() error { return e.err }

// reset drops what a failed consumer run buffered (it is read again from
// the committed offsets) and the writer Run opened for it.
func (s *Sink) reset() {
	s.bufs, s.buffered = map[*table]*buffer{}, 0
	s.fetched, s.first, s.committed = map[tp]int64{}, map[tp]int64{}, map[tp]int64{}
	s.awaiting = nil
	s.failed.Store(false)
	s.inflight.Store(0)
	if s.ownWriter {
		s.w, s.ownWriter = nil, false
	}
}

func (s *Sink) runOnce(ctx context.Context) error {
	if s.w == nil || !s.cfg.SkipMigrate {
		conn, err := chx.Open(ctx, s.cfg.ClickHouse, "")
		if err != nil {
			return err
		}
		defer conn.Close()
		if !s.cfg.SkipMigrate {
			res, err := chddl.Migrate(ctx, chx.Session(conn), s.cfg.Database)
			if err != nil {
				return fmt.Errorf("migrate %s: %w", s.cfg.Database, err)
			}
			res.Log(s.log, s.cfg.Database)
		}
		if s.w == nil {
			s.w, s.ownWriter = NewConnWriter(conn, s.cfg.Database), true
		}
	}
	if err := kafkax.EnsureAllTopics(ctx, s.cfg.Brokers); err != nil {
		return err
	}
	rc := kafkax.ReaderConfig(s.cfg.Brokers, s.cfg.Group, s.cfg.Topics...)
	if len(s.cfg.Topics) == 1 {
		// A group reader needs GroupTopics or Topic; keep one code path.
		rc.GroupTopics, rc.Topic = s.cfg.Topics, ""
	}
	r := kafka.NewReader(rc)
	defer r.Close()
	s.log.Info().Strs("topics", s.cfg.Topics).Str("group", s.cfg.Group).Str("database", s.cfg.Database).
		Int("max_rows", s.cfg.MaxRows).Int("max_bytes", s.cfg.MaxBytes).Dur("max_age", s.cfg.MaxAge).Msg("sink started")

	// The fetcher owns the reader's FetchMessage; the loop below owns
	// everything else. msgs is unbuffered beyond the reader's own queue, so a
	// loop blocked in a retrying insert stops fetching.
	fctx, stopFetch := context.WithCancel(ctx)
	defer stopFetch()
	msgs := make(chan kafka.Message, 256)
	fetchErr := make(chan error, 1)
	go func() {
		defer close(msgs)
		for {
			m, err := r.FetchMessage(fctx)
			if err != nil {
				if fctx.Err() == nil {
					fetchErr <- &kafkaError{fmt.Errorf("fetch: %w", err)}
				}
				return
			}
			select {
			case msgs <- m:
			case <-fctx.Done():
				return
			}
		}
	}()

	// The workers: the inserters take full buffers (Inserters in flight,
	// one queued: decoding overlaps the inserts, and blocked inserts stop the
	// loop, hence fetching), the recomputer the inserted attempts' cells.
	// They outlive ctx (the drain waits for them) and stop when Run returns.
	s.ins = make(chan *job, 1)
	s.recs = make(chan *job, 8)
	s.doneNote = make(chan struct{}, 1)
	s.workErr = make(chan error, 1)
	wctx, stopWork := context.WithCancel(context.Background())
	var insWG, recWG sync.WaitGroup
	cs, _ := s.w.(CellScorer)
	for i := 0; i < max(1, s.cfg.Inserters); i++ {
		insWG.Add(1)
		go func() { defer insWG.Done(); s.inserter(wctx, cs != nil) }()
	}
	if cs != nil {
		recWG.Add(1)
		go func() { defer recWG.Done(); s.recomputer(wctx, cs) }()
	}
	defer func() {
		close(s.ins)
		stopWork()
		insWG.Wait()
		close(s.recs)
		recWG.Wait()
	}()

	tick := time.NewTicker(tickEvery(s.cfg.MaxAge))
	defer tick.Stop()
	var runErr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err := <-fetchErr:
			runErr = err
			break loop
		case err := <-s.workErr:
			runErr = err
			break loop
		case <-s.doneNote:
			if err := s.commit(ctx, r); err != nil {
				runErr = err
				break loop
			}
		case m, ok := <-msgs:
			if !ok {
				runErr = fetcherEnded(fetchErr)
				break loop
			}
			// Take what the fetcher already has (up to a bound, and up to a
			// full buffer) before checking the flush conditions, rather than
			// a full select and check per message.
			closed := false
			full := s.add(m)
		burst:
			for n := 1; n < maxBurst && !full; n++ {
				select {
				case m, ok := <-msgs:
					if !ok {
						closed = true
						break burst
					}
					full = s.add(m)
				default:
					break burst
				}
			}
			if err := s.flushDue(ctx, r, false); err != nil {
				runErr = err
				break loop
			}
			if closed {
				runErr = fetcherEnded(fetchErr)
				break loop
			}
		case <-tick.C:
			if err := s.flushDue(ctx, r, false); err != nil {
				runErr = err
				break loop
			}
		}
	}
	stopFetch()
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		s.log.Error().Err(runErr).Msg("sink stopping on error; uncommitted rows will be redelivered")
		return runErr
	}
	// Drain: flush everything buffered and commit, bounded.
	dctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	if err := s.flushDue(dctx, r, true); err != nil {
		s.log.Error().Err(err).Msg("sink drain failed; uncommitted rows will be redelivered")
		return fmt.Errorf("drain: %w", err)
	}
	for s.pruneAwaiting(); len(s.awaiting) > 0; s.pruneAwaiting() {
		select {
		case <-s.doneNote:
		case err := <-s.workErr:
			s.log.Error().Err(err).Msg("sink drain failed; uncommitted rows will be redelivered")
			return fmt.Errorf("drain: %w", err)
		case <-dctx.Done():
			s.log.Error().Err(dctx.Err()).Int("batches", len(s.awaiting)).Msg("sink drain timed out; uncommitted rows will be redelivered")
			return fmt.Errorf("drain: %w", dctx.Err())
		}
	}
	if err := s.commit(dctx, r); err != nil {
		s.log.Error().Err(err).Msg("sink drain failed; uncommitted rows will be redelivered")
		return fmt.Errorf("drain: %w", err)
	}
	st := s.Stats()
	s.log.Info().Int64("rows", st.Rows).Int64("inserts", st.Inserts).Int64("retries", st.Retries).Msg("sink stopped")
	return nil
}

// fetcherEnded returns why the fetcher closed its channel: the fetch error
// it queued before closing, or nil when it stopped because the run's context
// ended. The loop's select may see the closed channel before the queued
// error; without this look a fetch error (a broker restart) would end Run
// with nil, as if it had been cancelled, and the sink would stop consuming.
func fetcherEnded(fetchErr <-chan error) error {
	select {
	case err := <-fetchErr:
		return err
	default:
		return nil
	}
}

func tickEvery(maxAge time.Duration) time.Duration {
	d := maxAge / 4
	if d < 5*time.Millisecond {
		d = 5 * time.Millisecond
	}
	return d
}

// maxBurst bounds the messages the loop takes from the fetcher in one go.
const maxBurst = 512

// add decodes m and buffers its row; it reports whether a buffer is now due
// for flushing by size (its table's, or the total bound).
func (s *Sink) add(m kafka.Message) bool {
	k := tp{m.Topic, m.Partition}
	if cur, ok := s.fetched[k]; !ok || m.Offset > cur {
		s.fetched[k] = m.Offset
	}
	if _, ok := s.first[k]; !ok {
		s.first[k] = m.Offset
	}
	md := meta{topic: m.Topic, partition: int32(m.Partition), offset: m.Offset}
	ev, err := schemas.Decode(m.Value)
	var t *table
	if err == nil {
		t, ev = tableFor(ev)
		if t == nil {
			err = fmt.Errorf("%w: no table for event type", schemas.ErrUnknownType)
		}
	}
	if err != nil {
		ev, t = s.rejection(m, err), tRejected
		s.m.rejected.WithLabelValues(m.Topic).Inc()
		s.addStats(func(st *Stats) { st.Rejected++ })
	}
	b := s.bufs[t]
	if b == nil {
		b = &buffer{pending: map[tp]int64{}}
		s.bufs[t] = b
	}
	if len(b.rows) == 0 {
		b.first = time.Now()
	}
	if _, ok := b.pending[k]; !ok {
		b.pending[k] = m.Offset
	}
	b.rows = append(b.rows, row{ev: ev, m: md})
	b.bytes += len(m.Value) + 64
	s.buffered++
	s.m.buffered.Set(float64(s.buffered))
	return len(b.rows) >= s.cfg.MaxRows || b.bytes >= s.cfg.MaxBytes || s.buffered > s.cfg.MaxBufferedRows
}

// rejection turns an undecodable message into a rejected_events row.
func (s *Sink) rejection(m kafka.Message, err error) *schemas.Rejected {
	code := schemas.CodeMalformed
	var fe *schemas.FieldError
	switch {
	case errors.As(err, &fe) && fe.Code != "":
		code = fe.Code
	case errors.Is(err, schemas.ErrUnknownFingerprint):
		code = schemas.CodeUnknownFingerprint
	case errors.Is(err, schemas.ErrUnknownType):
		code = schemas.CodeUnknownType
	}
	payload := m.Value
	if len(payload) > s.cfg.PayloadCap {
		payload = payload[:s.cfg.PayloadCap]
	}
	ts := m.Time
	if ts.IsZero() {
		ts = time.Now()
	}
	msg := err.Error()
	if len(msg) > 4096 {
		msg = msg[:4096]
	}
	return &schemas.Rejected{
		Envelope: schemas.Envelope{
			EventID:   fmt.Sprintf("sink-decode:%s:%d:%d", m.Topic, m.Partition, m.Offset),
			EventTime: ts.UTC(),
			Source:    "sink",
		},
		Stage: schemas.StageDecode, ReasonCode: code, Message: msg,
		SourceTopic: m.Topic, Partition: int32(m.Partition), Offset: m.Offset,
		Payload: append([]byte(nil), payload...),
	}
}

// flushDue inserts every table whose buffer is full or old enough (all of
// them when all is set, or when the total bound is reached: the largest
// first), then commits what became safe to commit.
func (s *Sink) flushDue(ctx context.Context, r *kafka.Reader, all bool) error {
	now := time.Now()
	flushed := false
	for _, t := range tables {
		b := s.bufs[t]
		if b == nil || len(b.rows) == 0 {
			continue
		}
		if all || len(b.rows) >= s.cfg.MaxRows || b.bytes >= s.cfg.MaxBytes || now.Sub(b.first) >= s.cfg.MaxAge {
			if err := s.flush(ctx, t, b); err != nil {
				return err
			}
			flushed = true
		}
	}
	for s.buffered > s.cfg.MaxBufferedRows {
		var big *table
		for _, t := range tables {
			if b := s.bufs[t]; b != nil && (big == nil || len(b.rows) > len(s.bufs[big].rows)) {
				big = t
			}
		}
		if err := s.flush(ctx, big, s.bufs[big]); err != nil {
			return err
		}
		flushed = true
	}
	if flushed || all {
		return s.commit(ctx, r)
	}
	return nil
}

// flush hands one table's buffer to the inserters (blocking while every
// inserter is busy and another batch is queued); its offsets stay
// uncommitted until the job is done.
func (s *Sink) flush(ctx context.Context, t *table, b *buffer) error {
	n := len(b.rows)
	j := &job{t: t, rows: b.rows, bytes: b.bytes, pending: b.pending}
	s.inflight.Add(1)
	select {
	case s.ins <- j:
	case err := <-s.workErr:
		s.inflight.Add(-1)
		return err
	case <-ctx.Done():
		// The rows stay in the buffer, so the drain that follows a
		// cancellation flushes them (a job left awaiting with no inserter
		// would hold the drain until its timeout).
		s.inflight.Add(-1)
		return &InsertError{Table: t.name, Rows: n, Err: ctx.Err()}
	}
	// Only this goroutine reads awaiting and the buffers (commit), so the
	// job may be done before it is listed: pruneAwaiting drops it then.
	s.awaiting = append(s.awaiting, j)
	b.rows = make([]row, 0, n)
	b.bytes = 0
	b.pending = map[tp]int64{}
	s.buffered -= n
	s.m.buffered.Set(float64(s.buffered))
	return nil
}

// inserter inserts jobs (Config.Inserters of them run at once), retrying
// with bounded backoff (every attempt builds a fresh batch from the job's
// rows), then marks them done or, for task_attempts when recompute is set,
// hands them to the recomputer. After any worker's failure the workers only
// drain jobs; the first error is reported.
func (s *Sink) inserter(ctx context.Context, recompute bool) {
	for j := range s.ins {
		s.insert(ctx, j, recompute)
		s.inflight.Add(-1)
	}
}

// insert inserts one job and marks it done or hands it to the recomputer.
func (s *Sink) insert(ctx context.Context, j *job, recompute bool) {
	// After any worker's failure, jobs are only drained.
	if s.failed.Load() {
		return
	}
	t, n := j.t, len(j.rows)
	start := time.Now()
	attempts, err := s.retry(ctx, t.name, n, "insert", func(ictx context.Context) error {
		t0 := time.Now()
		err := s.w.WriteBatch(ictx, t.name, t.cols, t.build(j.rows, time.Now().UTC().Truncate(time.Second)))
		s.m.latency.WithLabelValues(t.name).Observe(time.Since(t0).Seconds())
		return err
	})
	if err != nil {
		s.fail(&InsertError{Table: t.name, Rows: n, Attempts: attempts, Err: err})
		return
	}
	s.m.rows.WithLabelValues(t.name).Add(float64(n))
	s.addStats(func(st *Stats) { st.Rows += int64(n); st.Inserts++ })
	s.log.Debug().Str("table", t.name).Int("rows", n).Int("bytes", j.bytes).Int("attempts", attempts).
		Dur("took", time.Since(start)).Msg("inserted")
	if recompute && t == tAttempts {
		j.cells = attemptCells(j.rows)
	}
	j.rows = nil // let the events be freed
	if j.cells == nil {
		s.markDone(j)
		return
	}
	select {
	case s.recs <- j:
	case <-ctx.Done():
		s.fail(&InsertError{Table: "cell_scores", Rows: len(j.cells), Err: ctx.Err()})
	}
}

// fail stops the workers (they only drain jobs from now on) and reports
// err unless an earlier failure was reported.
func (s *Sink) fail(err error) {
	if s.failed.CompareAndSwap(false, true) {
		s.workErr <- err // capacity 1: the only send
	}
}

func (s *Sink) markDone(j *job) {
	j.done.Store(true)
	select {
	case s.doneNote <- struct{}{}:
	default:
	}
}

// retry runs op with bounded exponential backoff: each attempt bounded by
// InsertTimeout, non-retryable ClickHouse errors and cancellation final. what
// and n describe the operation in logs and metrics.
func (s *Sink) retry(ctx context.Context, tableName string, n int, what string, op func(context.Context) error) (int, error) {
	attempts := 0
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 100 * time.Millisecond
	bo.MaxInterval = s.cfg.RetryMaxInterval
	bo.MaxElapsedTime = s.cfg.RetryMaxElapsed
	err := backoff.RetryNotify(func() error {
		attempts++
		ictx, cancel := context.WithTimeout(ctx, s.cfg.InsertTimeout)
		defer cancel()
		err := op(ictx)
		if err != nil && ctx.Err() != nil {
			return backoff.Permanent(err)
		}
		if err != nil && !chx.Retryable(err) {
			return backoff.Permanent(err)
		}
		return err
	}, backoff.WithContext(bo, ctx), func(err error, wait time.Duration) {
		s.m.retries.WithLabelValues(tableName).Inc()
		s.addStats(func(st *Stats) { st.Retries++ })
		s.log.Warn().Err(err).Str("table", tableName).Int("rows", n).Int("attempt", attempts).Dur("retry_in", wait).
			Msg(what + " failed; fetching paused, retrying")
	})
	return attempts, err
}

// coalescePoll is how often a waiting recomputer checks for inserts in flight.
const coalescePoll = 5 * time.Millisecond

// recomputer recomputes the cell_scores of the jobs' cells, one statement
// set for every job queued meanwhile or inserted while it waited (coalesced,
// at most MaxAge of waiting), then marks them done. After
// a failure it reports the error once and only drains jobs.
func (s *Sink) recomputer(ctx context.Context, cs CellScorer) {
	for first := range s.recs {
		if s.failed.Load() {
			continue
		}
		// Coalesce: while inserts are still in flight (a sustained load),
		// wait for them, up to MaxAge, so that one recomputation covers
		// several inserts instead of competing with each of them.
		batch := []*job{first}
		deadline := time.Now().Add(s.cfg.MaxAge)
		var wait *time.Timer
	more:
		for {
			select {
			case j, ok := <-s.recs:
				if !ok {
					break more
				}
				batch = append(batch, j)
				continue
			default:
			}
			if s.inflight.Load() == 0 || !time.Now().Before(deadline) || ctx.Err() != nil {
				break more
			}
			if wait == nil {
				wait = time.NewTimer(coalescePoll)
			} else {
				wait.Reset(coalescePoll)
			}
			select {
			case j, ok := <-s.recs:
				if !ok {
					break more
				}
				batch = append(batch, j)
			case <-wait.C:
			case <-ctx.Done():
			}
		}
		if wait != nil {
			wait.Stop()
		}
		seen := map[string]struct{}{}
		var list []string
		for _, j := range batch {
			for _, c := range j.cells {
				if _, dup := seen[c]; !dup {
					seen[c] = struct{}{}
					list = append(list, c)
				}
			}
		}
		t0 := time.Now()
		attempts, err := s.retry(ctx, "cell_scores", len(list), "recompute", func(ictx context.Context) error {
			return cs.RecomputeCellScores(ictx, list)
		})
		if err != nil {
			s.fail(&InsertError{Table: "cell_scores", Rows: len(list), Attempts: attempts, Err: err})
			continue
		}
		s.m.latency.WithLabelValues("cell_scores").Observe(time.Since(t0).Seconds())
		s.log.Debug().Int("cells", len(list)).Int("batches", len(batch)).Dur("took", time.Since(t0)).Msg("cell_scores recomputed")
		for _, j := range batch {
			s.markDone(j)
		}
	}
}

// pruneAwaiting drops the jobs that are done.
func (s *Sink) pruneAwaiting() {
	w := 0
	for _, j := range s.awaiting {
		if !j.done.Load() {
			s.awaiting[w] = j
			w++
		}
	}
	clear(s.awaiting[w:])
	s.awaiting = s.awaiting[:w]
}

// attemptCells returns the distinct cell ids of task_attempts rows.
func attemptCells(rows []row) []string {
	seen := map[string]struct{}{}
	var out []string
	for _, r := range rows {
		if a, ok := r.ev.(*schemas.TaskAttempt); ok {
			if _, dup := seen[a.CellID]; !dup {
				seen[a.CellID] = struct{}{}
				out = append(out, a.CellID)
			}
		}
	}
	return out
}

// commit commits, per partition, the highest offset below every buffered
// (uncommitted) row of that partition in any table, or of an insert whose
// cell_scores recomputation is not done.
func (s *Sink) commit(ctx context.Context, r *kafka.Reader) error {
	s.pruneAwaiting()
	var msgs []kafka.Message
	for k, hi := range s.fetched {
		upto := hi
		for _, b := range s.bufs {
			if lo, ok := b.pending[k]; ok && lo-1 < upto {
				upto = lo - 1
			}
		}
		for _, j := range s.awaiting {
			if lo, ok := j.pending[k]; ok && lo-1 < upto {
				upto = lo - 1
			}
		}
		if c, ok := s.committed[k]; (ok && upto <= c) || upto < 0 {
			continue
		}
		msgs = append(msgs, kafka.Message{Topic: k.topic, Partition: k.partition, Offset: upto})
	}
	if len(msgs) == 0 {
		return nil
	}
	if err := r.CommitMessages(ctx, msgs...); err != nil {
		return &kafkaError{fmt.Errorf("commit offsets: %w", err)}
	}
	var n int64
	for _, m := range msgs {
		k := tp{m.Topic, m.Partition}
		prev, ok := s.committed[k]
		if !ok {
			prev = s.first[k] - 1
		}
		if m.Offset > prev {
			n += m.Offset - prev
		}
		s.committed[k] = m.Offset
	}
	s.addStats(func(st *Stats) { st.Commits++; st.Committed += n })
	return nil
}
