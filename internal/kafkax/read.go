package kafkax

import (
	"context"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// ReadToEnd hands fn every message of topics, partition by partition, from
// each partition's first offset to its end offset as read at the start
// (messages written meanwhile are not waited for). It stops at the first
// error of a read or of fn. For tools that need a topic's whole contents
// once (a reference run, a benchmark), not for services: it keeps no
// group and commits nothing.
func ReadToEnd(ctx context.Context, brokers []string, fn func(kafka.Message) error, topics ...string) error {
	ends, err := EndOffsets(ctx, NewClient(brokers), topics...)
	if err != nil {
		return err
	}
	for _, t := range topics {
		for part, end := range ends[t] {
			if end == 0 {
				continue
			}
			if err := readPartition(ctx, brokers, t, part, end, fn); err != nil {
				return err
			}
		}
	}
	return nil
}

func readPartition(ctx context.Context, brokers []string, topic string, part int, end int64, fn func(kafka.Message) error) error {
	cfg := kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: part, MinBytes: 1, MaxBytes: 8 << 20,
		MaxWait: 100 * time.Millisecond, Dialer: Dialer()}
	r := kafka.NewReader(cfg)
	defer r.Close()
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			return fmt.Errorf("read %s/%d: %w", topic, part, err)
		}
		if err := fn(m); err != nil {
			return err
		}
		if m.Offset+1 >= end {
			return nil
		}
	}
}
