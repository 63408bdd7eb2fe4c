package processors

import (
	"context"
	"sync"
)

// committer sends the offset commits of one generation's partitions,
// coalesced. A generation commits through one connection to the group
// coordinator, one request at a time; with a commit per flush per
// partition, a partition's flush used to wait behind the other partitions'
// commits (under load, most of a flush's time: the broker answers each in
// turn). Commits submitted while one is in flight now go out together, as
// the next request, so a flush waits for at most the request in flight and
// its own, whatever the number of partitions.
//
// Each partition has at most one flush in flight and its offsets only grow,
// so merging submissions loses nothing: a round holds at most one offset per
// partition and topic. Every submitter of a round gets that round's error.
type committer struct {
	send func(map[string]map[int]int64) error
	// queued, when set, is called (under mu) with the number of submitters
	// waiting for the next request, each time one is added.
	queued func(waiting int)

	mu      sync.Mutex
	pending map[string]map[int]int64
	waiters []chan error
	running bool
}

func newCommitter(send func(map[string]map[int]int64) error) *committer {
	return &committer{send: send}
}

// commit commits offs (topic -> partition -> offset) and returns when a
// request holding them was answered, or with ctx's error when ctx ends
// first (a hung commit does not hold a drain past its deadline; the
// request, which takes no context, is answered to nobody).
func (c *committer) commit(ctx context.Context, offs map[string]map[int]int64) error {
	if len(offs) == 0 {
		return nil
	}
	done := make(chan error, 1)
	c.mu.Lock()
	if c.pending == nil {
		c.pending = map[string]map[int]int64{}
	}
	for topic, parts := range offs {
		m := c.pending[topic]
		if m == nil {
			m = map[int]int64{}
			c.pending[topic] = m
		}
		for part, off := range parts {
			if cur, ok := m[part]; !ok || off > cur {
				m[part] = off
			}
		}
	}
	c.waiters = append(c.waiters, done)
	if c.queued != nil {
		c.queued(len(c.waiters))
	}
	if !c.running {
		c.running = true
		go c.loop()
	}
	c.mu.Unlock()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loop sends what was submitted, a round at a time, until nothing is left.
func (c *committer) loop() {
	for {
		c.mu.Lock()
		if len(c.waiters) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		offs, waiters := c.pending, c.waiters
		c.pending, c.waiters = nil, nil
		c.mu.Unlock()
		err := c.send(offs)
		for _, w := range waiters {
			w <- err
		}
	}
}
