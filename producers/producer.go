// Package producers is harnessflow's Go SDK for emitting events (docs/design.md §1):
// a Producer validates and encodes each event, queues it in a bounded buffer
// and writes batches to the event's topic (schemas.TopicFor), keyed by its
// partition key (cell_id; campaign_id for campaigns), with RequireAll acks and
// bounded retries.
//
//	p, err := producers.New(producers.Config{Brokers: []string{"127.0.0.1:9092"}, Project: "demo"})
//	...
//	err = p.Emit(ctx, &schemas.TaskAttempt{CellID: "c1", ...})
//	...
//	err = p.Close(ctx) // flushes: nothing Emit accepted is lost silently
package producers

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"
)

// writerLinger is the kafka-go Writer's own BatchTimeout. The Producer batches
// by itself and hands kafka-go whole batches in one WriteMessages call, so the
// writer must send what it is given at once: with kafka-go's 1 s default (or
// any real linger) every partial per-partition batch would wait that long.
const writerLinger = time.Microsecond

// inPlaceAttempts is kafka-go's per-batch attempt count: at most 8 (with its
// backoff of 50 ms doubling to 1 s, internal/kafkax, about 5 s of retries),
// fewer when Config.MaxElapsedTime is shorter than their backoff.
func inPlaceAttempts(maxElapsed time.Duration) int {
	n, wait, step := 1, time.Duration(0), 50*time.Millisecond
	for n < 8 && wait+step <= maxElapsed {
		wait += step
		step = min(2*step, time.Second)
		n++
	}
	return n
}

// Stats are a Producer's counters since New.
type Stats struct {
	// Emitted counts events accepted by Emit and EmitSync.
	Emitted uint64
	// Delivered counts events acknowledged by the brokers.
	Delivered uint64
	// Failed counts accepted events that were not delivered.
	Failed uint64
	// Retries counts event re-sends after transient errors.
	Retries uint64
	// Batches counts partition batches the brokers acknowledged.
	Batches uint64
	// Bytes counts encoded key and value bytes delivered.
	Bytes uint64
}

// Producer emits events to Kafka. Emit, EmitSync, Flush, Close and Stats are
// safe for concurrent use. A Producer owns one goroutine, started by New and
// ended by Close (Close must be called), plus kafka-go's asynchronous writer:
// batches are handed to it in order, so events of one partition key keep
// their Emit order unless a retry intervenes; up to BufferSize events may be
// in flight while BufferSize more wait in the buffer.
type Producer struct {
	cfg      Config
	log      zerolog.Logger
	now      func() time.Time
	registry *schemas.Registry // nil: single-object encoding
	internal bool              // WithInternalTypes
	w        *kafka.Writer
	ch       chan item
	pool     sync.Pool // *[]byte

	// ready wakes the run goroutine while it waits to complete a batch:
	// Emit signals it only once the buffer holds what the batch lacks
	// (needN events or needBytes bytes, published by the run goroutine
	// before it waits; math.MaxInt64 while it does not), Flush and Close
	// always, so that a fast emitter does not wake it for every event. The
	// run goroutine otherwise waits for the batch timer.
	ready     chan struct{}
	needN     atomic.Int64
	needBytes atomic.Int64

	// emitMu guards sending on ch against Close closing it: senders hold it
	// for reading, Close once for writing. It is the only mutex held while
	// another is taken (failMu is taken under neither).
	emitMu   sync.RWMutex
	closed   atomic.Bool
	stopping chan struct{} // closed by Close: blocked Emits give up

	runCtx    context.Context
	cancelRun context.CancelFunc
	done      chan struct{} // closed when the run goroutine ends

	closeOnce  sync.Once
	writerOnce sync.Once

	failMu   sync.Mutex
	failN    int
	firstErr error

	emitted, delivered, failed, retries, batches, bytes atomic.Uint64

	// outstanding counts events from the buffer submitted and not yet
	// resolved; resolvedSig wakes the run goroutine when a flight resolves.
	outstanding    atomic.Int64
	maxOutstanding int
	resolvedSig    chan struct{}

	flightsMu sync.Mutex // taken under no other lock
	flights   map[*flight]struct{}
}

// New validates cfg and starts the producer's goroutine. It does not contact the
// brokers: the first batch does (create topics beforehand with
// kafkax.EnsureAllTopics).
func New(cfg Config, opts ...Option) (*Producer, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("producer config: %w", err)
	}
	o := options{log: zerolog.Nop(), now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	p := &Producer{
		cfg:            cfg,
		log:            o.log,
		now:            o.now,
		registry:       o.registry,
		internal:       o.internal,
		ch:             make(chan item, cfg.BufferSize),
		ready:          make(chan struct{}, 1),
		stopping:       make(chan struct{}),
		done:           make(chan struct{}),
		maxOutstanding: cfg.BufferSize,
		resolvedSig:    make(chan struct{}, 1),
		flights:        map[*flight]struct{}{},
	}
	p.pool.New = func() any { b := make([]byte, 0, 512); return &b }
	p.w = kafkax.NewWriter(kafkax.WriterConfig{
		Brokers:      cfg.Brokers,
		BatchSize:    cfg.BatchSize,
		BatchBytes:   cfg.BatchBytes + batchOverhead,
		BatchTimeout: writerLinger,
		WriteTimeout: cfg.WriteTimeout,
		// kafka-go retries a failed partition batch in place, before the
		// partition's next batch: that keeps a partition's events in emit
		// order through transient errors (a leader change, a request
		// timeout, a broker restart of a few seconds). What still fails
		// comes back to complete, which retries until MaxElapsedTime.
		MaxAttempts: inPlaceAttempts(cfg.MaxElapsedTime),
		Async:       true,
		Completion:  p.complete,
	})
	p.needN.Store(math.MaxInt64)
	p.needBytes.Store(math.MaxInt64)
	p.runCtx, p.cancelRun = context.WithCancel(context.Background())
	go p.run()
	return p, nil
}

// Emit validates ev, fills its envelope where empty (project and source from
// Config, event_time now, event_id by schemas.DeriveEventID: ev is modified),
// encodes it and queues it for delivery. It returns an *InvalidEventError for
// an invalid event (one wrapping ErrInternalType for a type not in
// ProducerTypes, unless WithInternalTypes), ErrBufferFull when the buffer is full under FailFast,
// ctx's error when ctx ends while blocked under Block, ErrClosed after
// Close, and an error wrapping ErrSchemaRegistry when the schema registry of
// WithSchemaRegistry gives no schema id. A nil return means the event is
// queued: it is then delivered, or reported to Config.OnError and counted in
// the next Flush or Close error. ev must not be modified after Emit returns.
func (p *Producer) Emit(ctx context.Context, ev schemas.Event) error {
	if p.closed.Load() {
		return ErrClosed
	}
	it, err := p.prepare(ctx, ev)
	if err != nil {
		return err
	}
	p.emitMu.RLock()
	defer p.emitMu.RUnlock()
	if p.closed.Load() {
		p.release(it.buf)
		return ErrClosed
	}
	if p.cfg.Backpressure == FailFast {
		select {
		case p.ch <- it:
		default:
			p.release(it.buf)
			return ErrBufferFull
		}
	} else {
		// Room in the buffer (the common case): a plain non-blocking send,
		// cheaper than the three-way select below.
		select {
		case p.ch <- it:
		default:
			select {
			case p.ch <- it:
			case <-ctx.Done():
				p.release(it.buf)
				return ctx.Err()
			case <-p.stopping:
				p.release(it.buf)
				return ErrClosed
			}
		}
	}
	p.emitted.Add(1)
	if n := int64(len(p.ch)); n >= p.needN.Load() || n*it.size() >= p.needBytes.Load() {
		p.wake()
	}
	return nil
}

// wake signals the run goroutine that the buffer holds what its batch lacks, a
// flush marker or was closed. It never blocks; a signal already pending is
// enough.
func (p *Producer) wake() {
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

// EmitSync validates and fills every event like Emit, then writes them at
// once, retried like Emit's batches, and returns only when every event is
// acknowledged (nil) or not (*DeliveryError, or ctx's error: the events may
// then still be delivered). If any event is invalid, it returns that event's
// *InvalidEventError (Index set) and produces nothing. It bypasses the
// buffer: it is not ordered with Emit's events, and its failures are
// returned, not passed to OnError.
func (p *Producer) EmitSync(ctx context.Context, evs ...schemas.Event) error {
	if p.closed.Load() {
		return ErrClosed
	}
	items := make([]item, 0, len(evs))
	for i, ev := range evs {
		it, err := p.prepare(ctx, ev)
		if err != nil {
			for _, it := range items {
				p.release(it.buf)
			}
			var ie *InvalidEventError
			if errors.As(err, &ie) {
				ie.Index = i
			}
			return err
		}
		items = append(items, it)
	}
	if len(items) == 0 {
		return nil
	}
	p.emitted.Add(uint64(len(items)))
	f := p.newFlight(items, true)
	p.submit(f, nil)
	select {
	case <-f.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if n := f.failN.Load(); n > 0 {
		f.mu.Lock()
		defer f.mu.Unlock()
		return &DeliveryError{Failed: int(n), First: f.firstErr}
	}
	return nil
}

// Flush returns when every event Emit accepted before the call has been
// acknowledged or reported failed. It returns a *DeliveryError counting the
// failures since the previous Flush or Close (whichever caller flushes first
// gets them), ctx's error if ctx ends first, or ErrClosed after Close.
func (p *Producer) Flush(ctx context.Context) error {
	reply := make(chan struct{}, 1)
	if err := p.send(ctx, item{flush: reply}); err != nil {
		return err
	}
	select {
	case <-reply:
		// The caller takes the failures, not the run loop: a Flush that
		// gave up on ctx leaves them for the next Flush or Close.
		return p.takeFailures()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// send queues a flush marker, blocking whatever the Backpressure.
func (p *Producer) send(ctx context.Context, it item) error {
	p.emitMu.RLock()
	defer p.emitMu.RUnlock()
	if p.closed.Load() {
		return ErrClosed
	}
	select {
	case p.ch <- it:
		p.wake()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.stopping:
		return ErrClosed
	}
}

// Close stops accepting events, delivers every queued one, closes the writer and
// returns the failures since the last Flush as a *DeliveryError. If ctx ends
// first, delivery is abandoned: the events still queued are reported to OnError
// as failed with ErrClosed and counted in the returned error, and Close
// returns without waiting for the writer (which goes on with what it holds
// in the background). Close is idempotent; later calls return nil once the
// first has finished.
func (p *Producer) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		close(p.stopping)
		p.emitMu.Lock()
		close(p.ch)
		p.emitMu.Unlock()
		p.wake()
	})
	var ctxErr error
	select {
	case <-p.done:
	case <-ctx.Done():
		ctxErr = ctx.Err()
		p.cancelRun()
		<-p.done
	}
	p.cancelRun()
	errs := []error{ctxErr}
	// kafka-go's Close writes the batches it still holds, each with its
	// attempts in place (up to WriteTimeout each): with brokers that do not
	// answer, minutes. Close waits for it only as long as ctx allows; past
	// that the writer finishes in the background (the events of those
	// batches were already reported failed when ctx ended; any it still
	// gets written are duplicates that their event ids deduplicate).
	p.writerOnce.Do(func() {
		wdone := make(chan error, 1)
		go func() { wdone <- p.w.Close() }()
		select {
		case err := <-wdone:
			if err != nil {
				errs = append(errs, fmt.Errorf("close writer: %w", err))
			}
		case <-ctx.Done():
			if ctxErr == nil {
				errs = append(errs, fmt.Errorf("close writer: %w (it goes on writing the batches it holds in the background)", ctx.Err()))
			}
		}
	})
	if err := p.takeFailures(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Stats returns the producer's counters.
func (p *Producer) Stats() Stats {
	return Stats{
		Emitted:   p.emitted.Load(),
		Delivered: p.delivered.Load(),
		Failed:    p.failed.Load(),
		Retries:   p.retries.Load(),
		Batches:   p.batches.Load(),
		Bytes:     p.bytes.Load(),
	}
}
