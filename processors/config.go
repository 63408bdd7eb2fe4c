package processors

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/harnessflow/harnessflow/schemas"
)

// DefaultMergeIdle is Config.MergeIdle's default and `harnessflow process
// --merge-idle`'s: a Go SDK producer stamps and sends a cell's events within
// milliseconds of each other, and 500ms keeps the latency at 10k events/s
// well under the 2s goal (bench/README.md).
const DefaultMergeIdle = 500 * time.Millisecond

// Defaults of the per-project state bounds (Config.MaxOpenCells,
// Config.MaxStateBytes, Config.CellIdle) and of their `harnessflow process`
// flags. A legitimate campaign keeps a few hundred cells open on a
// partition at most; 64 MiB holds about 100 000 admitted attempts of 512
// bytes each in open cells; an agent that sends nothing about a cell for six
// hours is no longer running it.
const (
	DefaultMaxOpenCells  = 1000
	DefaultMaxStateBytes = 64 << 20
	DefaultCellIdle      = 6 * time.Hour
)

// Config configures a Processor. Zero fields take the default named in their
// comment (setDefaults); Validate reports every remaining problem at once.
type Config struct {
	// Brokers are the Kafka bootstrap addresses. Required.
	Brokers []string
	// Group is stage A's consumer group (raw cell topics); stage B uses
	// Group + "-pair" (hf.outcomes). Default: "hf-processors".
	Group string
	// PendingMax caps the events, per assigned partition, that wait for their
	// cell_started (or for the update that introduces their harness
	// version). It is shared fairly by project: when full, the oldest
	// waiting event of the project that holds the most is dead-lettered
	// (unknown_cell or unknown_version), so one project's flood evicts only
	// its own events while another project holds fewer. Default: 10000.
	PendingMax int
	// PendingTimeout is how long such an event waits, measured on the
	// partition's log clock (the largest message timestamp merged so far)
	// and, while the partition is idle, on the wall clock. Default: 2m.
	PendingTimeout time.Duration
	// Grace keeps a finished cell's state (stage A) and a done Pairer (stage
	// B) this long after it finished, on the log clock and the wall clock
	// alike, then evicts it. It is the retention window for late events:
	// within it a late event of a finished cell corrects the derived
	// events (stage B keeps a finished cell's inputs 2 × Grace), past it
	// the event is dead-lettered late_beyond_window (doc.go, "Late
	// events"). Default: 10m.
	Grace time.Duration
	// MaxOpenCells caps the unfinished cells one project may hold on one
	// assigned partition (stage A; the raw cell topics have 6 partitions by
	// default, infra/kafkatopics). A cell_started past it is dead-lettered
	// (stage limit, open_cells_cap) and the events that waited for it with
	// it; a finished or aged-out cell frees its place. Default:
	// DefaultMaxOpenCells (1000).
	MaxOpenCells int
	// MaxStateBytes caps the state bytes one project may hold on one
	// assigned partition: an estimate of what the admitted events of its
	// cells cost in both stages (a cell's fixed part; an open cell's event,
	// its encoded size plus a fixed overhead; a finished cell's, what the
	// scorer keeps of it, doc.go "Late events"; a finished cell keeps its
	// fixed part, its updates and its late events until it is evicted).
	// Stage B caps its finished cells' state per project by it too. An
	// event that would take its project
	// past it is dead-lettered (stage limit, state_bytes_cap); a
	// cell_finished never is. Default: DefaultMaxStateBytes (64 MiB).
	MaxStateBytes int64
	// CellIdle is how long an unfinished cell may go without an admitted
	// event, on the partition's log clock or on the wall clock, whichever
	// passes first, before it ages out: stage A drops its state and
	// dead-letters it (stage limit, cell_idle, at its cell_started's
	// coordinates), and stage B drops a pairing key whose pairer saw no
	// event for as long. Later events of the cell are unknown_cell. Aged-out
	// cells are counted (hf_process_aged_out_cells_total) and logged once
	// per batch. Default: DefaultCellIdle (6h).
	CellIdle time.Duration
	// DLQPayloadCap caps the payload copied into a dead letter. Default: 64 KiB.
	DLQPayloadCap int
	// Limits are the size caps of schemas.Validate; Limits.Event also caps
	// a whole message (limit stage). Default: schemas.DefaultLimits() for
	// each zero field.
	Limits schemas.Limits
	// MinPairs is the scorer's minimum number of tasks per side for a
	// non-neutral label. Default: 5.
	MinPairs int
	// Lambda is the stability penalty handed to the scorer. Default: 1.
	Lambda float64
	// BatchSize is the most input messages processed between two
	// write-then-commit points of a partition. Default: 2000.
	BatchSize int
	// OutcomeBatch is the most admitted events stage A packs into one
	// hf.outcomes record: the events of one pairing key within one batch,
	// in order (outbatch.go). 1 writes one record per event, unframed, as
	// versions before batching did; stage B reads both. Default: 64.
	OutcomeBatch int
	// FetchMaxBytes caps one fetch response per topic partition. Each stream
	// holds at most the fetch being merged and one read ahead, decoded, so
	// this bounds the input buffers under a backlog. Default: 256 KiB.
	FetchMaxBytes int
	// FetchWait is how long an empty fetch waits at the broker for data (a
	// partition's first fetch does not wait, so an empty partition is known
	// at its end at once); it also paces idle partitions' wall-clock
	// timeouts. Default: 250ms.
	FetchWait time.Duration
	// MergeIdle is how long stage A holds a message that arrived while a
	// sibling raw topic partition is empty, before merging it past that
	// partition (compare Kafka Streams' max.task.idle.ms): a producer that
	// writes one topic before another (a bulk import) would otherwise have
	// a cell's cell_finished merged before its last update. It adds up to
	// MergeIdle of latency, not a per-message cost. Default:
	// DefaultMergeIdle.
	MergeIdle time.Duration
	// FinishHold is how long stage A holds an admissible cell_finished
	// before it admits it, measured on the partition's log clock (and on
	// the wall clock while the partition is idle, counted from when it was
	// read or from its log time, whichever ends first): the cell's updates, skill
	// events and judgments that reach the log late (a producer's retries, a
	// sibling topic's head stamped later by another producer) are still
	// admitted before the finish, so a last-round update keeps its sample.
	// It holds only that cell's finish, never the partition. An event
	// that comes later still counts: it re-emits the cell's figures under
	// the same ids (hf_process_after_finish_seconds shows how late they
	// come). Negative disables it. Default: 1s.
	FinishHold time.Duration
	// SessionTimeout is the consumer-group session timeout. Default: 10s.
	SessionTimeout time.Duration
	// HeartbeatInterval is the consumer-group heartbeat period. Default: 1s.
	HeartbeatInterval time.Duration
	// RebalanceTimeout bounds a rebalance. Default: 10s.
	RebalanceTimeout time.Duration
	// RetryMaxElapsed bounds the backoff retries of writes and commits.
	// Default: 30s.
	RetryMaxElapsed time.Duration
	// DrainTimeout bounds the final write-and-commit when ctx ends. A
	// negative value abandons the in-flight batch without writing or
	// committing it (a crash, for tests). Default: 10s.
	DrainTimeout time.Duration
	// StopWhenCaughtUp makes Run return nil once both stages have committed
	// everything up to the raw topics' end offsets read at start (replay
	// --until-caught-up). Default: false (run until ctx ends).
	StopWhenCaughtUp bool
	// Listen serves /metrics and /healthz on this address. Default: "" (none).
	Listen string
	// SchemaRegistry is the base URL of a Confluent Schema Registry (several
	// comma-separated are tried in turn) through which Confluent-framed raw
	// messages (0x00, schema id, Avro body) are decoded; writer schemas are
	// fetched once per id and cached. An id the registry says it does not
	// have is dead-lettered decode/unknown_schema_id; while the registry
	// cannot be asked nothing is dead-lettered: the fetch is retried
	// (RetryMaxElapsed), then the partition's work restarts from its
	// committed offsets. Admitted events go to hf.outcomes re-encoded as
	// single-object. Default: "" (none: Confluent-framed messages are
	// dead-lettered decode/schema_registry).
	SchemaRegistry string
}

// DefaultConfig returns the Config that New uses for zero fields: the one
// copy of every default, which the command's flags show.
func DefaultConfig() Config {
	var c Config
	c.setDefaults()
	return c
}

func (c *Config) setDefaults() {
	if c.Group == "" {
		c.Group = "hf-processors"
	}
	if c.PendingMax == 0 {
		c.PendingMax = 10000
	}
	if c.PendingTimeout == 0 {
		c.PendingTimeout = 2 * time.Minute
	}
	if c.Grace == 0 {
		c.Grace = 10 * time.Minute
	}
	if c.MaxOpenCells == 0 {
		c.MaxOpenCells = DefaultMaxOpenCells
	}
	if c.MaxStateBytes == 0 {
		c.MaxStateBytes = DefaultMaxStateBytes
	}
	if c.CellIdle == 0 {
		c.CellIdle = DefaultCellIdle
	}
	if c.DLQPayloadCap == 0 {
		c.DLQPayloadCap = 64 << 10
	}
	d := schemas.DefaultLimits()
	if c.Limits.ArtifactContent == 0 {
		c.Limits.ArtifactContent = d.ArtifactContent
	}
	if c.Limits.TaskInput == 0 {
		c.Limits.TaskInput = d.TaskInput
	}
	if c.Limits.Event == 0 {
		c.Limits.Event = d.Event
	}
	if c.MinPairs == 0 {
		c.MinPairs = 5
	}
	if c.Lambda == 0 {
		c.Lambda = 1
	}
	if c.BatchSize == 0 {
		c.BatchSize = 2000
	}
	if c.OutcomeBatch == 0 {
		c.OutcomeBatch = 64
	}
	if c.FetchMaxBytes == 0 {
		c.FetchMaxBytes = 256 << 10
	}
	if c.FetchWait == 0 {
		c.FetchWait = 250 * time.Millisecond
	}
	if c.MergeIdle == 0 {
		c.MergeIdle = DefaultMergeIdle
	}
	if c.FinishHold == 0 {
		c.FinishHold = time.Second
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 10 * time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = time.Second
	}
	if c.RebalanceTimeout == 0 {
		c.RebalanceTimeout = 10 * time.Second
	}
	if c.RetryMaxElapsed == 0 {
		c.RetryMaxElapsed = 30 * time.Second
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 10 * time.Second
	}
}

// Validate reports every problem of c (after defaults), joined; each wraps
// ErrConfig.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...)))
	}
	if len(c.Brokers) == 0 {
		bad("no brokers (--brokers host:port)")
	}
	if c.PendingMax < 1 {
		bad("pending max %d < 1", c.PendingMax)
	}
	if c.PendingTimeout < 0 {
		bad("pending timeout %v < 0", c.PendingTimeout)
	}
	if c.Grace < 0 {
		bad("grace %v < 0", c.Grace)
	}
	if c.MaxOpenCells < 1 {
		bad("max open cells %d < 1 (--max-open-cells)", c.MaxOpenCells)
	}
	if c.MaxStateBytes < 1 {
		bad("max state bytes %d < 1 (--max-state-bytes)", c.MaxStateBytes)
	}
	if c.CellIdle < 0 {
		bad("cell idle %v < 0 (--cell-idle)", c.CellIdle)
	}
	if c.DLQPayloadCap < 0 {
		bad("dlq payload cap %d < 0", c.DLQPayloadCap)
	}
	if c.Limits.Event < 1 || c.Limits.ArtifactContent < 1 || c.Limits.TaskInput < 1 {
		bad("limits must be positive: %+v", c.Limits)
	}
	if c.MinPairs < 1 {
		bad("min pairs %d < 1", c.MinPairs)
	}
	if c.BatchSize < 1 {
		bad("batch size %d < 1", c.BatchSize)
	}
	if c.OutcomeBatch < 1 {
		bad("outcome batch %d < 1", c.OutcomeBatch)
	}
	if c.HeartbeatInterval >= c.SessionTimeout {
		bad("heartbeat interval %v must be below session timeout %v", c.HeartbeatInterval, c.SessionTimeout)
	}
	if c.FetchWait <= 0 || c.FetchMaxBytes < 1 {
		bad("fetch wait %v and fetch max bytes %d must be positive", c.FetchWait, c.FetchMaxBytes)
	}
	if err := schemas.CheckRegistryURL(c.SchemaRegistry); err != nil {
		bad("%v (--schema-registry)", err)
	}
	return errors.Join(errs...)
}

// PairGroup is stage B's consumer group for stage A's group.
func PairGroup(group string) string { return group + "-pair" }

// Progress reports one committed position (Option WithProgress).
type Progress struct {
	// Group is the consumer group that committed.
	Group string
	// Topic and Partition name the committed partition; Offset is the next
	// offset to read.
	Topic     string
	Partition int
	Offset    int64
}

// Option adjusts a Processor (test seams).
type Option func(*options)

type options struct {
	log      zerolog.Logger
	logSet   bool
	progress func(Progress)
	reg      prometheus.Registerer
}

// WithLogger sets the logger. Default: logx.New("process").
func WithLogger(l zerolog.Logger) Option {
	return func(o *options) { o.log, o.logSet = l, true }
}

// WithProgress calls fn after every successful commit, from the committing
// goroutine (fn must be quick and safe for concurrent use).
func WithProgress(fn func(Progress)) Option { return func(o *options) { o.progress = fn } }

// WithRegisterer registers the Processor's metrics with r instead of a
// registry of its own (which Listen serves).
func WithRegisterer(r prometheus.Registerer) Option { return func(o *options) { o.reg = r } }
