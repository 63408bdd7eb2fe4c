package chaos

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harnessflow/harnessflow/bench/fleet"
)

// maxUnexpectedExits is how many unplanned deaths of one child are restarted
// before the campaign stops restarting it (a crash loop).
const maxUnexpectedExits = 20

// child supervises one component: planned kills (kill) and restarts of
// unplanned deaths (watch). mu serializes the two, so watch never mistakes a
// planned kill for a crash.
type child struct {
	p    *fleet.Proc
	mu   sync.Mutex
	stop chan struct{}
	done chan struct{}

	stopping   atomic.Bool
	unexpected atomic.Int64
}

// kill sends SIGKILL, waits downtime and starts the child again.
func (c *child) kill(ctx context.Context, downtime time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.p.Kill(); err != nil && !errors.Is(err, fleet.ErrNotRunning) {
		return err
	}
	select {
	case <-time.After(downtime):
	case <-ctx.Done():
	}
	return c.p.Start()
}

// watch restarts the child whenever a life ends that kill did not end,
// counting those deaths, until stopWatch.
func (c *child) watch(say func(string, ...any)) {
	defer close(c.done)
	for {
		select {
		case <-c.stop:
			return
		case <-c.p.Done():
		}
		c.mu.Lock()
		if c.stopping.Load() || c.p.Running() {
			c.mu.Unlock()
			continue
		}
		n := c.unexpected.Add(1)
		say("%s exited without being killed (%v; log %s)", c.p.Name, c.p.ExitErr(), c.p.LogPath)
		if n > maxUnexpectedExits {
			c.mu.Unlock()
			say("%s: %d unplanned exits, not restarting it any more (crash loop)", c.p.Name, n)
			<-c.stop
			return
		}
		time.Sleep(time.Second)
		if err := c.p.Start(); err != nil {
			say("restart %s: %v", c.p.Name, err)
		}
		c.mu.Unlock()
	}
}

func (c *child) stopWatch() {
	if c.stopping.Swap(true) {
		return
	}
	close(c.stop)
	<-c.done
}

func (c *child) unexpectedExits() int { return int(c.unexpected.Load()) }
