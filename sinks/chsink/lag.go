package chsink

import (
	"context"
	"strconv"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/kafkax"
)

// pollLag sets hf_sink_commit_lag every Config.LagInterval until ctx ends:
// per partition of the sink's topics, the log end offset minus the group's
// committed offset (raised to the log start: records retention deleted are
// no lag). Every member of the group reports the whole group's lag, so
// aggregate with max by (group, topic, partition). A failed poll (a broker
// restart) keeps the last figures and is logged at debug level.
func (s *Sink) pollLag(ctx context.Context) {
	kafkax.Poll(ctx, s.cfg.Brokers, s.cfg.LagInterval, s.updateLag, func(err error) {
		s.log.Debug().Err(err).Msg("consumer lag poll failed")
	})
}

// updateLag polls the group's lag once and sets the gauge.
func (s *Sink) updateLag(ctx context.Context, client *kafka.Client) error {
	pctx, cancel := context.WithTimeout(ctx, kafkax.ClientTimeout)
	defer cancel()
	ends, err := kafkax.EndOffsets(pctx, client, s.cfg.Topics...)
	if err != nil {
		return err
	}
	committed, err := kafkax.Committed(pctx, client, s.cfg.Group, ends)
	if err != nil {
		return err
	}
	starts, err := kafkax.StartOffsets(pctx, client, ends)
	if err != nil {
		return err
	}
	committed = kafkax.FloorAtStart(committed, starts)
	for topic, ps := range ends {
		for p, end := range ps {
			s.m.commitLag.WithLabelValues(s.cfg.Group, topic, strconv.Itoa(p)).Set(float64(max(end-committed[topic][p], 0)))
		}
	}
	return nil
}
