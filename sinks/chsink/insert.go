package chsink

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/schemas"
)

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
	if recompute && t == tAttempts {
		j.cells = attemptCells(j.rows)
		if s.verifying {
			j.checks = attemptChecks(j.rows)
		}
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
		var ee *encodeError
		if err != nil && (!chx.Retryable(err) || errors.As(err, &ee)) {
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
		seen := map[chddl.CellKey]struct{}{}
		var list []chddl.CellKey
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
			s.expectVerify(j.checks) // before the offsets can be committed
			s.markDone(j)
		}
	}
}

// attemptCells returns the distinct cells, (project, cell id), of
// task_attempts rows.
func attemptCells(rows []row) []chddl.CellKey {
	seen := map[chddl.CellKey]struct{}{}
	var out []chddl.CellKey
	for _, r := range rows {
		if a, ok := r.ev.(*schemas.TaskAttempt); ok {
			k := chddl.CellKey{Project: a.Project, CellID: a.CellID}
			if _, dup := seen[k]; !dup {
				seen[k] = struct{}{}
				out = append(out, k)
			}
		}
	}
	return out
}
