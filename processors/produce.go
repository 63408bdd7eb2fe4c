package processors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/kafkax"
)

// outWriter writes one flush's outputs: one Produce request per topic
// partition (split at outBatchBytes), the partitions in parallel, each
// acknowledged by all in-sync replicas (RequireAll). A message goes to the
// partition kafka-go's Writer with the Hash balancer picks (fnv-1a of the key
// over the topic's partition count), so keys land where they always did.
//
// A flush already is a batch, in order: a kafka.Writer would add a metadata
// look-up per call, a goroutine and a timer per partition batch, and a
// BatchSize-long message slice per batch (most of a bench run's allocations),
// and nothing else. Partition counts are read from the cluster at most every
// outMetaTTL, and again after a failed write. Safe for concurrent use.
type outWriter struct {
	client *kafka.Client
	hash   kafka.Hash

	mu     sync.Mutex
	counts map[string]int // topic -> partition count
	at     time.Time      // when counts were read
}

const (
	// outBatchBytes caps the records of one Produce request (the output
	// topics' max.message.bytes is 8 MiB, infra/kafkatopics).
	outBatchBytes = 4 << 20
	// outMetaTTL is how long partition counts are trusted.
	outMetaTTL = 5 * time.Second
)

func newOutWriter(client *kafka.Client) *outWriter {
	return &outWriter{client: client, counts: map[string]int{}}
}

// partCounts returns the partition count of every topic of msgs.
func (w *outWriter) partCounts(ctx context.Context, msgs []kafka.Message) (map[string]int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	stale := time.Since(w.at) > outMetaTTL
	var topics []string
	for i := range msgs {
		t := msgs[i].Topic
		if _, ok := w.counts[t]; !ok && !contains(topics, t) {
			topics = append(topics, t)
		}
	}
	if !stale && len(topics) == 0 {
		return w.counts, nil
	}
	for t := range w.counts {
		topics = append(topics, t)
	}
	parts, err := kafkax.Partitions(ctx, w.client, topics...)
	if err != nil {
		return nil, err
	}
	counts := make(map[string]int, len(parts))
	for _, t := range topics {
		if len(parts[t]) == 0 {
			return nil, fmt.Errorf("topic %s: %w", t, kafka.UnknownTopicOrPartition)
		}
		counts[t] = len(parts[t])
	}
	// Readers hold the old map: replace it, never modify it.
	w.counts, w.at = counts, time.Now()
	return counts, nil
}

func (w *outWriter) invalidate() {
	w.mu.Lock()
	w.at = time.Time{}
	w.mu.Unlock()
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// partIDs[:n] is 0..n-1, the partition list kafka-go's Writer hands its
// balancer.
var partIDs = func() []int {
	ids := make([]int, 1024)
	for i := range ids {
		ids[i] = i
	}
	return ids
}()

// outGroup is the messages of one request, by index into the flush's slice.
type outGroup struct {
	topic string
	part  int
	idx   []int32
}

// write produces msgs and returns once every one is acknowledged, or with an
// error naming each topic partition that failed (some others may have been
// written: a retry writes them again, which is fine for idempotent readers).
// msgs are not copied: after an error (a request abandoned on ctx may still
// be encoding them) the caller must not modify them.
func (w *outWriter) write(ctx context.Context, msgs []kafka.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err // nothing of an abandoned flush goes out
	}
	counts, err := w.partCounts(ctx, msgs)
	if err != nil {
		return err
	}
	type tp struct {
		topic string
		part  int
	}
	at := map[tp]int{} // -> index of the open group in groups
	bytesIn := map[tp]int{}
	var groups []outGroup
	for i := range msgs {
		m := &msgs[i]
		n := counts[m.Topic]
		if n > len(partIDs) {
			return fmt.Errorf("topic %s has %d partitions, more than %d", m.Topic, n, len(partIDs))
		}
		k := tp{m.Topic, w.hash.Balance(*m, partIDs[:n]...)}
		size := len(m.Key) + len(m.Value) + 64
		g, ok := at[k]
		if !ok || (bytesIn[k]+size > outBatchBytes && len(groups[g].idx) > 0) {
			// A new request; requests of one partition are sent in order.
			groups = append(groups, outGroup{topic: k.topic, part: k.part})
			g = len(groups) - 1
			at[k], bytesIn[k] = g, 0
		}
		groups[g].idx = append(groups[g].idx, int32(i))
		bytesIn[k] += size
	}
	// One goroutine per partition; each sends its partition's requests in
	// order.
	byPart := map[tp][]int{}
	var order []tp
	for gi, g := range groups {
		k := tp{g.topic, g.part}
		if _, ok := byPart[k]; !ok {
			order = append(order, k)
		}
		byPart[k] = append(byPart[k], gi)
	}
	errs := make([]error, len(order))
	send := func(j int) {
		for _, gi := range byPart[order[j]] {
			if err := w.produce(ctx, msgs, &groups[gi]); err != nil {
				errs[j] = err
				return
			}
		}
	}
	if len(order) == 1 {
		send(0)
	} else {
		var wg sync.WaitGroup
		for j := range order {
			wg.Add(1)
			go func() { defer wg.Done(); send(j) }()
		}
		wg.Wait()
	}
	if err := errors.Join(errs...); err != nil {
		w.invalidate()
		return err
	}
	return nil
}

func (w *outWriter) produce(ctx context.Context, msgs []kafka.Message, g *outGroup) error {
	res, err := w.client.Produce(ctx, &kafka.ProduceRequest{
		Topic: g.topic, Partition: g.part, RequiredAcks: kafka.RequireAll,
		Records: &msgRecords{msgs: msgs, idx: g.idx},
	})
	if err == nil && res.Error != nil {
		err = res.Error
	}
	if err == nil {
		for i, e := range res.RecordErrors {
			err = fmt.Errorf("record %d: %w", i, e)
			break
		}
	}
	if err != nil {
		return fmt.Errorf("produce %d messages to %s/%d: %w", len(g.idx), g.topic, g.part, err)
	}
	return nil
}

// msgRecords is a kafka.RecordReader over msgs[idx[0]], msgs[idx[1]], ...,
// without copying them (the returned Record is reused: the protocol encoder
// consumes it before reading the next).
type msgRecords struct {
	msgs       []kafka.Message
	idx        []int32
	next       int
	rec        kafka.Record
	key, value bytesReader
}

type bytesReader struct{ bytes.Reader }

func (*bytesReader) Close() error { return nil }

// ReadRecord implements kafka.RecordReader.
func (r *msgRecords) ReadRecord() (*kafka.Record, error) {
	if r.next >= len(r.idx) {
		return nil, io.EOF
	}
	m := &r.msgs[r.idx[r.next]]
	r.next++
	r.rec = kafka.Record{Time: m.Time, Headers: m.Headers}
	if m.Key != nil {
		r.key.Reset(m.Key)
		r.rec.Key = &r.key
	}
	if m.Value != nil {
		r.value.Reset(m.Value)
		r.rec.Value = &r.value
	}
	return &r.rec, nil
}
