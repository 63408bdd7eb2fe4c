package chaos

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harnessflow/harnessflow/internal/broker"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/harnessflow/harnessflow/bench/fleet"
)

// kafkaFaults injects Kafka faults into the cluster's embedded broker
// through kfake's request interception: control functions (ControlKey with
// KeepControl) answer produce and fetch requests with error responses or
// hold them (SleepControl), and a kfake Fault answers produce requests with
// REQUEST_TIMED_OUT after appending them. A broker restart drops every
// control function and fault, so restartBroker installs the bursts still
// running on the new broker. Methods are safe for concurrent use.
type kafkaFaults struct {
	cl    *fleet.Cluster
	delay time.Duration

	mu     sync.Mutex // held while installing and across a broker restart
	active map[*burst]struct{}

	// hits counts the requests answered with an error or held.
	hits atomic.Int64
}

// burst is one running burst of one fault kind.
type burst struct {
	kind   string
	over   atomic.Bool
	done   chan struct{}      // closed when the burst ends: wakes held fetches
	handle *kfake.FaultHandle // the REQUEST_TIMED_OUT fault, guarded by kafkaFaults.mu
}

func newKafkaFaults(cl *fleet.Cluster, delay time.Duration) *kafkaFaults {
	return &kafkaFaults{cl: cl, delay: delay, active: map[*burst]struct{}{}}
}

// run injects kind for d (or until ctx ends), then removes it.
func (k *kafkaFaults) run(ctx context.Context, kind string, d time.Duration) error {
	b := &burst{kind: kind, done: make(chan struct{})}
	k.mu.Lock()
	err := k.install(b)
	if err == nil {
		k.active[b] = struct{}{}
	}
	k.mu.Unlock()
	if err != nil {
		return err
	}
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.end(b)
	return nil
}

// end stops b (kafkaFaults.mu held): control functions drop themselves on
// their next request, held fetches are answered, the fault is removed.
func (k *kafkaFaults) end(b *burst) {
	if b.over.Swap(true) {
		return
	}
	close(b.done)
	k.takeHandle(b)
	delete(k.active, b)
}

// takeHandle removes b's kfake fault, counting its hits (mu held).
func (k *kafkaFaults) takeHandle(b *burst) {
	if b.handle != nil {
		b.handle.Remove()
		k.hits.Add(int64(b.handle.Hits()))
		b.handle = nil
	}
}

// stopAll ends every running burst.
func (k *kafkaFaults) stopAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for b := range k.active {
		k.end(b)
	}
}

// restartBroker restarts the embedded broker on its data dir and installs
// the bursts still running on the new one.
func (k *kafkaFaults) restartBroker() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for b := range k.active {
		k.takeHandle(b)
	}
	if err := k.cl.RestartBroker(); err != nil {
		return err
	}
	for b := range k.active {
		if err := k.install(b); err != nil {
			return err
		}
	}
	return nil
}

// install adds b's control functions (and fault) to the current broker
// (mu held).
func (k *kafkaFaults) install(b *burst) error {
	br := k.cl.Broker()
	if br == nil {
		return fmt.Errorf("install %s: the broker is not running", b.kind)
	}
	c := br.Cluster()
	produce, fetch := int16(kmsg.Produce), int16(kmsg.Fetch)
	switch b.kind {
	case FaultProduceError:
		c.ControlKey(produce, k.answer(c, b, kerr.KafkaStorageError.Code))
	case FaultFetchError:
		c.ControlKey(fetch, k.answer(c, b, kerr.KafkaStorageError.Code))
	case FaultNotLeader:
		c.ControlKey(produce, k.answer(c, b, kerr.NotLeaderForPartition.Code))
		c.ControlKey(fetch, k.answer(c, b, kerr.NotLeaderForPartition.Code))
	case FaultTimeout:
		// Appended, then answered REQUEST_TIMED_OUT: the producer's retry
		// writes the batch a second time, downstream must deduplicate.
		b.handle = c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.RequestTimedOut, Count: -1})
		c.ControlKey(fetch, k.hold(c, b))
	default:
		return fmt.Errorf("unknown Kafka fault %q", b.kind)
	}
	return nil
}

// answer returns a control function that answers every produce or fetch
// request with code on each of its partitions while b runs; once b is over
// it drops itself and lets the broker answer.
func (k *kafkaFaults) answer(c *kfake.Cluster, b *burst, code int16) func(kmsg.Request) (kmsg.Response, error, bool) {
	return func(req kmsg.Request) (kmsg.Response, error, bool) {
		if b.over.Load() {
			c.DropControl()
			return nil, nil, false
		}
		resp := broker.ErrorResponse(req, code)
		if resp == nil {
			return nil, nil, false
		}
		c.KeepControl()
		k.hits.Add(1)
		return resp, nil, true
	}
}

// hold returns a control function that holds each fetch for k.delay (or
// until b ends) before the broker answers it: the client sees a request
// that takes too long.
func (k *kafkaFaults) hold(c *kfake.Cluster, b *burst) func(kmsg.Request) (kmsg.Response, error, bool) {
	return func(kmsg.Request) (kmsg.Response, error, bool) {
		if b.over.Load() {
			c.DropControl()
			return nil, nil, false
		}
		k.hits.Add(1)
		c.SleepControl(func() {
			t := time.NewTimer(k.delay)
			defer t.Stop()
			select {
			case <-t.C:
			case <-b.done:
			}
		})
		return nil, nil, false
	}
}
