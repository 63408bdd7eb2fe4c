package stages

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/sinks/chsink"
)

// benchAttempts returns n attempts spread over 360 cells, the rows of Sink.
func benchAttempts(n int) []schemas.Event {
	t0 := time.Now().UTC().Truncate(time.Second)
	evs := make([]schemas.Event, n)
	for i := range evs {
		evs[i] = &schemas.TaskAttempt{
			Envelope: schemas.Envelope{EventID: fmt.Sprintf("bench-%09d", i), EventTime: t0.Add(time.Duration(i) * time.Microsecond),
				Project: "bench", Source: "bench"},
			CellID: fmt.Sprintf("cell-%03d", i%360), TaskID: fmt.Sprintf("task-%06d", i/360), StreamIdx: int32(i / 360),
			Cycle: int32(i/360/50 + 1), Attempt: 1, HarnessVersion: "h1", Status: schemas.StatusOK, Score: float64(i%100) / 100,
			Success: i%3 == 0, Final: true, SkillsAvailable: 3, SkillsLoaded: []string{"fix-tests"},
			InputTokens: int64(1000 + i%5000), OutputTokens: int64(100 + i%700), DurationMs: int64(i % 60000),
		}
	}
	return evs
}

// produceAll writes evs to hf.attempts, keyed by their partition keys.
func produceAll(ctx context.Context, brokers []string, evs []schemas.Event) error {
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: brokers, Topic: schemas.TopicAttempts, BatchSize: 5000, BatchBytes: 8 << 20})
	defer w.Close()
	const chunk = 20000
	msgs := make([]kafka.Message, 0, chunk)
	for i := 0; i < len(evs); i += chunk {
		msgs = msgs[:0]
		for _, ev := range evs[i:min(i+chunk, len(evs))] {
			b, err := schemas.Encode(ev)
			if err != nil {
				return err
			}
			msgs = append(msgs, kafka.Message{Key: []byte(ev.PartitionKey()), Value: b})
		}
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	return nil
}

// skipToEnd commits group's offsets at the current end of topic, so that the
// bench's sink reads only the rows produced after it.
func skipToEnd(ctx context.Context, brokers []string, group, topic string) error {
	client := kafkax.NewClient(brokers)
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil || len(md.Topics) != 1 {
		return fmt.Errorf("metadata: %w", err)
	}
	var reqs []kafka.OffsetRequest
	for _, p := range md.Topics[0].Partitions {
		reqs = append(reqs, kafka.LastOffsetOf(p.ID))
	}
	lo, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return err
	}
	var commits []kafka.OffsetCommit
	for _, p := range lo.Topics[topic] {
		commits = append(commits, kafka.OffsetCommit{Partition: p.Partition, Offset: p.LastOffset})
	}
	resp, err := client.OffsetCommit(ctx, &kafka.OffsetCommitRequest{GroupID: group, GenerationID: -1,
		Topics: map[string][]kafka.OffsetCommit{topic: commits}})
	if err != nil {
		return err
	}
	for _, ps := range resp.Topics {
		for _, p := range ps {
			if p.Error != nil {
				return p.Error
			}
		}
	}
	return nil
}

// timeGoInsert inserts evs into database.table with the sink's writer
// (clickhouse-go), batch rows per insert, and returns the seconds it took.
func timeGoInsert(ctx context.Context, conn driver.Conn, database, table string, evs []schemas.Event, batch int) (float64, error) {
	w := chsink.NewConnWriter(conn, database)
	t0 := time.Now()
	for i := 0; i < len(evs); i += batch {
		_, cols, data, err := chsink.BuildColumns(evs[i:min(i+batch, len(evs))])
		if err != nil {
			return 0, err
		}
		if err := w.WriteBatch(ctx, table, cols, data); err != nil {
			return 0, err
		}
	}
	return time.Since(t0).Seconds(), nil
}
