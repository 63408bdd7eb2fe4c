// Package producers is harnessflow's Go SDK for emitting events (DESIGN.md §1):
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

	"github.com/cenkalti/backoff/v4"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/schemas"
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

// Option is a test seam or an optional collaborator of New.
type Option func(*options)

type options struct {
	log zerolog.Logger
	now func() time.Time
}

// WithLogger sets the logger. Default: a disabled logger.
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.log = l } }

// WithClock sets the clock that fills missing event times. Default: time.Now.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

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

// item is one encoded event in the buffer, or a flush marker.
type item struct {
	ev     schemas.Event
	buf    *[]byte // key then value
	keyLen int
	topic  string
	// at is the Kafka message timestamp: when Emit accepted the event, kept
	// across retries (see submit).
	at    time.Time
	flush chan struct{} // non-nil: a Flush marker, nothing else is set
}

func (it *item) size() int64 { return int64(len(*it.buf)) + batchOverhead }

// Producer emits events to Kafka. Emit, EmitSync, Flush, Close and Stats are
// safe for concurrent use. A Producer owns one goroutine, started by New and
// ended by Close (Close must be called), plus kafka-go's asynchronous writer:
// batches are handed to it in order, so events of one partition key keep
// their Emit order unless a retry intervenes; up to BufferSize events may be
// in flight while BufferSize more wait in the buffer.
type Producer struct {
	cfg  Config
	log  zerolog.Logger
	now  func() time.Time
	w    *kafka.Writer
	ch   chan item
	pool sync.Pool // *[]byte

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
// an invalid event, ErrBufferFull when the buffer is full under FailFast,
// ctx's error when ctx ends while blocked under Block, and ErrClosed after
// Close. A nil return means the event is queued: it is then delivered, or
// reported to Config.OnError and counted in the next Flush or Close error.
// ev must not be modified after Emit returns.
func (p *Producer) Emit(ctx context.Context, ev schemas.Event) error {
	if p.closed.Load() {
		return ErrClosed
	}
	it, err := p.prepare(ev)
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
		it, err := p.prepare(ev)
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

// keyField names the field an event type is keyed by.
func keyField(t schemas.Type) string {
	switch t {
	case schemas.TypeCampaignDeclared:
		return "campaign_id"
	case schemas.TypeRejected:
		return "source_topic"
	case schemas.TypeCheckpointPublished:
		return "model_version"
	}
	return "cell_id"
}

// prepare fills, validates and encodes ev into a pooled buffer.
func (p *Producer) prepare(ev schemas.Event) (item, error) {
	if ev == nil {
		return item{}, &InvalidEventError{Err: &schemas.FieldError{Code: schemas.CodeMissingField, Msg: "nil event"}}
	}
	t := ev.Type()
	h := ev.Header()
	if h.Project == "" {
		h.Project = p.cfg.Project
	}
	if h.Source == "" {
		h.Source = p.cfg.Source
	}
	if h.EventTime.IsZero() {
		h.EventTime = p.now().UTC().Truncate(time.Millisecond)
	}
	if h.EventID == "" {
		h.EventID = schemas.DeriveEventID(ev)
	}
	invalid := func(err error) (item, error) {
		return item{}, &InvalidEventError{Type: t, EventID: h.EventID, Err: err}
	}
	topic := schemas.TopicFor(t)
	if topic == "" {
		return invalid(&schemas.FieldError{Type: t, Field: "type", Code: schemas.CodeUnknownType, Msg: "no topic for this event type"})
	}
	key := ev.PartitionKey()
	if key == "" {
		f := keyField(t)
		return invalid(&schemas.FieldError{Type: t, Field: f, Code: schemas.CodeMissingField, Msg: f + " is required (it is the partition key)"})
	}
	if err := schemas.Validate(ev, p.cfg.Limits); err != nil {
		return invalid(err)
	}
	buf := p.pool.Get().(*[]byte)
	b := append((*buf)[:0], key...)
	b, err := schemas.AppendEncode(b, ev)
	if err != nil {
		p.pool.Put(buf)
		return invalid(err)
	}
	*buf = b
	if n := len(b) - len(key); n > p.cfg.Limits.Event {
		p.release(buf)
		return invalid(&schemas.FieldError{Type: t, Code: schemas.CodeTooLarge, Msg: fmt.Sprintf("encoded event is %d bytes, over the %d-byte limit", n, p.cfg.Limits.Event)})
	}
	if int64(len(b))+batchOverhead > p.cfg.BatchBytes {
		p.release(buf)
		return invalid(&schemas.FieldError{Type: t, Code: schemas.CodeTooLarge, Msg: fmt.Sprintf("encoded event is %d bytes, over the producer's %d-byte batch limit", len(b), p.cfg.BatchBytes)})
	}
	return item{ev: ev, buf: buf, keyLen: len(key), topic: topic, at: p.now()}, nil
}

// release returns a buffer to the pool; nil is ignored. Buffers that grew very
// large are dropped so that one huge event does not pin memory.
func (p *Producer) release(buf *[]byte) {
	if buf == nil || cap(*buf) > 64<<10 {
		return
	}
	p.pool.Put(buf)
}

// run is the producer's goroutine: it collects batches from the buffer and
// submits them, at most maxOutstanding events unacknowledged, until Close
// closes the buffer; then it waits for every submitted event to be resolved.
func (p *Producer) run() {
	defer close(p.done)
	batch := make([]item, 0, p.cfg.BatchSize)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		it, ok := <-p.ch
		if !ok {
			p.waitOutstanding(0)
			return
		}
		if it.flush != nil {
			p.waitOutstanding(0)
			it.flush <- struct{}{}
			continue
		}
		batch = append(batch[:0], it)
		size := it.size()
		var flush chan struct{}
		closed := false
		timer.Reset(p.cfg.BatchTimeout)
	collect:
		for len(batch) < p.cfg.BatchSize {
			// Take what is buffered; an empty buffer waits for the batch
			// timer or a wake (what the batch lacks is buffered, Flush,
			// Close), not for each event.
			select {
			case it, ok = <-p.ch:
			default:
				// Publish what the batch lacks, then look again: an Emit
				// either sees it or its event is seen here.
				p.needN.Store(int64(min(p.cfg.BatchSize-len(batch), cap(p.ch))))
				p.needBytes.Store(p.cfg.BatchBytes - size)
				got, expired := false, false
				select {
				case it, ok = <-p.ch:
					got = true
				default:
					select {
					case <-p.ready:
					case <-timer.C:
						expired = true
					}
				}
				p.needN.Store(math.MaxInt64)
				p.needBytes.Store(math.MaxInt64)
				if expired {
					break collect
				}
				if !got {
					continue // woken: take what is buffered now
				}
			}
			switch {
			case !ok:
				closed = true
				break collect
			case it.flush != nil:
				flush = it.flush
				break collect
			}
			batch = append(batch, it)
			if size += it.size(); size >= p.cfg.BatchBytes {
				break collect
			}
		}
		timer.Stop()
		p.waitOutstanding(p.maxOutstanding - len(batch))
		p.outstanding.Add(int64(len(batch)))
		p.submit(p.newFlight(append([]item(nil), batch...), false), nil)
		clear(batch)
		if flush != nil {
			p.waitOutstanding(0)
			flush <- struct{}{}
		}
		if closed {
			p.waitOutstanding(0)
			return
		}
	}
}

// waitOutstanding waits until at most n buffered events are unresolved, or
// the producer is abandoned by Close; then it fails what is left.
func (p *Producer) waitOutstanding(n int) {
	if n < 0 {
		n = 0
	}
	for p.outstanding.Load() > int64(n) {
		select {
		case <-p.resolvedSig:
		case <-p.runCtx.Done():
			p.abandonAll()
			return
		}
	}
}

// flight is one submitted batch (from the buffer, or one EmitSync call).
// Its events are resolved exactly once each: acknowledged or failed.
type flight struct {
	items     []item
	refs      []ref
	sync      bool // EmitSync: failures are kept here, not reported to OnError
	remaining atomic.Int64
	done      chan struct{}
	failN     atomic.Int64
	tainted   atomic.Bool // abandoned while kafka-go may hold its buffers

	mu       sync.Mutex // guards bo and firstErr
	bo       *backoff.ExponentialBackOff
	firstErr error
}

// ref is what a kafka-go Message carries (WriterData) back to Completion.
type ref struct {
	f        *flight
	i        int
	resolved atomic.Bool
}

func (p *Producer) newFlight(items []item, sync bool) *flight {
	f := &flight{items: items, refs: make([]ref, len(items)), sync: sync, done: make(chan struct{})}
	f.remaining.Store(int64(len(items)))
	for i := range f.refs {
		f.refs[i] = ref{f: f, i: i}
	}
	p.flightsMu.Lock()
	p.flights[f] = struct{}{}
	p.flightsMu.Unlock()
	return f
}

// submit hands the flight's events (all of them, or the refs given) to the
// asynchronous kafka-go writer; kafka-go queues them per partition in order
// and calls complete for each partition batch.
func (p *Producer) submit(f *flight, refs []*ref) {
	if refs == nil {
		refs = make([]*ref, len(f.refs))
		for i := range f.refs {
			refs[i] = &f.refs[i]
		}
	}
	msgs := make([]kafka.Message, len(refs))
	for j, r := range refs {
		it := &f.items[r.i]
		b := *it.buf
		// The timestamp is the emit time (Kafka's CreateTime), not the time
		// kafka-go encodes the request: kafka-go stamps each partition batch
		// when it sends it, so a cell's cell_started could carry a later
		// timestamp than attempts emitted after it, and a retry would restamp
		// its events. The processors merge a cell's topics by timestamp
		// (processors/doc.go).
		msgs[j] = kafka.Message{Topic: it.topic, Key: b[:it.keyLen:it.keyLen], Value: b[it.keyLen:], Time: it.at, WriterData: r}
	}
	if err := p.runCtx.Err(); err != nil {
		p.complete(msgs, err) // abandoned by Close
		return
	}
	ctx, cancel := context.WithTimeout(p.runCtx, p.cfg.WriteTimeout)
	err := p.w.WriteMessages(ctx, msgs...)
	cancel()
	if err != nil {
		// Nothing was queued (topic metadata unavailable, writer closed).
		p.complete(msgs, err)
	}
}

// complete is the kafka-go Completion callback (and submit's error path):
// it resolves acknowledged events and schedules the transient failures for
// a retry with the flight's backoff.
func (p *Producer) complete(msgs []kafka.Message, err error) {
	if err == nil {
		p.batches.Add(1)
		p.resolveAcked(msgs)
		return
	}
	retry := map[*flight][]*ref{}
	for i := range msgs {
		r := msgs[i].WriterData.(*ref)
		if r.resolved.Load() {
			continue
		}
		switch {
		case p.runCtx.Err() != nil:
			p.resolve(r, p.abandoned(p.runCtx, err))
		case !retryable(err):
			p.resolve(r, fmt.Errorf("produce to %s: %w", r.f.items[r.i].topic, err))
		default:
			retry[r.f] = append(retry[r.f], r)
		}
	}
	for f, refs := range retry {
		f.mu.Lock()
		if f.bo == nil {
			f.bo = backoff.NewExponentialBackOff()
			f.bo.InitialInterval = 100 * time.Millisecond
			f.bo.MaxInterval = 5 * time.Second
			f.bo.MaxElapsedTime = p.cfg.MaxElapsedTime
			f.bo.Reset()
		}
		d := f.bo.NextBackOff()
		f.mu.Unlock()
		if d == backoff.Stop {
			for _, r := range refs {
				p.resolve(r, fmt.Errorf("gave up after %s of retries: %w", p.cfg.MaxElapsedTime, err))
			}
			continue
		}
		p.retries.Add(uint64(len(refs)))
		p.log.Warn().Err(err).Int("events", len(refs)).Dur("backoff", d).Msg("produce failed, retrying")
		time.AfterFunc(d, func() {
			if p.runCtx.Err() != nil {
				for _, r := range refs {
					p.resolve(r, p.abandoned(p.runCtx, err))
				}
				return
			}
			p.submit(f, refs)
		})
	}
}

// resolve settles one event once: acknowledged (err nil) or failed.
func (p *Producer) resolve(r *ref, err error) {
	if !r.resolved.CompareAndSwap(false, true) {
		return
	}
	f := r.f
	it := &f.items[r.i]
	if err == nil {
		p.delivered.Add(1)
		p.bytes.Add(uint64(len(*it.buf)))
	} else {
		if f.failN.Add(1) == 1 {
			f.mu.Lock()
			f.firstErr = err
			f.mu.Unlock()
		}
		if !f.sync {
			p.fail(it.ev, err)
		}
	}
	p.settle(f, 1)
}

// resolveAcked settles the acknowledged messages of one partition batch like
// resolve(r, nil) each, with the counters updated once per run of messages
// of the same flight rather than once per message.
func (p *Producer) resolveAcked(msgs []kafka.Message) {
	var cur *flight
	var n int64
	var bytes uint64
	flushRun := func() {
		if n == 0 {
			return
		}
		// Counted before the flight can end: Flush and Close see them.
		p.delivered.Add(uint64(n))
		p.bytes.Add(bytes)
		p.settle(cur, n)
		n, bytes = 0, 0
	}
	for i := range msgs {
		r := msgs[i].WriterData.(*ref)
		if !r.resolved.CompareAndSwap(false, true) {
			continue
		}
		if r.f != cur {
			flushRun()
			cur = r.f
		}
		n++
		bytes += uint64(len(*r.f.items[r.i].buf))
	}
	flushRun()
}

// settle counts n events of f resolved; the last one ends the flight.
func (p *Producer) settle(f *flight, n int64) {
	if f.remaining.Add(-n) == 0 {
		// kafka-go is done with every message of the flight (Completion is
		// called after the write): the buffers can be reused.
		if !f.tainted.Load() {
			for i := range f.items {
				p.release(f.items[i].buf)
			}
		}
		p.flightsMu.Lock()
		delete(p.flights, f)
		p.flightsMu.Unlock()
		close(f.done)
		if !f.sync {
			p.outstanding.Add(-int64(len(f.items)))
			select {
			case p.resolvedSig <- struct{}{}:
			default:
			}
		}
	}
}

// abandonAll fails every unresolved event (Close's context ended). Buffers of
// events kafka-go may still hold are not reused.
func (p *Producer) abandonAll() {
	p.flightsMu.Lock()
	var fs []*flight
	for f := range p.flights {
		fs = append(fs, f)
	}
	p.flightsMu.Unlock()
	for _, f := range fs {
		for i := range f.refs {
			r := &f.refs[i]
			if !r.resolved.Load() {
				f.tainted.Store(true) // kafka-go may still read its buffers
				p.resolve(r, p.abandoned(p.runCtx, errors.New("still queued")))
			}
		}
	}
}

// abandoned is the error of an event given up because ctx ended: ErrClosed
// when Close's deadline cancelled the producer, ctx's error otherwise.
func (p *Producer) abandoned(ctx context.Context, last error) error {
	cause := ctx.Err()
	if ctx == p.runCtx {
		cause = ErrClosed
	}
	return fmt.Errorf("%w before delivery (last error: %v)", cause, last)
}

// fail records one undelivered event of the buffer.
func (p *Producer) fail(ev schemas.Event, err error) {
	p.failed.Add(1)
	p.failMu.Lock()
	if p.failN == 0 {
		p.firstErr = err
	}
	p.failN++
	p.failMu.Unlock()
	if p.cfg.OnError != nil {
		p.cfg.OnError(ev, err)
	}
}

// takeFailures returns the failures recorded since the last call, or nil.
func (p *Producer) takeFailures() error {
	p.failMu.Lock()
	defer p.failMu.Unlock()
	if p.failN == 0 {
		return nil
	}
	err := &DeliveryError{Failed: p.failN, First: p.firstErr}
	p.failN, p.firstErr = 0, nil
	return err
}

// retryable classifies a produce error: Kafka errors say whether they are
// temporary; a message too large or a cancelled call is permanent; anything
// else (network errors, timeouts, a broker going away) is transient.
func retryable(err error) bool {
	var ke kafka.Error
	if errors.As(err, &ke) {
		return ke.Temporary()
	}
	var mtl kafka.MessageTooLargeError
	if errors.As(err, &mtl) {
		return false
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	return true
}
