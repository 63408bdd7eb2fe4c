// Package chsink is the ClickHouse sink: a Kafka consumer group over every raw
// and derived topic that writes each event to its table (docs/design.md §5) in
// large named-column native inserts, and commits offsets only after the rows
// are in ClickHouse.
//
// Delivery is at-least-once from Kafka and exactly-once in effect: a row's
// ReplacingMergeTree version comes from its Kafka coordinates, tables dedupe
// on event id, and the analyst views aggregate over deduplicated data, so a
// redelivered batch or a full replay changes no figure. When ClickHouse is
// down the sink stops fetching (its buffers are bounded), retries with
// bounded backoff, and resumes where it stopped. Undecodable messages become
// rows of rejected_events (stage decode) with their coordinates. A row
// ClickHouse refuses (a permanent error that is no fault of the table or
// the server) is found by bisecting its batch, bounded by MaxRefusedRows,
// and becomes a rejected_events row (stage semantic, CodeRefused, the
// server's reason) while the rest of the batch is inserted and committed.
//
// Inserts run in their own goroutines (Config.Inserters batches in flight,
// one queued), so decoding overlaps inserting and one batch's client-side
// encoding overlaps another's server-side write. After each task_attempts insert the sink
// recomputes the cell_scores summaries of that insert's cells
// (chddl.RecomputeCells); a batch's offsets are committed only once it is
// inserted and, for attempts, summarized.
//
// Recomputations are isolated per project (recompute.go): an inserted batch
// is split by project, each project's cells wait in its own queue, and
// Config.RecomputeWorkers workers (default 4) take one project each at a
// time, coalescing every batch queued for it into one recomputation. A
// project whose cells are huge (a recomputation's cost grows with a cell's
// attempts) holds one worker, so other projects' summaries are written, and
// their partitions committed, without waiting for it; a partition is held
// only below the rows of a project not yet summarized. At most
// maxRecomputeJobs (64) inserted batches await recomputation; past that the
// inserts, and fetching, wait. hf_sink_cell_scores_queued_cells,
// hf_sink_cell_scores_queued_projects, hf_sink_cell_scores_busy_workers,
// hf_sink_cell_scores_oldest_wait_seconds and the histogram
// hf_sink_cell_scores_lag_seconds (insert to summary written) show the queue;
// all workers busy with a rising oldest wait means more projects are slow
// than there are workers.
package chsink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/retry"
	"github.com/harnessflow/harnessflow/schemas"
)

// Sink consumes Kafka topics into ClickHouse tables. Run it once.
type Sink struct {
	cfg Config
	log zerolog.Logger
	reg prometheus.Registerer
	w   BatchWriter
	m   *sinkMetrics
	dec *schemas.Decoder // Confluent framing through Config.SchemaRegistry

	// Owned by Run's goroutine only.
	bufs      map[*table]*buffer
	buffered  int
	fetched   map[tp]int64 // highest offset read per partition
	first     map[tp]int64 // first offset read per partition
	committed map[tp]int64 // highest offset committed per partition
	awaiting  []*job       // handed to the inserter, not done yet, in order
	// behind is, per partition read, how many messages its last fetch
	// left unread (high watermark − next offset), and lagging how many of
	// them are behind: with none and nothing queued by the fetcher the
	// sink has read everything there is (Config.MinAge).
	behind  map[tp]int64
	lagging int
	// behindAt is when a partition was last read while behind: one not
	// read for MaxAge no longer counts (revoked by a rebalance, which the
	// sink does not see).
	behindAt map[tp]time.Time

	// The workers (inserters, recompute workers): jobs in, done flags, a
	// note on progress and the first error of each out.
	ins      chan *job
	doneNote chan struct{}
	workErr  chan error
	failed   atomic.Bool  // a worker failed: the others only drain jobs
	inflight inflightJobs // jobs handed to the inserters and not inserted yet

	// ownWriter: w is the ConnWriter Run opened (not WithWriter's).
	ownWriter bool
	// verifying: the recomputed cells are verified (a cluster; set by
	// startWorkers before the workers start).
	verifying bool
	// dlq writes the dead letters of rows ClickHouse refuses to hf.dlq
	// (set by runOnce before its workers start).
	dlq *kafka.Writer

	// rq is the running consumer's recompute queue (recompute.go), nil
	// when none runs; the metrics read its depth.
	rq atomic.Pointer[recomputeQueue]

	// verify is the cells awaiting verification on a cluster (verify.go);
	// it outlives a consumer restart.
	verify verifySet

	statsMu sync.Mutex
	stats   Stats

	// ready is closed once the sink first consumes (Ready).
	ready     chan struct{}
	readyOnce sync.Once
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
	// Unverified is the cells whose cell_scores summary, recomputed
	// through a cluster, awaits verification now; Repairs the cells
	// recomputed again because it found them short (verify.go).
	Unverified, Repairs int64
	// RecomputeQueued is the cells of inserted attempts queued for their
	// cell_scores recomputation now (not counting those being recomputed).
	RecomputeQueued int64
}

// New checks cfg and returns a Sink; it connects to nothing until Run.
func New(cfg Config, opts ...Option) (*Sink, error) {
	cfg.setDefaults()
	s := &Sink{log: zerolog.Nop(), bufs: map[*table]*buffer{}, fetched: map[tp]int64{}, first: map[tp]int64{}, committed: map[tp]int64{}, behind: map[tp]int64{}, behindAt: map[tp]time.Time{}, ready: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	if err := cfg.Validate(s.w != nil); err != nil {
		return nil, err
	}
	s.cfg = cfg
	s.dec = &schemas.Decoder{}
	if cfg.SchemaRegistry != "" {
		s.dec.Registry = schemas.NewRegistry(cfg.SchemaRegistry, nil)
	}
	s.m = newMetrics(s.reg, func() float64 {
		if q := s.rq.Load(); q != nil {
			_, _, _, oldest := q.depth(time.Now())
			return oldest.Seconds()
		}
		return 0
	})
	return s, nil
}

// Ready is closed once the sink first consumes: ClickHouse answered, the
// migrations are applied and its group reader runs (/readyz answers 200
// from then on).
func (s *Sink) Ready() <-chan struct{} { return s.ready }

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
	lctx, stopLag := context.WithCancel(ctx)
	var lagDone sync.WaitGroup
	lagDone.Add(1)
	go func() { defer lagDone.Done(); s.pollLag(lctx) }()
	defer func() { stopLag(); lagDone.Wait() }()
	restarts := retry.NewRestarts(retry.Policy{Initial: 200 * time.Millisecond, Max: 10 * time.Second})
	for {
		err := s.runOnce(ctx)
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// Stopped while connecting (a ClickHouse ping, a migration):
			// nothing was read, so nothing is lost; a clean stop.
			return nil
		}
		if err == nil || ctx.Err() != nil {
			return err
		}
		var ke *kafkaError
		var se *startError
		d := restarts.Next()
		switch {
		case errors.As(err, &ke):
			s.log.Warn().Err(err).Dur("retry_in", d).Msg("Kafka error; the consumer starts again from the committed offsets")
			s.m.kafkaRestarts.Inc()
		case errors.Is(err, schemas.ErrRegistryUnavailable):
			// The schema registry stayed away for RetryMaxElapsed: nothing
			// was rejected and nothing past the message committed; a
			// transient fault, so start again rather than exit.
			s.log.Warn().Err(err).Dur("retry_in", d).Msg("schema registry unavailable; the consumer starts again from the committed offsets")
			s.m.kafkaRestarts.Inc()
		case errors.As(err, &se) && chx.Transient(se.err):
			// ClickHouse went away while the sink connected or migrated
			// (a restart, a failover): nothing was read yet; wait it out.
			s.log.Warn().Err(err).Dur("retry_in", d).Msg("ClickHouse not ready at start; connecting again")
			s.m.startRetries.Inc()
		default:
			return err
		}
		s.reset()
		if !retry.Sleep(ctx, d) {
			return nil
		}
	}
}

// kafkaError marks a Kafka fetch or commit failure: Run starts the consumer
// again instead of stopping.
type kafkaError struct{ err error }

func (e *kafkaError) Error() string { return e.err.Error() }
func (e *kafkaError) Unwrap() error { return e.err }

// startError marks a failure to prepare ClickHouse (connect, migrate) before
// anything was read: Run retries it while it is transient (chx.Transient).
type startError struct{ err error }

func (e *startError) Error() string { return e.err.Error() }
func (e *startError) Unwrap() error { return e.err }

// reset drops what a failed consumer run buffered (it is read again from
// the committed offsets) and the writer Run opened for it.
func (s *Sink) reset() {
	s.bufs, s.buffered = map[*table]*buffer{}, 0
	s.fetched, s.first, s.committed = map[tp]int64{}, map[tp]int64{}, map[tp]int64{}
	s.behind, s.lagging, s.behindAt = map[tp]int64{}, 0, map[tp]time.Time{}
	s.awaiting = nil
	s.failed.Store(false)
	s.inflight.Reset()
	if s.ownWriter {
		s.w, s.ownWriter = nil, false
	}
}

// runOnce is one run of the consumer: it prepares ClickHouse (migrations,
// the writer), joins the group, starts the fetcher and the workers, and
// consumes until ctx ends or an error. After a cancellation it drains: what
// was buffered is flushed and committed.
func (s *Sink) runOnce(ctx context.Context) error {
	conn, err := s.openClickHouse(ctx)
	if err != nil {
		return &startError{err}
	}
	if conn != nil {
		defer conn.Close()
	}
	if err := kafkax.EnsureAllTopics(ctx, s.cfg.Brokers); err != nil {
		return &kafkaError{fmt.Errorf("create topics: %w", err)}
	}
	r := kafka.NewReader(s.readerConfig())
	defer r.Close()
	s.dlq = kafkax.NewWriter(kafkax.WriterConfig{Brokers: s.cfg.Brokers, Topic: schemas.TopicDLQ, BatchSize: 1})
	defer s.dlq.Close()
	s.log.Info().Strs("topics", s.cfg.Topics).Str("group", s.cfg.Group).Str("database", s.cfg.Database).
		Int("max_rows", s.cfg.MaxRows).Int("max_bytes", s.cfg.MaxBytes).Dur("max_age", s.cfg.MaxAge).
		Dur("min_age", s.cfg.MinAge).Dur("recompute_every", s.cfg.RecomputeEvery).Msg("sink started")
	s.readyOnce.Do(func() { close(s.ready) })

	// The fetcher owns the reader's FetchMessage; the loop (consume) owns
	// everything else.
	fctx, stopFetch := context.WithCancel(ctx)
	msgs, fetchErr, waitFetch := s.startFetcher(fctx, r)
	defer func() { stopFetch(); waitFetch() }()
	stopWorkers := s.startWorkers()
	defer stopWorkers()
	runErr := s.consume(ctx, r, msgs, fetchErr)
	stopFetch()
	waitFetch()
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return fmt.Errorf("sink stopping (uncommitted rows will be redelivered): %w", runErr)
	}
	return s.drain(r)
}

// openClickHouse connects to ClickHouse, unless a writer was given and the
// migrations are skipped: it applies the migrations (unless
// Config.SkipMigrate) and, when no writer was given, makes one over the
// connection. It returns the connection, or nil when it opened none; the
// caller closes it when the run ends.
func (s *Sink) openClickHouse(ctx context.Context) (driver.Conn, error) {
	if s.w != nil && s.cfg.SkipMigrate {
		return nil, nil
	}
	var opts []chx.OpenOption
	if s.cfg.Cluster != "" {
		opts = append(opts, chx.Cluster())
	}
	conn, err := chx.Open(ctx, s.cfg.ClickHouse, "", opts...)
	if err != nil {
		return nil, err
	}
	if !s.cfg.SkipMigrate {
		migrate := chddl.Migrate
		if s.cfg.Cluster != "" {
			migrate = func(ctx context.Context, se chddl.Session, db string) (chddl.Result, error) {
				return chddl.MigrateCluster(ctx, se, db, s.cfg.Cluster)
			}
		}
		res, err := migrate(ctx, chx.Session(conn), s.cfg.Database)
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("migrate %s: %w", s.cfg.Database, err)
		}
		res.Log(s.log, s.cfg.Database)
	}
	if s.w == nil {
		s.w, s.ownWriter = NewConnWriter(conn, s.cfg.Database), true
	}
	return conn, nil
}

// readerConfig is the configuration of the group's reader: every topic of
// Config.Topics, in the group Config.Group.
func (s *Sink) readerConfig() kafka.ReaderConfig {
	rc := kafkax.ReaderConfig(s.cfg.Brokers, s.cfg.Group, s.cfg.Topics...)
	if len(s.cfg.Topics) == 1 {
		// A group reader needs GroupTopics or Topic; keep one code path.
		rc.GroupTopics, rc.Topic = s.cfg.Topics, ""
	}
	return rc
}
