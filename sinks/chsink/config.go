package chsink

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/infra/kafkatopics"
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
	// Cluster names the ClickHouse cluster (its remote_servers name) whose
	// Distributed tables receive the rows: migrations run ON CLUSTER
	// (chddl.MigrateCluster) and every insert returns only once its rows are
	// stored on their shards (chx.Cluster), before offsets are committed.
	// Default: "" (a single server).
	Cluster string
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
	// MaxAge flushes a table's buffer when its oldest row is this old:
	// the backstop of a sink that is never caught up. Default: 1s.
	MaxAge time.Duration
	// MinAge flushes a table's buffer once its oldest row is this old when
	// the sink has read everything there is: the fetcher has nothing
	// queued and every partition read so far is at its high watermark (a
	// paced stream is visible in about MinAge, a backlog is inserted in
	// full batches). Default (0): 250ms; negative, or not below MaxAge:
	// off (MaxAge alone).
	MinAge time.Duration
	// RecomputeEvery is the least time between two recomputations of one
	// project's cell_scores: the parts inserted meanwhile wait and are
	// recomputed together. A recomputation reads every attempt of its
	// cells, so its cost grows with them, not with the rows inserted; this
	// keeps its share of ClickHouse's work apart from how often rows are
	// flushed. A stopping sink's drain recomputes at once. Default (0):
	// 1s; negative: none.
	RecomputeEvery time.Duration
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
	// RecomputeWorkers is how many projects' cell_scores may be recomputed
	// at once, one project per worker (recompute.go): a project whose
	// cells are slow to recompute delays the other projects only while
	// this many such projects recompute at once. Default: 4.
	RecomputeWorkers int
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
	// SchemaRegistry is the base URL of a Confluent Schema Registry (several
	// comma-separated are tried in turn) through which Confluent-framed
	// messages (0x00, schema id, Avro body) are decoded; writer schemas are
	// fetched once per id and cached. An id the registry says it does not
	// have becomes a rejected_events row (decode, unknown_schema_id); while
	// the registry cannot be asked the sink retries that message (blocking;
	// after RetryMaxElapsed the consumer starts again from the committed
	// offsets, as on a Kafka error) and rejects nothing. Default: "" (none: Confluent-framed
	// messages are rejected decode/schema_registry).
	SchemaRegistry string
	// SkipMigrate skips applying infra/chddl's migrations at start.
	// Default: false (migrate).
	SkipMigrate bool
	// LagInterval is how often the group's lag (hf_sink_commit_lag) is
	// polled from the brokers. Default (also for a negative value): 5s.
	LagInterval time.Duration
	// VerifyDelay is how long after recomputing cells through a cluster
	// (Cluster set) the sink checks their cell_scores summaries against
	// their attempts (chddl.VerifyCells) and recomputes those that a
	// replica's lag left short; a cell still short is checked again after
	// twice the previous wait, at most MaxVerifyDelay. Unused on a single
	// server, where a recomputation reads what the insert wrote. Default:
	// 1s.
	VerifyDelay time.Duration
	// MaxUnverified bounds the cells awaiting verification; past it the
	// oldest are dropped unverified (counted in
	// hf_sink_cell_scores_unverified_dropped_total and logged): their next
	// attempt recomputes them again. Default: 1048576.
	MaxUnverified int
}

// DefaultConfig returns the Config that New uses for zero fields: the one
// copy of every default, which the command's flags show.
func DefaultConfig() Config {
	var c Config
	c.setDefaults()
	return c
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
	if c.MinAge == 0 {
		c.MinAge = 250 * time.Millisecond
	}
	if c.RecomputeEvery == 0 {
		c.RecomputeEvery = time.Second
	}
	if c.MaxBufferedRows == 0 {
		c.MaxBufferedRows = 4 * c.MaxRows
	}
	if c.Inserters == 0 {
		c.Inserters = 2
	}
	if c.RecomputeWorkers == 0 {
		c.RecomputeWorkers = 4
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
	if c.LagInterval <= 0 {
		c.LagInterval = 5 * time.Second
	}
	if c.VerifyDelay <= 0 {
		c.VerifyDelay = time.Second
	}
	if c.MaxUnverified <= 0 {
		c.MaxUnverified = 1 << 20
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
	if c.MaxRows < 0 || c.MaxBytes < 0 || c.MaxAge < 0 || c.MaxBufferedRows < 0 || c.Inserters < 0 || c.RecomputeWorkers < 0 {
		errs = append(errs, ErrBadLimits)
	}
	for _, t := range c.Topics {
		if _, ok := kafkatopics.Lookup(t); !ok {
			errs = append(errs, fmt.Errorf("chsink: unknown topic %q", t))
		}
	}
	if err := schemas.CheckRegistryURL(c.SchemaRegistry); err != nil {
		errs = append(errs, fmt.Errorf("chsink: %w (--schema-registry)", err))
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

// Option customizes a Sink: its logger, its metrics registry, and (a test
// seam) its writer.
type Option func(*Sink)

// WithLogger sets the logger. Default: no logging.
func WithLogger(l zerolog.Logger) Option { return func(s *Sink) { s.log = l } }

// WithRegisterer registers the sink's metrics with r. Default: none.
func WithRegisterer(r prometheus.Registerer) Option { return func(s *Sink) { s.reg = r } }

// WithWriter replaces the ClickHouse writer (a real server is still the
// default and what the tests use).
func WithWriter(w BatchWriter) Option { return func(s *Sink) { s.w = w } }
