package chsink

import (
	"testing"
	"time"
)

// TestInflightJobsSignalsIdle: Idle is closed at once with no job in
// flight, stays open while one is, and is closed when the last one ends or
// the count is reset; a recompute worker waits on it instead of polling.
func TestInflightJobsSignalsIdle(t *testing.T) {
	var f inflightJobs
	closed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		case <-time.After(10 * time.Millisecond):
			return false
		}
	}
	if !closed(f.Idle()) {
		t.Fatal("zero value: Idle not closed")
	}
	f.Add(1)
	f.Add(1)
	idle := f.Idle()
	if closed(idle) || f.Load() != 2 {
		t.Fatalf("two in flight: idle closed %v, count %d", closed(idle), f.Load())
	}
	f.Add(-1)
	if closed(idle) {
		t.Fatal("one still in flight: Idle closed")
	}
	f.Add(-1)
	if !closed(idle) || !closed(f.Idle()) {
		t.Fatal("none in flight: Idle not closed")
	}
	f.Add(1)
	idle = f.Idle()
	f.Reset()
	if !closed(idle) || f.Load() != 0 {
		t.Fatalf("after Reset: idle closed %v, count %d", closed(idle), f.Load())
	}
}
