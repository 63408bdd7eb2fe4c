package chsink

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/retry"
	"github.com/harnessflow/harnessflow/schemas"
)

// MaxRefusedRows is the most rows of one batch the sink dead-letters as
// refused by ClickHouse. A batch with more is taken for a fault of the
// table or the server, not of its rows: the sink stops on it, as on any
// permanent error.
const MaxRefusedRows = 16

// refusal is one row ClickHouse refused, with its error.
type refusal struct {
	r   row
	err error
}

// rowFault reports whether a permanent insert error may come from the
// batch's rows rather than from the table, the server or the connection
// (where splitting the batch would only repeat the error): a value the
// client cannot encode, or a server exception other than the listed
// schema, access and space faults.
func rowFault(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ee *encodeError
	if errors.As(err, &ee) {
		return true
	}
	var ex *clickhouse.Exception
	if !errors.As(err, &ex) {
		return false
	}
	switch ex.Code {
	case 8, // THERE_IS_NO_COLUMN
		16,  // NO_SUCH_COLUMN_IN_TABLE
		47,  // UNKNOWN_IDENTIFIER
		60,  // UNKNOWN_TABLE
		62,  // SYNTAX_ERROR
		81,  // UNKNOWN_DATABASE
		164, // READONLY
		192, // UNKNOWN_USER
		193, // WRONG_PASSWORD
		242, // TABLE_IS_READ_ONLY
		243, // NOT_ENOUGH_SPACE
		497, // ACCESS_DENIED
		516: // AUTHENTICATION_FAILED
		return false
	}
	return true
}

// isolate finds the rows ClickHouse refuses in rows, whose insert failed
// with the permanent error first: it inserts halves (each with the usual
// retries of transient errors) and splits those that fail again, down to
// single rows. Every row not refused is inserted once it returns nil. The
// work is bounded: at most MaxRefusedRows refusals and 2 inserts per
// refusal per halving level; past either, or on an error that is no row's
// fault, it returns that error.
func (s *Sink) isolate(ctx context.Context, t *table, rows []row, first error) ([]refusal, int, error) {
	budget := 2 * MaxRefusedRows * (bits.Len(uint(len(rows))) + 1)
	inserts := 0
	var refused []refusal
	var walk func(rows []row, err error) error
	walk = func(rows []row, err error) error {
		if len(rows) == 1 {
			if len(refused) == MaxRefusedRows {
				return fmt.Errorf("more than %d rows refused, the table or the server is at fault: %w", MaxRefusedRows, err)
			}
			refused = append(refused, refusal{r: rows[0], err: err})
			return nil
		}
		mid := len(rows) / 2
		for _, half := range [][]row{rows[:mid], rows[mid:]} {
			if inserts == budget {
				return fmt.Errorf("gave up isolating refused rows after %d inserts: %w", inserts, err)
			}
			inserts++
			_, herr := s.retry(ctx, t.name, len(half), "insert", func(ictx context.Context) error {
				return s.w.WriteBatch(ictx, t.name, t.cols, t.build(half, time.Now().UTC().Truncate(time.Second)))
			})
			if herr == nil {
				continue
			}
			if !rowFault(herr) || ctx.Err() != nil {
				return herr
			}
			if err := walk(half, herr); err != nil {
				return err
			}
		}
		return nil
	}
	err := walk(rows, first)
	return refused, inserts, err
}

// deadLetterRefused writes the refused rows of table t to rejected_events
// and to hf.dlq (stage semantic, reason CodeRefused, the server's reason,
// the event's coordinates and its Avro encoding as the payload). Rows of rejected_events
// itself cannot go there: they are logged, with their coordinates.
func (s *Sink) deadLetterRefused(ctx context.Context, t *table, refused []refusal) error {
	if t == tRejected {
		for _, rf := range refused {
			s.log.Error().Err(rf.err).Str("topic", rf.r.m.topic).Int32("partition", rf.r.m.partition).
				Int64("offset", rf.r.m.offset).Msg("ClickHouse refused a dead letter; it is dropped (see the error)")
		}
		return nil
	}
	rows := make([]row, len(refused))
	for i, rf := range refused {
		rows[i] = row{ev: s.refusedRejection(t, rf), m: rf.r.m}
		s.m.rejected.WithLabelValues(rf.r.m.topic).Inc()
		s.log.Warn().Err(rf.err).Str("table", t.name).Str("topic", rf.r.m.topic).Int32("partition", rf.r.m.partition).
			Int64("offset", rf.r.m.offset).Msg("ClickHouse refused a row; it goes to rejected_events")
	}
	attempts, err := s.retry(ctx, tRejected.name, len(rows), "insert", func(ictx context.Context) error {
		return s.w.WriteBatch(ictx, tRejected.name, tRejected.cols, tRejected.build(rows, time.Now().UTC().Truncate(time.Second)))
	})
	if err != nil {
		return &InsertError{Table: tRejected.name, Rows: len(rows), Attempts: attempts, Err: err}
	}
	s.addStats(func(st *Stats) { st.Rejected += int64(len(rows)); st.Rows += int64(len(rows)) })
	return s.publishRefused(ctx, rows)
}

// publishRefused writes the dead letters to hf.dlq too, where every other
// dead letter is (consumers of the topic see them; the sink reading them back
// inserts the same rows again, which rejected_events' key deduplicates). It
// retries until acknowledged or ctx ends: the batch is not committed before,
// so a restart reads it again and publishes again (the same event ids).
func (s *Sink) publishRefused(ctx context.Context, rows []row) error {
	if s.dlq == nil {
		return nil
	}
	msgs := make([]kafka.Message, 0, len(rows))
	for _, r := range rows {
		rec := r.ev.(*schemas.Rejected)
		b, err := schemas.Encode(rec)
		if err != nil {
			return err
		}
		msgs = append(msgs, kafka.Message{Key: []byte(rec.PartitionKey()), Value: b})
	}
	return retry.Do(ctx, retry.Policy{Initial: 200 * time.Millisecond, Max: 5 * time.Second}, func() error {
		err := s.dlq.WriteMessages(ctx, msgs...)
		if err != nil && ctx.Err() == nil {
			s.log.Warn().Err(err).Int("dead_letters", len(msgs)).Msg("publishing refused rows to hf.dlq; retrying")
		}
		return err
	}, nil)
}

// refusedRejection is the dead letter of a row ClickHouse refused; its id
// comes from the topic and the event id of the row
// ("sink-refused:<topic>:" and the hex of the first 16 bytes of the
// event id's SHA-256), so a batch read again after a restart, and a copy
// of the event resent as another message (a retried export), yield the
// same row of rejected_events; an event without an id keeps the
// coordinates ("sink-refused:<topic>:<partition>:<offset>").
func (s *Sink) refusedRejection(t *table, rf refusal) *schemas.Rejected {
	payload, _ := schemas.Encode(rf.r.ev)
	h := rf.r.ev.Header()
	rec := schemas.NewRejected(rejectedSource, schemas.StageSemantic, CodeRefused, "ClickHouse refused the row of "+t.name+": "+rf.err.Error(),
		schemas.Origin{Topic: rf.r.m.topic, Partition: rf.r.m.partition, Offset: rf.r.m.offset,
			Time: h.EventTime, Payload: payload, Project: h.Project, Event: rf.r.ev}, s.cfg.PayloadCap)
	rec.EventID = fmt.Sprintf("sink-refused:%s:%d:%d", rf.r.m.topic, rf.r.m.partition, rf.r.m.offset)
	if h.EventID != "" {
		sum := sha256.Sum256([]byte(h.EventID))
		rec.EventID = "sink-refused:" + rf.r.m.topic + ":" + hex.EncodeToString(sum[:16])
	}
	return rec
}
