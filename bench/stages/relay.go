package stages

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/infra/kafkatopics"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/processors"
	"github.com/harnessflow/harnessflow/schemas"
)

// relayTopic is the scratch topic of the relay floor, shaped like
// hf.outcomes. It is created on first use and kept (each run reads back only
// what it wrote, from the end offsets it found).
const relayTopic = "hf.bench-relay"

// relay measures the read -> write -> read floor over the raw cell topics
// (ProcessConfig.Relay). Reading, writing (asynchronously: the best this
// writer does) and reading back run concurrently; the writer gets batches
// of the processor's default
// BatchSize (k raw messages per record, ProcessConfig.RelayBatch), and each
// partition of the scratch topic is read back from the end offset it had
// before the run.
func relay(ctx context.Context, brokers []string, client *kafka.Client, stamp, events int64, k int) (time.Duration, error) {
	def, ok := kafkatopics.Lookup(schemas.TopicOutcomes)
	if !ok {
		return 0, fmt.Errorf("no topic definition for %s", schemas.TopicOutcomes)
	}
	// The scratch topic has the replicas hf.outcomes has on this cluster
	// (one on the embedded broker), so that its writes cost the same.
	st, _, err := kafkax.DescribeTopics(ctx, client, []kafkatopics.Topic{def})
	if err != nil {
		return 0, err
	}
	rf := st[0].ReplicationFactor
	def.Name = relayTopic
	if err := kafkax.EnsureTopics(ctx, brokers, []kafkatopics.Topic{def}, kafkax.WithReplicationFactor(rf)); err != nil {
		return 0, err
	}
	ends, err := kafkax.EndOffsets(ctx, client, relayTopic)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	in := kafka.NewReader(kafkax.ReaderConfig(brokers, fmt.Sprintf("bench-relay-%d", stamp), processors.CellTopics...))
	defer in.Close()
	errc := make(chan error, 3+len(ends[relayTopic]))
	// Asynchronous: produce requests are pipelined, acknowledgements checked
	// in the completion callback; a relay that waited for each batch's
	// acknowledgement before reading on measured at about 0.4x of this.
	var failed atomic.Bool
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: brokers, Topic: relayTopic, BatchSize: 5000, BatchBytes: 16 << 20,
		Async: true, Completion: func(_ []kafka.Message, err error) {
			if err != nil && failed.CompareAndSwap(false, true) {
				errc <- fmt.Errorf("write: %w", err)
			}
		}})
	defer w.Close()

	batches := make(chan []kafka.Message, 4)
	var back atomic.Int64
	done := make(chan struct{})
	start := time.Now()
	records := relayRecords(events, k)
	go func() { // read the raw topics
		defer close(batches)
		for n := int64(0); n < events; {
			size := min(relayWriteBatch, events-n)
			b := make([]kafka.Message, 0, (size+int64(k)-1)/int64(k))
			for i := int64(0); i < size; i++ {
				m, err := in.FetchMessage(ctx)
				if err != nil {
					errc <- fmt.Errorf("read after %d of %d: %w", n, events, err)
					return
				}
				if i%int64(k) == 0 {
					v := m.Value
					if k > 1 {
						v = append(make([]byte, 0, len(v)*k), v...)
					}
					b = append(b, kafka.Message{Key: m.Key, Value: v, Time: m.Time})
				} else {
					last := &b[len(b)-1]
					last.Value = append(last.Value, m.Value...)
				}
				n++
			}
			select {
			case batches <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() { // write them to the scratch topic
		for b := range batches {
			if err := w.WriteMessages(ctx, b...); err != nil {
				errc <- fmt.Errorf("write: %w", err)
				return
			}
		}
	}()
	for part, end := range ends[relayTopic] { // read them back
		rc := kafkax.ReaderConfig(brokers, "", relayTopic)
		rc.Partition = part
		r := kafka.NewReader(rc)
		defer r.Close()
		if err := r.SetOffset(end); err != nil {
			return 0, err
		}
		go func() {
			for {
				if _, err := r.FetchMessage(ctx); err != nil {
					if ctx.Err() == nil {
						errc <- fmt.Errorf("read back partition %d: %w", part, err)
					}
					return
				}
				if back.Add(1) == records {
					close(done)
				}
			}
		}()
	}
	select {
	case <-done:
		return time.Since(start), nil
	case err := <-errc:
		return 0, err
	case <-ctx.Done(): // the read-back goroutines stop without a word
		return 0, ctx.Err()
	}
}

// relayWriteBatch is the raw messages per write of the relay: the
// processor's default BatchSize (it mirrors the 2000 of processors.Config's
// setDefaults, which exports no constant for it).
const relayWriteBatch int64 = 2000

// relayRecords is the number of records the relay writes for events raw
// messages at k per record: each write batch packs its messages k at a time.
func relayRecords(events int64, k int) int64 {
	var records int64
	for n := int64(0); n < events; n += relayWriteBatch {
		records += (min(relayWriteBatch, events-n) + int64(k) - 1) / int64(k)
	}
	return records
}
