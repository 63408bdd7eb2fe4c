package producers_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/broker"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/producers/producerstest"
	"github.com/harnessflow/harnessflow/schemas"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func jsonForm(t *testing.T, ev schemas.Event) string {
	t.Helper()
	b, err := schemas.MarshalJSON(ev)
	if err != nil {
		t.Fatalf("marshal %s: %v", ev.Type(), err)
	}
	return string(b)
}

// readBack reads every message of the raw topics and decodes them, keyed by
// event id; it checks that each message's key is its event's partition key.
func readBack(t *testing.T, ctx context.Context, addr string) (map[string]schemas.Event, []kafka.Message) {
	t.Helper()
	got := map[string]schemas.Event{}
	var all []kafka.Message
	for _, topic := range schemas.RawTopics {
		msgs, err := producerstest.ReadTopic(ctx, addr, topic)
		if err != nil {
			t.Fatalf("read %s: %v", topic, err)
		}
		for _, m := range msgs {
			ev, err := schemas.Decode(m.Value)
			if err != nil {
				t.Fatalf("decode %s/%d@%d: %v", topic, m.Partition, m.Offset, err)
			}
			if string(m.Key) != ev.PartitionKey() {
				t.Errorf("%s: key %q, want partition key %q", ev.Header().EventID, m.Key, ev.PartitionKey())
			}
			if want := schemas.TopicFor(ev.Type()); want != topic {
				t.Errorf("%s on %s, want %s", ev.Header().EventID, topic, want)
			}
			got[ev.Header().EventID] = ev
		}
		all = append(all, msgs...)
	}
	return got, all
}

func TestEmitFlushDeliversEveryEventKeyed(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	ctx := ctxT(t, 60*time.Second)
	p, err := producers.New(producers.Config{Brokers: []string{b.Addr()}, BatchSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	evs := producerstest.Mixed(1400, "proj")
	// Emit from several goroutines: Emit is safe for concurrent use.
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := g; i < len(evs); i += 4 {
				if err := p.Emit(ctx, evs[i]); err != nil {
					t.Errorf("emit %d: %v", i, err)
				}
			}
		}(g)
	}
	wg.Wait()
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if s := p.Stats(); s.Delivered != uint64(len(evs)) || s.Failed != 0 {
		t.Fatalf("stats %+v, want %d delivered", s, len(evs))
	}
	got, msgs := readBack(t, ctx, b.Addr())
	if len(msgs) != len(evs) {
		t.Fatalf("%d messages on the raw topics, want %d", len(msgs), len(evs))
	}
	for _, ev := range evs {
		g, ok := got[ev.Header().EventID]
		if !ok {
			t.Fatalf("event %s missing", ev.Header().EventID)
		}
		if jsonForm(t, g) != jsonForm(t, ev) {
			t.Fatalf("event %s changed:\n got %s\nwant %s", ev.Header().EventID, jsonForm(t, g), jsonForm(t, ev))
		}
	}
	// Keyed by cell: every message of one key is on one partition.
	part := map[string]int{}
	for _, m := range msgs {
		k := m.Topic + "/" + string(m.Key)
		if p, ok := part[k]; ok && p != m.Partition {
			t.Fatalf("key %s on partitions %d and %d", k, p, m.Partition)
		}
		part[k] = m.Partition
	}
}

func TestEmitFillsEnvelope(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	ctx := ctxT(t, 60*time.Second)
	now := time.Date(2026, 6, 1, 10, 0, 0, 123456789, time.UTC)
	p, err := producers.New(producers.Config{Brokers: []string{b.Addr()}, Project: "acme", Source: "runner"},
		producers.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	ev := producerstest.TaskAttempt(1, "")
	ev.EventID, ev.EventTime, ev.Source = "", time.Time{}, ""
	if err := p.Emit(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	got, msgs := readBack(t, ctx, b.Addr())
	if len(got) != 1 {
		t.Fatalf("%d events, want 1", len(got))
	}
	// The message timestamp is the emit time (the processors merge a cell's
	// topics by it), not when kafka-go happened to send the batch.
	if len(msgs) != 1 || !msgs[0].Time.Equal(now.Truncate(time.Millisecond)) {
		t.Errorf("message timestamp %v, want the emit time %v", msgs[0].Time, now.Truncate(time.Millisecond))
	}
	for id, g := range got {
		h := g.Header()
		if h.Project != "acme" || h.Source != "runner" || !h.EventTime.Equal(now.Truncate(time.Millisecond)) {
			t.Errorf("envelope %+v: want project acme, source runner, time %v", h, now.Truncate(time.Millisecond))
		}
		if id == "" || id != schemas.DeriveEventID(g) {
			t.Errorf("event id %q, want the derived %q", id, schemas.DeriveEventID(g))
		}
	}
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestFailFastReturnsErrBufferFull(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var reported []error
	const bufferSize, batchSize = 2, 1
	p, err := producers.New(producers.Config{
		Brokers: []string{deadAddr(t)}, Backpressure: producers.FailFast,
		BufferSize: bufferSize, BatchSize: batchSize, MaxElapsedTime: time.Minute,
		OnError: func(_ schemas.Event, err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 30*time.Second)
	// The writer cannot deliver anything: it holds at most one batch being
	// collected and max(bufferSize, batchSize) events in flight, and the
	// buffer bufferSize events; the next Emit must fail fast.
	bound := bufferSize + batchSize + max(bufferSize, batchSize)
	accepted := 0
	for i := 0; i <= bound; i++ {
		err := p.Emit(ctx, producerstest.TaskAttempt(i, "p"))
		if errors.Is(err, producers.ErrBufferFull) {
			break
		}
		if err != nil {
			t.Fatalf("emit %d: %v", i, err)
		}
		accepted++
	}
	if accepted > bound {
		t.Fatalf("%d events accepted, want ErrBufferFull after at most %d", accepted, bound)
	}
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err = p.Close(cctx)
	var de *producers.DeliveryError
	if !errors.As(err, &de) || de.Failed != accepted {
		t.Fatalf("close: %v, want a DeliveryError for %d events", err, accepted)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reported) != accepted {
		t.Fatalf("OnError called %d times, want %d", len(reported), accepted)
	}
	for _, e := range reported {
		if !errors.Is(e, producers.ErrClosed) {
			t.Errorf("reported %v, want ErrClosed", e)
		}
	}
	if err := p.Emit(ctx, producerstest.TaskAttempt(99, "p")); !errors.Is(err, producers.ErrClosed) {
		t.Fatalf("emit after close: %v, want ErrClosed", err)
	}
}

func TestCloseLosesNothing(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	ctx := ctxT(t, 60*time.Second)
	p, err := producers.New(producers.Config{Brokers: []string{b.Addr()}, BufferSize: 500, BatchSize: 200})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	for i := 0; i < n; i++ {
		if err := p.Emit(ctx, producerstest.TaskAttempt(i, "p")); err != nil {
			t.Fatalf("emit %d: %v", i, err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if err := p.Flush(ctx); !errors.Is(err, producers.ErrClosed) {
		t.Fatalf("flush after close: %v, want ErrClosed", err)
	}
	msgs, err := producerstest.ReadTopic(ctx, b.Addr(), schemas.TopicAttempts)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range msgs {
		ev, err := schemas.Decode(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		seen[ev.Header().EventID] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct events on %s after Close, want %d", len(seen), schemas.TopicAttempts, n)
	}
}

func TestInvalidEventRejectedWithFieldError(t *testing.T) {
	t.Parallel()
	p, err := producers.New(producers.Config{Brokers: []string{deadAddr(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	ctx := ctxT(t, 10*time.Second)

	noKey := producerstest.TaskAttempt(1, "p")
	noKey.CellID = ""
	badEnum := producerstest.TaskAttempt(2, "p")
	badEnum.Status = "exploded"
	for _, tc := range []struct {
		name  string
		ev    *schemas.TaskAttempt
		field string
	}{
		{"missing cell_id", noKey, "cell_id"},
		{"bad status", badEnum, "status"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, emit := range []func() error{
				func() error { return p.Emit(ctx, tc.ev) },
				func() error { return p.EmitSync(ctx, producerstest.TaskAttempt(3, "p"), tc.ev) },
			} {
				err := emit()
				if !errors.Is(err, producers.ErrInvalidEvent) {
					t.Fatalf("got %v, want ErrInvalidEvent", err)
				}
				var fe *schemas.FieldError
				if !errors.As(err, &fe) || fe.Field != tc.field {
					t.Fatalf("got %v, want a FieldError on %s", err, tc.field)
				}
			}
		})
	}
	if s := p.Stats(); s.Emitted != 0 {
		t.Fatalf("stats %+v: invalid events were accepted", s)
	}
	// Bad configuration: every problem is reported.
	_, err = producers.New(producers.Config{BufferSize: -1, BatchSize: -2})
	if err == nil {
		t.Fatalf("New with a bad config: %v", err)
	}
	for _, want := range []string{"brokers", "buffer size", "batch size"} {
		if !strings.Contains(strings.ToLower(err.Error()), want) {
			t.Errorf("config error %q does not mention %q", err, want)
		}
	}
}

func TestDeliveryErrorReportedWhenBrokerGone(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	ctx := ctxT(t, 60*time.Second)
	var mu sync.Mutex
	failed := map[string]error{}
	p, err := producers.New(producers.Config{
		Brokers: []string{b.Addr()}, MaxElapsedTime: 500 * time.Millisecond, WriteTimeout: time.Second,
		OnError: func(ev schemas.Event, err error) { mu.Lock(); failed[ev.Header().EventID] = err; mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	if err := p.Emit(ctx, producerstest.TaskAttempt(0, "p")); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("flush while the broker is up: %v", err)
	}
	b.Close()
	const n = 5
	for i := 1; i <= n; i++ {
		if err := p.Emit(ctx, producerstest.TaskAttempt(i, "p")); err != nil {
			t.Fatalf("emit %d: %v", i, err)
		}
	}
	err = p.Flush(ctx)
	var de *producers.DeliveryError
	if !errors.As(err, &de) || de.Failed != n || de.First == nil {
		t.Fatalf("flush with the broker gone: %v, want a DeliveryError for %d events", err, n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(failed) != n {
		t.Fatalf("OnError reported %d events, want %d", len(failed), n)
	}
	for i := 1; i <= n; i++ {
		if _, ok := failed[producerstest.TaskAttempt(i, "p").EventID]; !ok {
			t.Errorf("event %d not reported", i)
		}
	}
	if s := p.Stats(); s.Failed != n || s.Delivered != 1 {
		t.Fatalf("stats %+v, want 1 delivered and %d failed", s, n)
	}
}

func TestEmitSyncAllOrNothing(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	ctx := ctxT(t, 60*time.Second)
	p, err := producers.New(producers.Config{Brokers: []string{b.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	evs := producerstest.Mixed(7, "p")
	if err := p.EmitSync(ctx, evs...); err != nil {
		t.Fatalf("emit sync: %v", err)
	}
	// Acknowledged on return: no Flush needed.
	got, _ := readBack(t, ctx, b.Addr())
	if len(got) != len(evs) {
		t.Fatalf("%d events after EmitSync, want %d", len(got), len(evs))
	}
	bad := producerstest.TaskAttempt(100, "p")
	bad.CellID = ""
	if err := p.EmitSync(ctx, producerstest.TaskAttempt(101, "p"), bad); !errors.Is(err, producers.ErrInvalidEvent) {
		t.Fatalf("emit sync with an invalid event: %v", err)
	}
	if got, _ := readBack(t, ctx, b.Addr()); len(got) != len(evs) {
		t.Fatalf("%d events after a rejected EmitSync, want %d (nothing produced)", len(got), len(evs))
	}
}

// TestBatchesGoOutWithoutTheTimer checks that, with a batch timer that never
// fires, full batches are still written as soon as they are buffered, and a
// partial batch on Flush: the run goroutine is woken by a batch's worth of
// events or a flush, not only by its timer. A buffer smaller than a batch
// must not stall either.
func TestBatchesGoOutWithoutTheTimer(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	for _, c := range []struct{ buffer, batch int }{{1000, 100}, {10, 100}} {
		ctx := ctxT(t, 30*time.Second)
		p, err := producers.New(producers.Config{Brokers: []string{b.Addr()}, BufferSize: c.buffer, BatchSize: c.batch, BatchTimeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		const full = 300
		for i := 0; i < full; i++ {
			if err := p.Emit(ctx, producerstest.TaskAttempt(i, "p")); err != nil {
				t.Fatalf("buffer %d: emit %d: %v", c.buffer, i, err)
			}
		}
		if c.buffer >= c.batch {
			// Three full batches: delivered with no Flush and no timer.
			testenv.Eventually(t, 30*time.Second, fmt.Sprintf("buffer %d: the %d events of full batches delivered without a flush", c.buffer, full),
				func() bool { return p.Stats().Delivered >= full })
		}
		for i := full; i < full+7; i++ { // a partial batch
			if err := p.Emit(ctx, producerstest.TaskAttempt(i, "p")); err != nil {
				t.Fatalf("buffer %d: emit %d: %v", c.buffer, i, err)
			}
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatalf("buffer %d: flush: %v", c.buffer, err)
		}
		if s := p.Stats(); s.Delivered != full+7 {
			t.Fatalf("buffer %d: delivered %d after Flush, want %d", c.buffer, s.Delivered, full+7)
		}
		if err := p.Close(ctx); err != nil {
			t.Fatalf("buffer %d: close: %v", c.buffer, err)
		}
	}
}

// TestFlushThatGaveUpLeavesTheFailures: a Flush whose ctx ends before its
// events are resolved returns the ctx error; the failures those events end
// with must then reach the next Flush (or Close), not vanish with the reply
// nobody reads any more.
func TestFlushThatGaveUpLeavesTheFailures(t *testing.T) {
	t.Parallel()
	p, err := producers.New(producers.Config{
		Brokers: []string{deadAddr(t)}, MaxElapsedTime: 300 * time.Millisecond, WriteTimeout: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 60*time.Second)
	for i := 0; i < 3; i++ {
		if err := p.Emit(ctx, producerstest.TaskAttempt(i, "p")); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	err = p.Flush(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("flush with a 20ms deadline against a dead broker = %v, want the deadline", err)
	}
	err = p.Flush(ctx)
	var de *producers.DeliveryError
	if !errors.As(err, &de) || de.Failed != 3 {
		t.Fatalf("the next flush = %v, want a DeliveryError of the 3 failed events (stats %+v)", err, p.Stats())
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("close after the failures were reported = %v, want nil", err)
	}
}

// TestCloseHonoursItsDeadline: with brokers that refuse every produce
// (NOT_ENOUGH_REPLICAS), kafka-go's own Close would go on retrying the
// batches it holds, one partition after another, for tens of seconds. Close
// returns once its ctx ends, with the events reported failed.
func TestCloseHonoursItsDeadline(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	c := b.Cluster()
	c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return broker.ErrorResponse(r, kerr.NotEnoughReplicas.Code), nil, true
	})
	var failed atomic.Int64
	p, err := producers.New(producers.Config{Brokers: []string{b.Addr()}, BatchSize: 10, BufferSize: 200,
		OnError: func(schemas.Event, error) { failed.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 120*time.Second)
	for i := 0; i < 100; i++ {
		ev := producerstest.TaskAttempt(i, "p")
		ev.CellID = "cell-00" // one partition: its batches are retried one after another
		if err := p.Emit(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	start := time.Now()
	err = p.Close(cctx)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("close with a 1s deadline = %v, want the deadline", err)
	}
	// The deadline is 1 s; kafka-go's Close took 44 s here before the fix.
	if took > 10*time.Second {
		t.Errorf("close with a 1s deadline took %s", took)
	}
	if n := failed.Load(); n != 100 {
		t.Errorf("%d of 100 undelivered events reported to OnError", n)
	}
}
