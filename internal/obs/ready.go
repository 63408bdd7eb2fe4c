package obs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// CheckTimeout bounds one run of a readiness check (WithCheck): a check
// that has not answered within it fails with "no answer within 2s", so a
// /readyz request or a scrape waits at most about this long.
const CheckTimeout = 2 * time.Second

// DefaultCheckEvery is how long a readiness result is reused before the
// checks run again (see WithCheckEvery).
const DefaultCheckEvery = time.Second

// WithCheck adds a readiness check: /readyz answers 503 naming it (and
// ReadyMetric is 0) while probe returns an error, 200 again once it
// returns nil. Checks are what a service needs to do its work (its Kafka
// brokers, ClickHouse); /healthz ignores them (liveness). The checks run
// together, each bounded by CheckTimeout, when /readyz or /metrics asks and
// the last result is older than the WithCheckEvery period; concurrent
// askers share one run. No goroutine outlives a run.
func WithCheck(name string, probe func(context.Context) error) MuxOption {
	return func(o *muxOptions) { o.checks = append(o.checks, check{name, probe}) }
}

// WithCheckEvery sets how long a readiness result is reused (default
// DefaultCheckEvery): how stale /readyz may be.
func WithCheckEvery(d time.Duration) MuxOption {
	return func(o *muxOptions) { o.checkEvery = d }
}

type check struct {
	name  string
	probe func(context.Context) error
}

// readiness caches the result of a set of checks.
type readiness struct {
	checks  []check
	every   time.Duration
	timeout time.Duration

	mu      sync.Mutex
	at      time.Time     // when the last result was computed (zero: never)
	err     error         // the last result: nil, or every failing check joined
	running chan struct{} // non-nil while a run is under way; closed when it ends
}

func newReadiness(checks []check, every time.Duration) *readiness {
	if every <= 0 {
		every = DefaultCheckEvery
	}
	return &readiness{checks: checks, every: every, timeout: CheckTimeout}
}

// Err returns nil when every check passed at its last run, else an error
// with one "name: reason" line per failing check. It runs the checks when
// the last result is older than every (waiting at most about CheckTimeout).
func (r *readiness) Err() error {
	if r == nil || len(r.checks) == 0 {
		return nil
	}
	r.mu.Lock()
	if !r.at.IsZero() && time.Since(r.at) < r.every {
		err := r.err
		r.mu.Unlock()
		return err
	}
	done := r.running
	if done == nil {
		done = make(chan struct{})
		r.running = done
		go r.run(done)
	}
	r.mu.Unlock()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// run runs every check at once and records the result. A check that does
// not return within the timeout (one that ignores its context) is counted
// as failed and left to finish on its own.
func (r *readiness) run(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	type result struct {
		i   int
		err error
	}
	results := make(chan result, len(r.checks))
	for i, c := range r.checks {
		go func() {
			err := c.probe(ctx)
			if err == nil && ctx.Err() != nil {
				err = ctx.Err()
			}
			results <- result{i, err}
		}()
	}
	errs := make([]error, len(r.checks))
	answered := make([]bool, len(r.checks))
	timer := time.NewTimer(r.timeout + 250*time.Millisecond)
	defer timer.Stop()
collect:
	for n := 0; n < len(r.checks); n++ {
		select {
		case res := <-results:
			errs[res.i], answered[res.i] = res.err, true
		case <-timer.C:
			break collect
		}
	}
	var failed []error
	for i, c := range r.checks {
		err := errs[i]
		if !answered[i] || errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %s", r.timeout)
		}
		if err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", c.name, err))
		}
	}
	r.mu.Lock()
	r.at, r.err, r.running = time.Now(), errors.Join(failed...), nil
	r.mu.Unlock()
	close(done)
}
