package chsink_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/sinks/chsink"
)

// staleReplicaWriter inserts through the real writer, but the first
// recomputation of every cell reads as a replica that has not fetched the
// insert yet would: it writes nothing for the cell (a summary lost, as the
// cluster test saw when the replica that took an insert was killed).
type staleReplicaWriter struct {
	chsink.BatchWriter
	mu       sync.Mutex
	missed   map[chddl.CellKey]bool
	verifies int
}

func (w *staleReplicaWriter) RecomputeCellScores(ctx context.Context, cells []chddl.CellKey) error {
	w.mu.Lock()
	var read []chddl.CellKey
	for _, c := range cells {
		if w.missed[c] {
			read = append(read, c)
		}
		w.missed[c] = true
	}
	w.mu.Unlock()
	return w.BatchWriter.(chsink.CellScorer).RecomputeCellScores(ctx, read)
}

func (w *staleReplicaWriter) VerifyCellScores(ctx context.Context, checks []chddl.CellCheck) ([]chddl.CellKey, error) {
	w.mu.Lock()
	w.verifies++
	w.mu.Unlock()
	return w.BatchWriter.(chsink.CellVerifier).VerifyCellScores(ctx, checks)
}

// TestSinkRepairsSummariesAReplicaMissed: through a cluster, a summary that
// a recomputation wrote short (or not at all) is found by the sink's
// verification and recomputed; Stats.Unverified falls to 0 once every
// summary is whole, and it is what a caller waits on. On a single server
// (no Cluster) nothing is verified.
func TestSinkRepairsSummariesAReplicaMissed(t *testing.T) {
	broker := testenv.Kafka(t)
	ch := testenv.ClickHouse(t)
	brokers := []string{broker.Addr()}
	ctx, cancel := testenv.Context(t)
	defer cancel()
	if _, err := chddl.Migrate(ctx, chx.Session(ch.Conn), ch.Database); err != nil {
		t.Fatal(err)
	}
	evs := attempts(0, 200)
	produce(t, brokers, evs)

	run := func(group, cluster string) (*chsink.Sink, *staleReplicaWriter, func() error) {
		w := &staleReplicaWriter{BatchWriter: chsink.NewConnWriter(ch.Conn, ch.Database), missed: map[chddl.CellKey]bool{}}
		s, err := chsink.New(chsink.Config{Brokers: brokers, ClickHouse: ch.Addr, Database: ch.Database, Group: group,
			Cluster: cluster, SkipMigrate: true, Topics: []string{schemas.TopicAttempts}, MaxAge: 50 * time.Millisecond,
			VerifyDelay: 100 * time.Millisecond}, chsink.WithWriter(w))
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.Run(rctx) }()
		return s, w, func() error { stop(); return <-done }
	}

	// A single server: the lost summaries stay lost (nothing verifies), so
	// the check below can fail.
	single, sw, stop := run("single", "")
	testenv.WaitFor(t, time.Minute, "the single-server sink to commit every attempt", func() (bool, string) {
		st := single.Stats()
		return st.Committed >= int64(len(evs)), fmt.Sprintf("%+v", st)
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n, err := count(ch.Conn, "SELECT count() FROM cell_scores FINAL"); err != nil || n != 0 {
		t.Fatalf("cell_scores rows after the stale recomputations: %d (%v), want 0", n, err)
	}
	if st := single.Stats(); st.Unverified != 0 || st.Repairs != 0 || sw.verifies != 0 {
		t.Fatalf("a single-server sink verified: %+v, %d verifications", st, sw.verifies)
	}

	// Through a cluster: every cell is repaired, then nothing awaits.
	s, w, stop := run("cluster", "any")
	testenv.WaitFor(t, time.Minute, "every attempt committed and every summary verified", func() (bool, string) {
		st := s.Stats()
		return st.Committed >= int64(len(evs)) && st.Unverified == 0 && st.Repairs > 0, fmt.Sprintf("%+v", st)
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n, err := count(ch.Conn, "SELECT count() FROM cell_scores FINAL"); err != nil || n != 13 {
		t.Fatalf("cell_scores rows %d (%v), want 13 cells", n, err)
	}
	assertSummariesLive(t, ch.Conn)
	if st := s.Stats(); st.Repairs != 13 || w.verifies < 2 {
		t.Errorf("repairs %d (want one per cell, 13), verifications %d", st.Repairs, w.verifies)
	}
}
