package processors

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"
)

// TestCommitterCoalesces: commits submitted while one is in flight go out
// together as the next request (the highest offset per partition), and every
// submitter returns once a request holding its offsets was answered, with
// that request's error.
func TestCommitterCoalesces(t *testing.T) {
	var mu sync.Mutex
	var sent []map[string]map[int]int64
	inFlight, release := make(chan struct{}), make(chan error)
	c := newCommitter(func(offs map[string]map[int]int64) error {
		mu.Lock()
		sent = append(sent, offs)
		mu.Unlock()
		inFlight <- struct{}{}
		return <-release
	})
	waiting := make(chan int, 16) // submitters waiting for the next request
	c.queued = func(n int) { waiting <- n }

	first := make(chan error, 1)
	go func() { first <- c.commit(context.Background(), map[string]map[int]int64{"a": {0: 10}}) }()
	<-inFlight // the first request is in flight

	// Five more, while it is: partitions 1..4 of a, and partition 0 of a again.
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := 0; i < 5; i++ {
		offs := map[string]map[int]int64{"a": {i: int64(100 + i)}}
		if i == 0 {
			offs = map[string]map[int]int64{"a": {0: 20}, "b": {0: 7}}
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = c.commit(context.Background(), offs) }()
	}
	for n := 0; n < 5; {
		select {
		case n = <-waiting:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 5 commits queued after 10s", n)
		}
	}
	select {
	case err := <-first:
		t.Fatalf("the first commit returned (%v) before its request was answered", err)
	default:
	}
	release <- nil
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	<-inFlight // the second request: all five, merged
	boom := errors.New("not the coordinator")
	release <- boom
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, boom) {
			t.Errorf("submitter %d: %v, want the round's error", i, err)
		}
	}
	want := []map[string]map[int]int64{
		{"a": {0: 10}},
		{"a": {0: 20, 1: 101, 2: 102, 3: 103, 4: 104}, "b": {0: 7}},
	}
	mu.Lock()
	got := append([]map[string]map[int]int64(nil), sent...)
	mu.Unlock()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("requests %v, want %v", got, want)
	}

	// Idle again: the next commit is a request of its own.
	go func() { <-inFlight; release <- nil }()
	if err := c.commit(context.Background(), map[string]map[int]int64{"a": {5: 1}}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != 3 {
		t.Fatalf("%d requests, want 3", len(sent))
	}
}

// TestCommitReturnsWhenItsContextEnds: a commit whose request hangs (a
// broker that never answers) returns ctx's error once ctx ends, so a
// partition's drain keeps its DrainTimeout.
func TestCommitReturnsWhenItsContextEnds(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	c := newCommitter(func(map[string]map[int]int64) error { <-release; return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.commit(ctx, map[string]map[int]int64{"a": {0: 1}}) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("commit after its deadline: %v, want context.DeadlineExceeded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("commit still waits for a hung request 10s after its context ended")
	}
}
