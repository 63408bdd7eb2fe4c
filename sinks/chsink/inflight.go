package chsink

import "sync"

// inflightJobs counts the jobs handed to the inserters and not inserted
// yet, and signals when none is left (Idle), so that a recompute worker
// coalescing inserts waits for them without polling. The zero value is
// ready: no job in flight.
type inflightJobs struct {
	mu   sync.Mutex
	n    int64
	zero chan struct{} // closed while n == 0 (nil: not made yet, idle)
}

// Add changes the count by d.
func (f *inflightJobs) Add(d int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	was := f.n
	f.n += d
	switch {
	case was == 0 && f.n > 0:
		f.zero = make(chan struct{})
	case was > 0 && f.n <= 0:
		f.n = 0
		close(f.zero)
	}
}

// Load is the count.
func (f *inflightJobs) Load() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// Reset sets the count to 0 (a consumer run that ended).
func (f *inflightJobs) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n > 0 {
		f.n = 0
		close(f.zero)
	}
}

// Idle returns a channel closed once no job is in flight (at once when
// none is now).
func (f *inflightJobs) Idle() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.zero == nil {
		f.zero = make(chan struct{})
		close(f.zero)
	}
	return f.zero
}
