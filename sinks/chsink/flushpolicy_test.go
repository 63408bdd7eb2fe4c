package chsink_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/sinks/chsink"
)

// TestSinkFlushesWhenCaughtUp: with the age cap at a minute, rows are held
// for that minute unless the sink flushes once it has read everything
// there is (Config.MinAge): then they are visible within seconds.
func TestSinkFlushesWhenCaughtUp(t *testing.T) {
	broker := testenv.Kafka(t)
	ch := testenv.ClickHouse(t)
	brokers := []string{broker.Addr()}
	visible := func(project string) uint64 {
		n, err := count(ch.Conn, "SELECT count() FROM task_attempts WHERE project = '"+project+"'")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	base := chsink.Config{Brokers: brokers, ClickHouse: ch.Addr, Database: ch.Database,
		Topics: []string{schemas.TopicAttempts}, MaxAge: time.Minute}

	// MinAge off: the minute's cap holds the rows.
	off := base
	off.Group, off.MinAge = "timer-only", -1
	reg := prometheus.NewRegistry()
	s, err := chsink.New(off, chsink.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := testenv.Context(t)
	defer cancel()
	rctx, stopOff := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	<-s.Ready()
	produce(t, brokers, projectAttempts("held", []string{"c"}, 0, 5))
	testenv.WaitFor(t, 30*time.Second, "the timer-only sink to read the attempts", func() (bool, string) {
		b := counterValue(t, reg, "hf_sink_buffered_rows")
		return b >= 5 || visible("held") > 0, fmt.Sprintf("%v rows buffered, %+v", b, s.Stats())
	})
	time.Sleep(2 * time.Second)
	if n := visible("held"); n != 0 {
		t.Fatalf("timer-only sink (MaxAge 1m, MinAge off): %d rows visible after 2 s, want 0 (the control of this test)", n)
	}
	stopOff() // the drain inserts them
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	on := base
	on.Group, on.MinAge = "caught-up", 100*time.Millisecond
	s, stop := runSink(t, on)
	defer stop()
	<-s.Ready()
	produce(t, brokers, projectAttempts("live", []string{"c"}, 0, 5))
	start := time.Now()
	testenv.WaitFor(t, 30*time.Second, "the attempts visible long before MaxAge", func() (bool, string) {
		n := visible("live")
		return n == 5, fmt.Sprintf("%d of 5 visible after %s, %+v", n, time.Since(start).Round(time.Millisecond), s.Stats())
	})
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("visible after %s with MinAge 100ms", d)
	}
}

// countingScorer recomputes through the real writer and notes when each
// recomputation that succeeded started.
type countingScorer struct {
	chsink.BatchWriter
	mu     sync.Mutex
	starts []time.Time
}

func (w *countingScorer) RecomputeCellScores(ctx context.Context, cells []chddl.CellKey) error {
	start := time.Now()
	err := w.BatchWriter.(chsink.CellScorer).RecomputeCellScores(ctx, cells)
	if err == nil { // a pass, not a retried attempt of one
		w.mu.Lock()
		w.starts = append(w.starts, start)
		w.mu.Unlock()
	}
	return err
}

func (w *countingScorer) times() []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Time(nil), w.starts...)
}

// TestRecomputeEverySpacesAProjectsPasses: attempts of one project arrive
// in small batches flushed every 50 ms; its cell_scores are recomputed at
// most once per RecomputeEvery (the batches between join one pass), and in
// the end every cell is summarized and every offset committed.
func TestRecomputeEverySpacesAProjectsPasses(t *testing.T) {
	broker := testenv.Kafka(t)
	ch := testenv.ClickHouse(t)
	brokers := []string{broker.Addr()}
	w := &countingScorer{BatchWriter: chsink.NewConnWriter(ch.Conn, ch.Database)}
	const every = 1500 * time.Millisecond
	s, err := chsink.New(chsink.Config{Brokers: brokers, ClickHouse: ch.Addr, Database: ch.Database, Group: "spaced",
		Topics: []string{schemas.TopicAttempts}, MaxAge: 50 * time.Millisecond, MinAge: 20 * time.Millisecond,
		RecomputeEvery: every}, chsink.WithWriter(w))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := testenv.Context(t)
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	defer func() { stop(); <-done }()
	<-s.Ready()

	cells := []string{"p-0", "p-1", "p-2"}
	const batches, per = 12, 3
	for i := 0; i < batches; i++ {
		produce(t, brokers, projectAttempts("spaced", cells, i*per, per))
		time.Sleep(150 * time.Millisecond)
	}
	testenv.WaitFor(t, 60*time.Second, "every attempt summarized and committed", func() (bool, string) {
		n, err := count(ch.Conn, "SELECT sum(n_tasks) FROM cell_scores FINAL WHERE project = 'spaced'")
		st := s.Stats()
		return err == nil && n == batches*per && st.Committed >= batches*per, fmt.Sprintf("%d tasks summarized (%v), %+v", n, err, st)
	})
	if p := uncommitted(t, brokers, "spaced", schemas.TopicAttempts); len(p) != 0 {
		t.Errorf("partitions %v uncommitted", p)
	}
	starts := w.times()
	if len(starts) < 2 {
		t.Fatalf("%d recomputations of attempts that arrived over %s: want them spread over several passes", len(starts), batches*150*time.Millisecond)
	}
	for i := 1; i < len(starts); i++ {
		// The pass waits from the previous pass's end, which is after
		// its start: a gap below RecomputeEvery means no wait at all.
		if gap := starts[i].Sub(starts[i-1]); gap < every {
			t.Errorf("recomputations %d and %d of one project %s apart, want at least RecomputeEvery (%s)", i-1, i, gap.Round(time.Millisecond), every)
		}
	}
}
