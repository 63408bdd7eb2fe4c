package testenv

import (
	"testing"
	"time"
)

//go:noinline
func parkedUntil(stop <-chan struct{}, done chan<- struct{}) {
	<-stop
	close(done)
}

// TestStartedSinceFindsALeftGoroutine keeps NoLeaks honest: a goroutine
// started after the snapshot and parked in this package's code is found,
// one of another package is not, and none is once it has ended.
func TestStartedSinceFindsALeftGoroutine(t *testing.T) {
	before := map[string]bool{}
	for _, g := range goroutines() {
		before[g.id] = true
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go parkedUntil(stop, done)
	const pkg = "github.com/harnessflow/harnessflow/internal/testenv"
	var left []goroutine
	for deadline := time.Now().Add(5 * time.Second); len(left) == 0 && time.Now().Before(deadline); {
		left = startedSince(before, []string{pkg})
	}
	if len(left) != 1 {
		t.Fatalf("found %d goroutines started since, want the parked one", len(left))
	}
	if other := startedSince(before, []string{"github.com/harnessflow/harnessflow/processors"}); len(other) != 0 {
		t.Fatalf("found %d goroutines of another package", len(other))
	}
	close(stop)
	<-done
	for deadline := time.Now().Add(5 * time.Second); len(left) > 0 && time.Now().Before(deadline); {
		left = startedSince(before, []string{pkg})
	}
	if len(left) != 0 {
		t.Fatalf("the ended goroutine is still found:\n%s", left[0].stack)
	}
}
