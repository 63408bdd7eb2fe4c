package chsink

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/schemas"
)

// slowWriter takes a while per batch (an inserter stays busy, so flushes
// block handing batches over) and counts the rows it wrote.
type slowWriter struct{ batches, rows atomic.Int64 }

func (w *slowWriter) WriteBatch(ctx context.Context, table string, columns []string, data []any) error {
	select {
	case <-time.After(50 * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	w.rows.Add(int64(len(data[0].([]string)))) // event_id
	w.batches.Add(1)
	return nil
}

// TestCancelWhileAFlushWaitsForAnInserter cancels the sink while its loop
// is blocked handing a batch to a busy inserter (the normal state under
// load). The batch it was handing over must go back to its buffer and be
// inserted by the drain: Run stops cleanly (nil), having committed exactly
// the rows it inserted. It used to leave the batch listed as awaiting with
// no inserter to take it, so the drain waited for its timeout and failed.
func TestCancelWhileAFlushWaitsForAnInserter(t *testing.T) {
	b := testenv.Kafka(t)
	brokers := []string{b.Addr()}
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: brokers})
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var msgs []kafka.Message
	for i := 0; i < 20000; i++ {
		ev := &schemas.TaskAttempt{Envelope: schemas.Envelope{EventID: fmt.Sprintf("e%d", i), EventTime: t0, Project: "p", Source: "s"},
			CellID: fmt.Sprintf("c%d", i%7), TaskID: "t", Cycle: 1, Attempt: 1, HarnessVersion: "h0", Status: schemas.StatusOK, Score: 0.5, SkillsLoaded: []string{}}
		v, err := schemas.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, kafka.Message{Topic: schemas.TopicAttempts, Key: []byte(ev.CellID), Value: v})
	}
	if err := w.WriteMessages(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	w.Close()
	for round := 0; round < 4; round++ {
		sw := &slowWriter{}
		group := fmt.Sprintf("drain-%d", round)
		s, err := New(Config{Brokers: brokers, Group: group, Topics: []string{schemas.TopicAttempts},
			MaxRows: 200, MaxAge: 10 * time.Millisecond, Inserters: 1, DrainTimeout: 30 * time.Second, SkipMigrate: true}, WithWriter(sw))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		// Cancel at a different point of the stream each round, while the
		// single inserter is busy and batches queue behind it.
		for sw.batches.Load() < int64(3+2*round) {
			select {
			case err := <-done:
				cancel()
				t.Fatalf("round %d: sink stopped early: %v", round, err)
			case <-time.After(2 * time.Millisecond):
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("round %d: clean stop returned %v (%d rows inserted)", round, err, sw.rows.Load())
		}
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		client := kafkax.NewClient(brokers)
		ends, err := kafkax.EndOffsets(cctx, client, schemas.TopicAttempts)
		if err == nil {
			var c map[string]map[int]int64
			if c, err = kafkax.Committed(cctx, client, group, ends); err == nil {
				var n int64
				for _, off := range c[schemas.TopicAttempts] {
					n += max(off, 0)
				}
				if n != sw.rows.Load() {
					t.Errorf("round %d: committed %d messages, inserted %d rows: a clean stop commits what it inserted", round, n, sw.rows.Load())
				}
			}
		}
		ccancel()
		if err != nil {
			t.Fatal(err)
		}
	}
}
