package jsonl

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/harnessflow/harnessflow/producers"
)

// reportProgress writes a progress line to w every interval (none when
// interval <= 0) until the returned stop is called; stop returns once the
// reporter has ended.
func reportProgress(w io.Writer, interval time.Duration, p *producers.Producer, c *counts, start time.Time) (stop func()) {
	stopping := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if interval <= 0 {
			return
		}
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-stopping:
				return
			case <-t.C:
				s := p.Stats()
				el := time.Since(start).Seconds()
				fmt.Fprintf(w, "progress: read %d lines, produced %d, rejected %d, %.0f events/s\n",
					c.lines.Load(), s.Delivered, c.rejected.Load(), float64(s.Delivered)/el)
			}
		}
	}()
	return func() {
		close(stopping)
		<-done
	}
}

// lockedWriter serializes writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// Write writes p to the underlying writer under the lock.
func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
