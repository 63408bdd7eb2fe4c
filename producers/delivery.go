package producers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/harnessflow/harnessflow/internal/retry"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/segmentio/kafka-go"
)

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
	bo       backoff.BackOff
	firstErr error
}

// ref is what a kafka-go Message carries (WriterData) back to Completion.
type ref struct {
	f        *flight
	i        int
	resolved atomic.Bool
}

// newFlight registers a flight of items (sync: from EmitSync) so that Close
// can abandon it.
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
	again := map[*flight][]*ref{}
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
			again[r.f] = append(again[r.f], r)
		}
	}
	for f, refs := range again {
		f.mu.Lock()
		if f.bo == nil {
			f.bo = retry.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second, MaxElapsed: p.cfg.MaxElapsedTime}.NewBackOff()
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
