// Package retry is harnessflow's one retry policy: exponential backoff with
// jitter (cenkalti/backoff/v4, randomization ±50 %), capped per wait and
// optionally in total. Do retries one operation; Restarts paces the restarts
// of a long-running loop and forgets its past faults once a run has been
// healthy, so that after days of health the next fault is retried at once.
package retry

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Policy shapes the waits between tries: the first about Initial, each
// next one about 1.5 × longer, none over Max, and no try started once
// MaxElapsed has passed since the first (0: no limit). Every wait is
// jittered by ±50 % so that many clients do not retry in step.
type Policy struct {
	Initial    time.Duration
	Max        time.Duration
	MaxElapsed time.Duration
}

// NewBackOff returns a fresh backoff of the policy, for a caller that keeps
// its own state between tries (a delivery in flight). NextBackOff returns
// backoff.Stop once MaxElapsed has passed.
func (p Policy) NewBackOff() backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	if p.Initial > 0 {
		b.InitialInterval = p.Initial
	}
	if p.Max > 0 {
		b.MaxInterval = p.Max
	}
	b.MaxElapsedTime = p.MaxElapsed
	b.Reset()
	return capped{b}
}

// capped keeps the jittered waits of an ExponentialBackOff within its
// MaxInterval (the library jitters around the capped interval, up to
// 1.5 × the cap).
type capped struct{ *backoff.ExponentialBackOff }

func (c capped) NextBackOff() time.Duration {
	d := c.ExponentialBackOff.NextBackOff()
	if d != backoff.Stop && d > c.MaxInterval {
		d = c.MaxInterval
	}
	return d
}

// Permanent marks an error Do does not retry; Do returns err itself.
func Permanent(err error) error { return backoff.Permanent(err) }

// Do runs op until it returns nil or a Permanent error, ctx ends (then it
// returns ctx's error), or MaxElapsed has passed (then op's last error).
// notify, when not nil, is called with each failure and the wait after it.
func Do(ctx context.Context, p Policy, op func() error, notify func(err error, wait time.Duration)) error {
	return backoff.RetryNotify(op, backoff.WithContext(p.NewBackOff(), ctx), notify)
}

// Restarts paces the restarts of a long-running loop (a consumer started
// again after a Kafka error, a partition's work rebuilt). Each Next is the
// policy's next wait; a run that stayed up for Healthy before it failed
// starts the waits over from Initial. Not safe for concurrent use.
type Restarts struct {
	// Healthy is how long a run must last to count as a recovery.
	// Default (0): one minute.
	Healthy time.Duration

	bo      backoff.BackOff
	resumed time.Time
	now     func() time.Time
}

// NewRestarts returns the restarts of a loop whose first run starts now.
// MaxElapsed is ignored: a loop restarts for as long as it runs.
func NewRestarts(p Policy) *Restarts {
	p.MaxElapsed = 0
	return &Restarts{bo: p.NewBackOff(), now: time.Now, resumed: time.Now()}
}

// Next returns the wait before the next run, after the current one failed.
func (r *Restarts) Next() time.Duration {
	healthy := r.Healthy
	if healthy <= 0 {
		healthy = time.Minute
	}
	now := r.now()
	if now.Sub(r.resumed) >= healthy {
		r.bo.Reset()
	}
	d := r.bo.NextBackOff()
	r.resumed = now.Add(d)
	return d
}

// Reset starts the waits over (a run made progress).
func (r *Restarts) Reset() {
	r.bo.Reset()
	r.resumed = r.now()
}

// Sleep waits d, or until ctx ends; it reports whether the whole wait
// passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
