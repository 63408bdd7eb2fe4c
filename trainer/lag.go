package trainer

import (
	"context"
	"maps"
	"strconv"
	"sync"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/kafkax"
)

// frontier is a copy of the trained frontier (Trainer.offsets: per
// partition, the offset after the last message a step consumed) that the
// training loop publishes after each step's intake and the lag poller
// reads. Safe for concurrent use.
type frontier struct {
	mu   sync.Mutex
	offs map[int32]int64
}

// set publishes offs (copied).
func (f *frontier) set(offs map[int32]int64) {
	f.mu.Lock()
	f.offs = maps.Clone(offs)
	f.mu.Unlock()
}

// get returns partition p's published offset, or -1.
func (f *frontier) get(p int) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o, ok := f.offs[int32(p)]; ok {
		return o
	}
	return -1
}

// pollLag sets hf_trainer_commit_lag every Config.LagInterval until ctx
// ends: per partition of the sample topic, the log end offset minus how far
// the trainer got: its trained frontier, or the group's committed offset
// (committed after each checkpoint, also by other trainers of the group)
// where that is further, raised to the log start. Samples read but waiting
// for their batch count as lag. A failed poll keeps the last figures.
func (t *Trainer) pollLag(ctx context.Context) {
	kafkax.Poll(ctx, t.cfg.Brokers, t.cfg.LagInterval, t.updateLag, func(err error) {
		t.log.Debug().Err(err).Msg("consumer lag poll failed")
	})
}

// updateLag polls the lag once and sets the gauge.
func (t *Trainer) updateLag(ctx context.Context, client *kafka.Client) error {
	pctx, cancel := context.WithTimeout(ctx, kafkax.ClientTimeout)
	defer cancel()
	ends, err := kafkax.EndOffsets(pctx, client, t.cfg.Topic)
	if err != nil {
		return err
	}
	committed, err := kafkax.Committed(pctx, client, t.cfg.Group, ends)
	if err != nil {
		return err
	}
	starts, err := kafkax.StartOffsets(pctx, client, ends)
	if err != nil {
		return err
	}
	committed = kafkax.FloorAtStart(committed, starts)
	for p, end := range ends[t.cfg.Topic] {
		done := max(committed[t.cfg.Topic][p], t.metrics.lag.get(p))
		t.metrics.commitLag.WithLabelValues(t.cfg.Group, t.cfg.Topic, strconv.Itoa(p)).Set(float64(max(end-done, 0)))
	}
	return nil
}
