package chsink

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// startFetcher starts the fetcher, which owns the reader's FetchMessage and
// hands each message to the loop on msgs. msgs buffers 256 messages beyond
// the reader's own queue, so a loop blocked in a retrying insert stops
// fetching soon after. The fetcher stops when ctx ends or a fetch fails;
// then it queues the error on fetchErr (not when ctx ended) and closes
// msgs. wait returns once it has stopped (call it after ending ctx, before
// closing r).
func (s *Sink) startFetcher(ctx context.Context, r *kafka.Reader) (msgs <-chan kafka.Message, fetchErr <-chan error, wait func()) {
	out := make(chan kafka.Message, 256)
	errc := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		for {
			m, err := r.FetchMessage(ctx)
			if err != nil {
				if ctx.Err() == nil {
					errc <- &kafkaError{fmt.Errorf("fetch: %w", err)}
				}
				return
			}
			select {
			case out <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, errc, func() { <-done }
}

// startWorkers starts the workers: the inserters take full buffers
// (Inserters in flight, one queued: decoding overlaps the inserts, and
// blocked inserts stop the loop, hence fetching), the recompute workers the
// inserted attempts' cells, one project at a time each (recompute.go). They
// outlive the run's context (the drain waits for them) and stop when the
// returned function is called, as the run ends.
func (s *Sink) startWorkers() (stop func()) {
	s.ins = make(chan *job, 1)
	s.doneNote = make(chan struct{}, 1)
	s.workErr = make(chan error, 1)
	wctx, stopWork := context.WithCancel(context.Background())
	var insWG, recWG sync.WaitGroup
	cs, _ := s.w.(CellScorer)
	// On a cluster the recomputed cells are verified (verify.go).
	cv, canVerify := s.w.(CellVerifier)
	s.verifying = canVerify && cs != nil && s.cfg.Cluster != ""
	var rq *recomputeQueue
	if cs != nil {
		rq = newRecomputeQueue(s.cfg.RecomputeEvery)
		s.rq.Store(rq)
	}
	for i := 0; i < max(1, s.cfg.Inserters); i++ {
		insWG.Add(1)
		go func() { defer insWG.Done(); s.inserter(wctx, rq) }()
	}
	if rq != nil {
		for i := 0; i < max(1, s.cfg.RecomputeWorkers); i++ {
			recWG.Add(1)
			go func() { defer recWG.Done(); s.recomputeWorker(wctx, cs, rq) }()
		}
	}
	if s.verifying {
		insWG.Add(1)
		go func() { defer insWG.Done(); s.verifier(wctx, cs, cv) }()
	}
	return func() {
		close(s.ins)
		stopWork()
		insWG.Wait()
		if rq != nil {
			rq.close()
			recWG.Wait()
			s.rq.Store(nil)
		}
	}
}

// consume is the sink's loop: it buffers the fetched messages, flushes the
// buffers that are due (after each burst of messages and on each tick) and
// commits what the workers finished. It returns nil when ctx ends, and the
// error of the fetcher, a worker, a flush or a commit otherwise.
func (s *Sink) consume(ctx context.Context, r *kafka.Reader, msgs <-chan kafka.Message, fetchErr <-chan error) error {
	tick := time.NewTicker(tickEvery(s.cfg.MaxAge, s.cfg.MinAge))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-fetchErr:
			return err
		case err := <-s.workErr:
			return err
		case <-s.doneNote:
			if err := s.commit(ctx, r); err != nil {
				return err
			}
		case m, ok := <-msgs:
			if !ok {
				return fetcherEnded(fetchErr)
			}
			closed, err := s.addBurst(ctx, m, msgs)
			if err != nil {
				return err
			}
			if err := s.flushDue(ctx, r, false, len(msgs) == 0); err != nil {
				return err
			}
			if closed {
				return fetcherEnded(fetchErr)
			}
		case <-tick.C:
			if err := s.flushDue(ctx, r, false, len(msgs) == 0); err != nil {
				return err
			}
		}
	}
}

// maxBurst bounds the messages the loop takes from the fetcher in one go.
const maxBurst = 512

// addBurst buffers m, then what the fetcher already has (up to maxBurst
// messages, and up to a full buffer), before the loop checks the flush
// conditions, rather than a full select and check per message. It reports
// whether the fetcher closed msgs meanwhile, and add's error (the schema
// registry could not be asked, or ctx ended while add waited for it).
func (s *Sink) addBurst(ctx context.Context, m kafka.Message, msgs <-chan kafka.Message) (closed bool, err error) {
	full, err := s.add(ctx, m)
	for n := 1; n < maxBurst && !full && err == nil; n++ {
		select {
		case m, ok := <-msgs:
			if !ok {
				return true, nil
			}
			full, err = s.add(ctx, m)
		default:
			return false, nil
		}
	}
	return false, err
}

// drain ends a run that was cancelled: it flushes everything buffered, waits
// for the workers to finish every batch in flight, and commits, bounded by
// DrainTimeout.
func (s *Sink) drain(r *kafka.Reader) error {
	dctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	if q := s.rq.Load(); q != nil {
		q.drain() // its passes run at once, not RecomputeEvery apart
	}
	if err := s.flushDue(dctx, r, true, false); err != nil {
		return fmt.Errorf("drain (uncommitted rows will be redelivered): %w", err)
	}
	for s.pruneAwaiting(); len(s.awaiting) > 0; s.pruneAwaiting() {
		select {
		case <-s.doneNote:
		case err := <-s.workErr:
			return fmt.Errorf("drain (uncommitted rows will be redelivered): %w", err)
		case <-dctx.Done():
			return fmt.Errorf("drain timed out after %s with %d batches in flight (uncommitted rows will be redelivered): %w",
				s.cfg.DrainTimeout, len(s.awaiting), dctx.Err())
		}
	}
	if err := s.commit(dctx, r); err != nil {
		return fmt.Errorf("drain (uncommitted rows will be redelivered): %w", err)
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

// tickEvery is the period at which the loop checks the buffers' ages: a
// quarter of the shorter of MaxAge and MinAge (MinAge when it is on).
func tickEvery(maxAge, minAge time.Duration) time.Duration {
	if minAge > 0 && minAge < maxAge {
		maxAge = minAge
	}
	d := maxAge / 4
	if d < 5*time.Millisecond {
		d = 5 * time.Millisecond
	}
	return d
}
