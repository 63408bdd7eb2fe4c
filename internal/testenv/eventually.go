package testenv

import (
	"context"
	"testing"
	"time"
)

// Eventually checks cond every 10 ms until it holds, and fails the test with
// what (and how long it waited) when it does not within timeout. It is how a
// test waits for a condition instead of sleeping a fixed time.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			if !cond() {
				t.Fatalf("not within %s: %s", timeout, what)
			}
			return
		case <-tick.C:
		}
	}
}

// WhileProgressing waits for a condition on work that advances at its own
// pace, the machine's load deciding how fast: poll (every 100 ms) returns
// whether it is done and a description of the work's state (counts,
// lags). The wait gives up only when the state has not changed for stall,
// or when max has passed in all, and then fails the test with what it
// waited for and the last state, so a slow machine gets the time its work
// takes and a stuck pipeline still fails quickly.
func WhileProgressing(t testing.TB, stall, max time.Duration, what string, poll func() (done bool, state string)) {
	t.Helper()
	start := time.Now()
	done, state := poll()
	changed := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !done {
		<-tick.C
		var now string
		done, now = poll()
		if now != state {
			state, changed = now, time.Now()
		}
		if done {
			break
		}
		if time.Since(changed) > stall {
			t.Fatalf("waited %s for %s: no progress for %s; last state: %s", time.Since(start).Round(time.Millisecond), what, stall, state)
		}
		if time.Since(start) > max {
			t.Fatalf("waited %s (the most allowed) for %s; last state: %s", max, what, state)
		}
	}
}

// Context returns a context that ends a minute before the test binary's
// deadline (go test -timeout; never without one), and its cancel. A test's
// whole run then gets what the suite allows on a loaded machine, not a
// fixed budget measured on an idle one, and still ends with its own message
// before the binary's panic; the waits inside it are on conditions
// (WhileProgressing, Eventually).
func Context(t testing.TB) (context.Context, context.CancelFunc) {
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if at, ok := d.Deadline(); ok {
			return context.WithDeadline(context.Background(), at.Add(-time.Minute))
		}
	}
	return context.WithCancel(context.Background())
}

// WaitFor polls cond (every 20 ms, backing off to 250 ms) until it holds, and
// fails the test when it does not within d, with what it waited for and the
// last state cond described (counts, errors), so that a failure says where
// the work stood.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() (ok bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	delay := 20 * time.Millisecond
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s (last: %s)", d, what, state)
		}
		time.Sleep(delay) // polling interval, not a wait for an outcome
		delay = min(2*delay, 250*time.Millisecond)
	}
}
