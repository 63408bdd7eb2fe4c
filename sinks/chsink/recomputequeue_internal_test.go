package chsink

import (
	"testing"
	"time"
)

// takeWithin runs q.take and fails the test when it does not return within
// d; it returns the project taken.
func takeWithin(t *testing.T, q *recomputeQueue, d time.Duration) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		p, _, ok := q.take()
		if !ok {
			p = "(closed)"
		}
		got <- p
	}()
	select {
	case p := <-got:
		return p
	case <-time.After(d):
		t.Fatalf("take did not return within %s", d)
		return ""
	}
}

// TestRecomputeQueueTakesDueProjectsFirst: a project recomputed less than
// RecomputeEvery ago waits in its place while a due project is taken, it
// is taken once its interval has passed, and a drain makes it due at once.
func TestRecomputeQueueTakesDueProjectsFirst(t *testing.T) {
	t.Parallel()
	const every = 400 * time.Millisecond
	q := newRecomputeQueue(every)
	defer q.close()
	mk := func(project string) []*part { return []*part{{project: project}} }

	// A's first pass: due at once (never recomputed).
	q.push(mk("A"), time.Now())
	if p := takeWithin(t, q, time.Second); p != "A" {
		t.Fatalf("took %q, want A", p)
	}
	q.finish("A")
	// A again (not due for every) ahead of B (never recomputed): B first.
	q.push(mk("A"), time.Now())
	q.push(mk("B"), time.Now())
	start := time.Now()
	if p := takeWithin(t, q, time.Second); p != "B" {
		t.Fatalf("took %q, want B (A is not due for %s)", p, every)
	}
	if d := time.Since(start); d > every/2 {
		t.Errorf("B taken after %s: it waited for A's interval", d)
	}
	q.finish("B")
	if p := takeWithin(t, q, 3*every); p != "A" {
		t.Fatalf("took %q, want A", p)
	}
	if d := time.Since(start); d < every*3/4 {
		t.Errorf("A taken again %s after its pass, want about RecomputeEvery (%s)", d, every)
	}
	q.finish("A")

	// Draining: A is due at once although its pass just ended.
	q.push(mk("A"), time.Now())
	go func() { time.Sleep(50 * time.Millisecond); q.drain() }()
	start = time.Now()
	if p := takeWithin(t, q, time.Second); p != "A" {
		t.Fatalf("took %q, want A", p)
	}
	if d := time.Since(start); d > every*3/4 {
		t.Errorf("A taken %s after the drain began, want at once", d)
	}
}
