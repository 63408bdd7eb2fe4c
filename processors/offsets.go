package processors

import (
	"context"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/schemas"
)

// committedOf returns group's committed offset of partition id of each
// topic (negative: none).
func (p *Processor) committedOf(ctx context.Context, group string, topics []string, id int) (map[string]int64, error) {
	ends := map[string]map[int]int64{}
	for _, t := range topics {
		ends[t] = map[int]int64{id: 0}
	}
	c, err := kafkax.Committed(ctx, p.client, group, ends)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, t := range topics {
		off, ok := c[t][id]
		if !ok {
			off = -1
		}
		out[t] = off
	}
	return out, nil
}

// lag is the number of messages the group's two stages have left: stage A's
// up to rawEnds, then, once stage A has none left, stage B's up to the
// current end of hf.outcomes (stage A commits only after its outputs are
// acknowledged, so that end is final for everything stage A committed).
func lag(ctx context.Context, client *kafka.Client, group string, rawEnds map[string]map[int]int64) (int64, error) {
	if n, err := kafkax.CommittedLag(ctx, client, group, rawEnds); err != nil || n > 0 {
		return n, err
	}
	oEnds, err := kafkax.EndOffsets(ctx, client, schemas.TopicOutcomes)
	if err != nil {
		return 0, err
	}
	return kafkax.CommittedLag(ctx, client, PairGroup(group), oEnds)
}

// Lag returns how many input messages the processors of group have not yet
// committed: stage A's over the raw cell topics' current end offsets, and
// when that is 0, stage B's over hf.outcomes. 0 means every raw event written
// so far is processed and its derived events are acknowledged. Wall-clock
// timeouts of pending events may still add dead letters later.
func Lag(ctx context.Context, brokers []string, group string) (int64, error) {
	client := kafkax.NewClient(brokers)
	ends, err := kafkax.EndOffsets(ctx, client, CellTopics...)
	if err != nil {
		return 0, err
	}
	return lag(ctx, client, group, ends)
}
