package chsink

import (
	"context"
	"errors"
	"time"

	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/retry"
)

// inserter inserts jobs (Config.Inserters of them run at once), retrying
// with bounded backoff (every attempt builds a fresh batch from the job's
// rows), then marks them done or, for task_attempts when rq is not nil,
// queues their parts for recomputation (recompute.go). After any worker's
// failure the workers only drain jobs; the first error is reported.
func (s *Sink) inserter(ctx context.Context, rq *recomputeQueue) {
	for j := range s.ins {
		s.insert(ctx, j, rq)
		s.inflight.Add(-1)
	}
}

// insert inserts one job and marks it done or queues its parts for
// recomputation.
func (s *Sink) insert(ctx context.Context, j *job, rq *recomputeQueue) {
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
	if err != nil && rowFault(err) && ctx.Err() == nil {
		// A permanent error that may be a row's: insert the others, and
		// dead-letter the rows ClickHouse refuses, instead of stopping
		// on this batch at every start.
		refused, inserts, ierr := s.isolate(ctx, t, j.rows, err)
		attempts += inserts
		if ierr == nil {
			ierr = s.deadLetterRefused(ctx, t, refused)
		}
		err = ierr
		n -= len(refused)
	}
	if err != nil {
		s.fail(&InsertError{Table: t.name, Rows: n, Attempts: attempts, Err: err})
		return
	}
	s.m.rows.WithLabelValues(t.name).Add(float64(n))
	s.addStats(func(st *Stats) { st.Rows += int64(n); st.Inserts++ })
	s.log.Debug().Str("table", t.name).Int("rows", n).Int("bytes", j.bytes).Int("attempts", attempts).
		Dur("took", time.Since(start)).Msg("inserted")
	if rq == nil || (t != tAttempts && t != tRejected) {
		j.rows = nil // let the events be freed
		s.markDone(j)
		return
	}
	// The parts are set before inserted: commit reads them once it sees
	// inserted (recompute.go). Dead letters of attempts refused as late
	// recompute their cells too (refusedAttempts), verified on a cluster
	// until their dead letters are read (the refused attempt itself may
	// reach task_attempts after its dead letter: not waited for).
	if t == tAttempts {
		j.parts = attemptParts(j, j.rows, s.verifying)
	} else {
		refused := refusedAttempts(j.rows)
		j.parts = attemptParts(j, refused, false)
		if s.verifying {
			addRefusedChecks(j.parts, refused)
		}
	}
	j.left.Store(int32(len(j.parts)))
	j.inserted.Store(true)
	j.rows = nil
	if len(j.parts) == 0 {
		s.markDone(j)
		return
	}
	if !s.enqueueParts(ctx, rq, j) {
		s.fail(&InsertError{Table: "cell_scores", Rows: len(j.parts), Err: ctx.Err()})
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
	policy := retry.Policy{Initial: 100 * time.Millisecond, Max: s.cfg.RetryMaxInterval, MaxElapsed: s.cfg.RetryMaxElapsed}
	err := retry.Do(ctx, policy, func() error {
		attempts++
		ictx, cancel := context.WithTimeout(ctx, s.cfg.InsertTimeout)
		defer cancel()
		err := op(ictx)
		if err != nil && ctx.Err() != nil {
			return retry.Permanent(err)
		}
		var ee *encodeError
		if err != nil && (!chx.Retryable(err) || errors.As(err, &ee)) {
			return retry.Permanent(err)
		}
		return err
	}, func(err error, wait time.Duration) {
		s.m.retries.WithLabelValues(tableName).Inc()
		s.addStats(func(st *Stats) { st.Retries++ })
		s.log.Warn().Err(err).Str("table", tableName).Int("rows", n).Int("attempt", attempts).Dur("retry_in", wait).
			Msg(what + " failed; fetching paused, retrying")
	})
	return attempts, err
}
