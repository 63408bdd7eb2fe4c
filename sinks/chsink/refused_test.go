package chsink_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers/producerstest"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/sinks/chsink"
)

// TestRowClickHouseRefusesIsDeadLettered: ClickHouse refuses one row of a
// batch (a MATERIALIZED throwIf column stands for a constraint: 18.16 has
// no CHECK constraints; the insert of the whole block fails with code 395,
// a permanent error). The sink used to stop on it, and every restart failed
// on the same batch. Now it finds the row by bisection, writes it to
// rejected_events and hf.dlq with the server's reason, inserts the other rows,
// commits, and goes on consuming.
func TestRowClickHouseRefusesIsDeadLettered(t *testing.T) {
	broker := testenv.Kafka(t)
	ch := testenv.ClickHouse(t)
	brokers := []string{broker.Addr()}
	ctx, cancel := testenv.Context(t)
	defer cancel()
	if _, err := chddl.Migrate(ctx, chx.Session(ch.Conn), ch.Database); err != nil {
		t.Fatal(err)
	}
	if err := ch.Conn.Exec(ctx, "ALTER TABLE "+chddl.QuoteIdent(ch.Database)+".task_attempts ADD COLUMN _guard UInt8 MATERIALIZED throwIf(task_id = 'poison')"); err != nil {
		t.Fatal(err)
	}
	evs := attempts(0, 300)
	evs[137].(*schemas.TaskAttempt).TaskID = "poison"
	// The poison event is sent twice (a producer's resend, a retried
	// export): two messages, one dead letter in rejected_events.
	evs = append(evs, evs[137])
	produce(t, brokers, evs)

	s, stop := runSink(t, chsink.Config{Brokers: brokers, ClickHouse: ch.Addr, Database: ch.Database, Group: "gr",
		Topics: []string{schemas.TopicAttempts}, MaxAge: 50 * time.Millisecond, SkipMigrate: true,
		RetryMaxElapsed: 2 * time.Second, RetryMaxInterval: 100 * time.Millisecond})
	testenv.WaitFor(t, 60*time.Second, "the good rows and the dead letter", func() (bool, string) {
		n, _ := count(ch.Conn, "SELECT count() FROM task_attempts FINAL")
		r, _ := count(ch.Conn, "SELECT count() FROM rejected_events FINAL")
		return n == 299 && r == 1, fmt.Sprintf("%d attempts, %d dead letters, %+v", n, r, s.Stats())
	})
	var stage, code, msg, topic string
	var off int64
	if err := ch.Conn.QueryRow(ctx, "SELECT stage, reason_code, message, source_topic, source_offset FROM rejected_events FINAL").
		Scan(&stage, &code, &msg, &topic, &off); err != nil {
		t.Fatal(err)
	}
	if code != chsink.CodeRefused || topic != schemas.TopicAttempts || !strings.Contains(msg, "task poison") ||
		!strings.Contains(msg, "395") {
		t.Fatalf("dead letter %s/%s %q from %s@%d", stage, code, msg, topic, off)
	}
	testenv.WaitFor(t, 30*time.Second, "every offset committed", func() (bool, string) {
		n := committedTotal(t, brokers, "gr", schemas.TopicAttempts)
		return n == int64(len(evs)), fmt.Sprintf("%d committed", n)
	})
	// It is on hf.dlq too, where every other dead letter is: once per
	// message, under one id, the event's.
	dl, err := producerstest.ReadTopic(ctx, broker.Addr(), schemas.TopicDLQ)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(evs[137].Header().EventID))
	wantID := "sink-refused:" + schemas.TopicAttempts + ":" + hex.EncodeToString(sum[:16])
	var onTopic int
	for _, m := range dl {
		if ev, err := schemas.Decode(m.Value); err == nil {
			if r, ok := ev.(*schemas.Rejected); ok && r.ReasonCode == chsink.CodeRefused {
				onTopic++
				if r.EventID != wantID {
					t.Errorf("refused-row dead letter id %q, want %q (the topic and the event's id)", r.EventID, wantID)
				}
			}
		}
	}
	if onTopic != 2 {
		t.Fatalf("%d refused-row dead letters on %s (of %d messages), want 2 (one per message)", onTopic, schemas.TopicDLQ, len(dl))
	}
	if r, _ := count(ch.Conn, "SELECT count() FROM rejected_events FINAL"); r != 1 {
		t.Errorf("%d rows in rejected_events FINAL, want 1: the resent event's dead letters share an id", r)
	}
	// The sink goes on: later rows land.
	produce(t, brokers, attempts(300, 50))
	testenv.WaitFor(t, 60*time.Second, "the later rows", func() (bool, string) {
		n, _ := count(ch.Conn, "SELECT count() FROM task_attempts FINAL")
		return n == 349, fmt.Sprintf("%d attempts", n)
	})
	if err := stop(); err != nil {
		t.Fatalf("Run = %v, want nil after a refused row", err)
	}
}

// TestSinkStopsWhenEveryRowIsRefused: when ClickHouse refuses every row (a
// fault of the table, not of the rows), the isolation is bounded: past
// MaxRefusedRows refusals the sink stops with an InsertError, promptly,
// without dead-lettering the batch.
func TestSinkStopsWhenEveryRowIsRefused(t *testing.T) {
	broker := testenv.Kafka(t)
	ch := testenv.ClickHouse(t)
	brokers := []string{broker.Addr()}
	ctx, cancel := testenv.Context(t)
	defer cancel()
	if _, err := chddl.Migrate(ctx, chx.Session(ch.Conn), ch.Database); err != nil {
		t.Fatal(err)
	}
	if err := ch.Conn.Exec(ctx, "ALTER TABLE "+chddl.QuoteIdent(ch.Database)+".task_attempts ADD COLUMN _guard UInt8 MATERIALIZED throwIf(task_id != '')"); err != nil {
		t.Fatal(err)
	}
	produce(t, brokers, attempts(0, 3000))
	// One batch of what 3 s fetched, the flush on catching up off: a
	// batch of at most MaxRefusedRows rows, all refused, is dead-lettered
	// by design (rows at fault), and with a 50 ms age cap a loaded
	// machine's first batch was 9 rows (ci34).
	s, err := chsink.New(chsink.Config{Brokers: brokers, ClickHouse: ch.Addr, Database: ch.Database, Group: "ga",
		Topics: []string{schemas.TopicAttempts}, MaxAge: 3 * time.Second, MinAge: -1, SkipMigrate: true,
		RetryMaxElapsed: time.Second, RetryMaxInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = s.Run(ctx)
	var ie *chsink.InsertError
	if !errors.As(err, &ie) || ie.Table != "task_attempts" || !strings.Contains(err.Error(), "rows refused") {
		t.Fatalf("Run = %v, want an InsertError saying too many rows were refused", err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Fatalf("took %s to give up", d)
	}
	if n, err := count(ch.Conn, "SELECT count() FROM rejected_events"); err != nil || n != 0 {
		t.Fatalf("%d dead letters (%v), want none", n, err)
	}
}
