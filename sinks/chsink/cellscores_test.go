package chsink_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/sinks/chsink"
)

// failingScorer inserts through the real writer but cannot recompute
// cell_scores.
type failingScorer struct {
	chsink.BatchWriter
	calls atomic.Int64
}

func (f *failingScorer) RecomputeCellScores(context.Context, []chddl.CellKey) error {
	f.calls.Add(1)
	return errors.New("recompute refused")
}

func TestSinkCommitsAttemptsOnlyAfterTheirCellScores(t *testing.T) {
	broker := testenv.Kafka(t)
	ch := testenv.ClickHouse(t)
	brokers := []string{broker.Addr()}
	evs := attempts(0, 200)
	produce(t, brokers, evs)

	// 1. The recomputation fails: the rows are inserted, the sink gives up
	// after its retries, and no offset of hf.attempts is committed.
	fw := &failingScorer{BatchWriter: chsink.NewConnWriter(ch.Conn, ch.Database)}
	s, err := chsink.New(chsink.Config{Brokers: brokers, ClickHouse: ch.Addr, Database: ch.Database, Group: "gs",
		Topics: []string{schemas.TopicAttempts}, MaxAge: 50 * time.Millisecond, RetryMaxElapsed: 300 * time.Millisecond,
		RetryMaxInterval: 50 * time.Millisecond}, chsink.WithWriter(fw))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	err = s.Run(ctx)
	var ie *chsink.InsertError
	if !errors.As(err, &ie) || ie.Table != "cell_scores" || fw.calls.Load() < 2 {
		t.Fatalf("Run = %v after %d recompute calls, want a cell_scores InsertError after retries", err, fw.calls.Load())
	}
	if n, err := count(ch.Conn, "SELECT count() FROM task_attempts FINAL"); err != nil || n == 0 {
		t.Fatalf("task_attempts rows %d (%v): the insert should have happened", n, err)
	}
	if n := committedTotal(t, brokers, "gs", schemas.TopicAttempts); n != 0 {
		t.Fatalf("%d offsets committed before cell_scores was recomputed", n)
	}

	// 2. A sink that can recompute picks the rows up again: every cell gets
	// its summary and the group commits.
	s2, stop := runSink(t, chsink.Config{Brokers: brokers, ClickHouse: ch.Addr, Database: ch.Database, Group: "gs",
		Topics: []string{schemas.TopicAttempts}, MaxAge: 50 * time.Millisecond})
	testenv.WaitFor(t, 60*time.Second, "the second sink to insert every attempt", func() (bool, string) {
		st := s2.Stats()
		return st.Rows >= int64(len(evs)), fmt.Sprintf("%+v", st)
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n, err := count(ch.Conn, "SELECT count() FROM cell_scores FINAL"); err != nil || n != 13 {
		t.Fatalf("cell_scores rows %d (%v), want 13 cells", n, err)
	}
	assertSummariesLive(t, ch.Conn)
	expectView(t, ch.Conn, "SELECT sum(n_tasks) FROM cell_scores FINAL", "200")
	if n := committedTotal(t, brokers, "gs", schemas.TopicAttempts); n != int64(len(evs)) {
		t.Fatalf("committed %d offsets, want %d", n, len(evs))
	}
}

// committedTotal sums group's committed offsets over topic's partitions.
func committedTotal(t *testing.T, brokers []string, group, topic string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil || len(md.Topics) != 1 {
		t.Fatalf("metadata: %v", err)
	}
	var parts []int
	for _, p := range md.Topics[0].Partitions {
		parts = append(parts, p.ID)
	}
	res, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, p := range res.Topics[topic] {
		if p.CommittedOffset > 0 {
			n += p.CommittedOffset
		}
	}
	return n
}

func expectView(t *testing.T, conn driver.Conn, q, want string) {
	t.Helper()
	_, rows, err := chx.QueryStrings(context.Background(), conn, q)
	if err != nil || len(rows) != 1 || rows[0][0] != want {
		t.Fatalf("%s = %v (%v), want %s", q, rows, err, want)
	}
}
