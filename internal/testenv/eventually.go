package testenv

import (
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
