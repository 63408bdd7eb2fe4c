package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRestartsForgetPastFaultsAfterAHealthyRun: a loop that failed in a
// row waits up to Max; after a run that stayed up for Healthy, its next
// fault is retried after about Initial again, not after the longest wait
// (chsink's and the processors' loops never reset theirs).
func TestRestartsForgetPastFaultsAfterAHealthyRun(t *testing.T) {
	t.Parallel()
	clock := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	r := NewRestarts(Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second})
	r.now = func() time.Time { return clock }
	r.resumed = clock
	var d time.Duration
	for i := 0; i < 30; i++ { // failing at once, each run after its wait
		d = r.Next()
		clock = clock.Add(d)
	}
	if d < 2500*time.Millisecond || d > 5*time.Second {
		t.Fatalf("after 30 faults in a row the wait is %s, want about the cap of 5s", d)
	}
	clock = clock.Add(72 * time.Hour) // days of health
	if d := r.Next(); d > 150*time.Millisecond {
		t.Fatalf("the first fault after a healthy run waits %s, want about Initial (100ms ±50%%)", d)
	}
	// A run shorter than Healthy is no recovery: the waits keep growing.
	clock = clock.Add(r.Next() + time.Second)
	if d2 := r.Next(); d2 < 100*time.Millisecond {
		t.Fatalf("a fault after a 1s run waits %s, want the waits to keep growing", d2)
	}
}

// TestDoStopsOnPermanentAndContext: Do returns the error a Permanent
// wraps without retrying, ctx's error when ctx ends, and nil once op
// succeeds.
func TestDoStopsOnPermanentAndContext(t *testing.T) {
	t.Parallel()
	p := Policy{Initial: time.Millisecond, Max: 2 * time.Millisecond}
	bad := errors.New("bad")
	tries := 0
	if err := Do(context.Background(), p, func() error { tries++; return Permanent(bad) }, nil); !errors.Is(err, bad) || tries != 1 {
		t.Fatalf("permanent: %v after %d tries", err, tries)
	}
	tries = 0
	notified := 0
	if err := Do(context.Background(), p, func() error {
		tries++
		if tries < 4 {
			return errors.New("transient")
		}
		return nil
	}, func(error, time.Duration) { notified++ }); err != nil || tries != 4 || notified != 3 {
		t.Fatalf("transient: %v after %d tries, %d notifications", err, tries, notified)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Do(ctx, p, func() error { return errors.New("down") }, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	if err := Do(context.Background(), Policy{Initial: time.Millisecond, MaxElapsed: 20 * time.Millisecond},
		func() error { return bad }, nil); !errors.Is(err, bad) {
		t.Fatalf("past MaxElapsed: %v, want op's last error", err)
	}
}
