package kafkax

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/segmentio/kafka-go"
)

// Partitions returns the partition ids of each topic, sorted.
func Partitions(ctx context.Context, client *kafka.Client, topics ...string) (map[string][]int, error) {
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	out := map[string][]int{}
	for _, t := range md.Topics {
		if t.Error != nil {
			return nil, fmt.Errorf("metadata of %s: %w", t.Name, t.Error)
		}
		for _, p := range t.Partitions {
			out[t.Name] = append(out[t.Name], p.ID)
		}
		sort.Ints(out[t.Name])
	}
	return out, nil
}

// EndOffsets returns the end offset (high watermark) of every partition of
// the topics, by topic and partition.
func EndOffsets(ctx context.Context, client *kafka.Client, topics ...string) (map[string]map[int]int64, error) {
	ids, err := Partitions(ctx, client, topics...)
	if err != nil {
		return nil, err
	}
	parts := map[string]map[int]int64{}
	for t, ps := range ids {
		parts[t] = map[int]int64{}
		for _, id := range ps {
			parts[t][id] = 0
		}
	}
	return listOffsets(ctx, client, parts, true)
}

// StartOffsets returns the log start offset (the first offset retention
// has not deleted) of every partition in parts (topic -> partition ->
// anything, e.g. EndOffsets' result).
func StartOffsets(ctx context.Context, client *kafka.Client, parts map[string]map[int]int64) (map[string]map[int]int64, error) {
	return listOffsets(ctx, client, parts, false)
}

// listOffsets asks for the end (last) or the start offset of every partition
// in parts.
func listOffsets(ctx context.Context, client *kafka.Client, parts map[string]map[int]int64, last bool) (map[string]map[int]int64, error) {
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for t, ps := range parts {
		for id := range ps {
			r := kafka.FirstOffsetOf(id)
			if last {
				r = kafka.LastOffsetOf(id)
			}
			req.Topics[t] = append(req.Topics[t], r)
		}
	}
	res, err := client.ListOffsets(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("list offsets: %w", err)
	}
	out := map[string]map[int]int64{}
	for t, ps := range res.Topics {
		out[t] = map[int]int64{}
		for _, p := range ps {
			if p.Error != nil {
				return nil, fmt.Errorf("list offsets %s/%d: %w", t, p.Partition, p.Error)
			}
			out[t][p.Partition] = p.FirstOffset
			if last {
				out[t][p.Partition] = p.LastOffset
			}
		}
	}
	return out, nil
}

// FloorAtStart raises, in place, every committed offset below its
// partition's log start (or absent: never committed) to that start, and
// returns committed: records retention deleted can never be read, so they
// are not lag. A partition whose records all expired (start == end) is then
// caught up although no one ever committed it.
func FloorAtStart(committed, starts map[string]map[int]int64) map[string]map[int]int64 {
	for t, ps := range starts {
		for id, start := range ps {
			if committed[t] == nil {
				committed[t] = map[int]int64{}
			}
			if c, ok := committed[t][id]; !ok || c < start {
				committed[t][id] = start
			}
		}
	}
	return committed
}

// Committed returns group's committed offset of every partition in parts
// (topic -> partition -> anything, e.g. EndOffsets' result). A partition
// the group never committed is -1 or absent.
func Committed(ctx context.Context, client *kafka.Client, group string, parts map[string]map[int]int64) (map[string]map[int]int64, error) {
	req := &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{}}
	for t, ps := range parts {
		for id := range ps {
			req.Topics[t] = append(req.Topics[t], id)
		}
	}
	res, err := client.OffsetFetch(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("offset fetch %s: %w", group, err)
	}
	if errors.Is(res.Error, kafka.GroupIdNotFound) {
		// Some brokers (kfake) answer so for a group that never
		// committed; Kafka answers -1 offsets. Either way: nothing.
		return map[string]map[int]int64{}, nil
	}
	if res.Error != nil {
		return nil, fmt.Errorf("offset fetch %s: %w", group, res.Error)
	}
	out := map[string]map[int]int64{}
	for t, ps := range res.Topics {
		out[t] = map[int]int64{}
		for _, p := range ps {
			if p.Error == nil {
				out[t][p.Partition] = p.CommittedOffset
			}
		}
	}
	return out, nil
}

// Lag sums, over every partition of ends, the messages up to its end offset
// that committed does not cover (a partition never committed counts whole).
func Lag(ends, committed map[string]map[int]int64) int64 {
	var n int64
	for t, ps := range ends {
		for id, end := range ps {
			c := committed[t][id]
			if c < 0 {
				c = 0
			}
			if end > c {
				n += end - c
			}
		}
	}
	return n
}

// GroupLag is how many messages of topics, from their log starts up to
// their current ends, group has not committed.
func GroupLag(ctx context.Context, client *kafka.Client, group string, topics ...string) (int64, error) {
	ends, err := EndOffsets(ctx, client, topics...)
	if err != nil {
		return 0, err
	}
	return CommittedLag(ctx, client, group, ends)
}

// CommittedLag is how many messages of the partitions of ends, from their
// log starts up to ends, group has not committed.
func CommittedLag(ctx context.Context, client *kafka.Client, group string, ends map[string]map[int]int64) (int64, error) {
	c, err := Committed(ctx, client, group, ends)
	if err != nil {
		return 0, err
	}
	starts, err := StartOffsets(ctx, client, ends)
	if err != nil {
		return 0, err
	}
	return Lag(ends, FloorAtStart(c, starts)), nil
}
