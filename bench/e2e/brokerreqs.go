package e2e

import (
	"sync"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// reqCounter counts the requests the embedded broker handles, per request
// kind (Produce, Fetch, Metadata, ...), through a kfake control function that
// observes and never handles: the broker's work is paid per request as well
// as per byte, so a phase's request counts explain part of the driver's CPU.
type reqCounter struct {
	mu sync.Mutex
	n  map[int16]int64
}

// countRequests starts counting c's requests (until c closes).
func countRequests(c *kfake.Cluster) *reqCounter {
	rc := &reqCounter{n: map[int16]int64{}}
	c.Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
		rc.mu.Lock()
		rc.n[req.Key()]++
		rc.mu.Unlock()
		return nil, nil, false // observed, not handled: kept, and the broker answers
	})
	return rc
}

// snap reads the counts by request name (nil for a nil counter).
func (rc *reqCounter) snap() map[string]int64 {
	if rc == nil {
		return nil
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := make(map[string]int64, len(rc.n))
	for k, v := range rc.n {
		out[kmsg.NameForKey(k)] = v
	}
	return out
}
