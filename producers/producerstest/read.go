package producerstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
)

// ReadTopic returns every message currently stored in topic on the broker at
// addr: all partitions, from the first offset to the high watermark, each
// partition in order. It uses plain kafka-go connections (no consumer group).
func ReadTopic(ctx context.Context, addr, topic string) ([]kafka.Message, error) {
	var d kafka.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		return nil, fmt.Errorf("partitions of %s: %w", topic, err)
	}
	var out []kafka.Message
	for _, p := range parts {
		msgs, err := readPartition(ctx, &d, net.JoinHostPort(p.Leader.Host, strconv.Itoa(p.Leader.Port)), topic, p.ID)
		if err != nil {
			return nil, err
		}
		out = append(out, msgs...)
	}
	return out, nil
}

func readPartition(ctx context.Context, d *kafka.Dialer, leader, topic string, partition int) ([]kafka.Message, error) {
	conn, err := d.DialLeader(ctx, "tcp", leader, topic, partition)
	if err != nil {
		return nil, fmt.Errorf("dial leader of %s/%d: %w", topic, partition, err)
	}
	defer conn.Close()
	first, last, err := conn.ReadOffsets()
	if err != nil {
		return nil, fmt.Errorf("offsets of %s/%d: %w", topic, partition, err)
	}
	if _, err := conn.Seek(first, kafka.SeekAbsolute); err != nil {
		return nil, err
	}
	var out []kafka.Message
	next := first
	for next < last {
		deadline := time.Now().Add(10 * time.Second)
		if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
			deadline = dl
		}
		_ = conn.SetReadDeadline(deadline)
		batch := conn.ReadBatch(1, 16<<20)
		for {
			m, err := batch.ReadMessage()
			if err != nil {
				break
			}
			out = append(out, m)
			next = m.Offset + 1
		}
		if err := batch.Close(); err != nil && !errors.Is(err, kafka.OffsetOutOfRange) {
			return out, fmt.Errorf("read %s/%d at %d: %w", topic, partition, next, err)
		}
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
	}
	return out, nil
}
