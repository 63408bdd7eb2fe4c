package producers

import (
	"math"
	"time"
)

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
