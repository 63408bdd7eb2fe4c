package processors

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/schemas"
)

// readPartition returns every message of topic partition part, in order.
func readPartition(t *testing.T, client *kafka.Client, topic string, part int) []kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []kafka.Message
	for off := int64(0); ; {
		res, err := client.Fetch(ctx, &kafka.FetchRequest{Topic: topic, Partition: part, Offset: off, MinBytes: 1, MaxBytes: 16 << 20, MaxWait: time.Millisecond})
		if err != nil || res.Error != nil {
			t.Fatalf("fetch %s/%d at %d: %v %v", topic, part, off, err, res.Error)
		}
		n := len(out)
		for {
			r, err := res.Records.ReadRecord()
			if err != nil {
				break
			}
			if r.Offset < off {
				continue
			}
			k, _ := kafka.ReadAll(r.Key)
			v, _ := kafka.ReadAll(r.Value)
			out = append(out, kafka.Message{Topic: topic, Partition: part, Offset: r.Offset, Key: k, Value: v})
			off = r.Offset + 1
		}
		if len(out) == n && off >= res.HighWatermark {
			return out
		}
	}
}

// TestOutWriterRoutesLikeKafkaWriter: outputs land on the partition kafka-go's
// Writer with the Hash balancer picks (so keys stay where earlier versions
// put them), in the order given, also when a partition's share of a flush is
// split over several requests; a topic that does not exist is an error.
func TestOutWriterRoutesLikeKafkaWriter(t *testing.T) {
	addr := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := kafkax.NewClient([]string{addr})
	ow := newOutWriter(client)

	// Twins of the output topics' partition counts for the reference writer.
	ref := map[string]string{schemas.TopicOutcomes: "test.ref-outcomes", schemas.TopicDLQ: "test.ref-dlq"}
	parts, err := kafkax.Partitions(ctx, client, schemas.TopicOutcomes, schemas.TopicDLQ)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts[schemas.TopicOutcomes]) == len(parts[schemas.TopicDLQ]) {
		t.Fatalf("test needs two partition counts: %v", parts)
	}
	var create []kafka.TopicConfig
	for topic, twin := range ref {
		create = append(create, kafka.TopicConfig{Topic: twin, NumPartitions: len(parts[topic]), ReplicationFactor: 1})
	}
	if res, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: create}); err != nil {
		t.Fatalf("create twins: %v", err)
	} else {
		for topic, err := range res.Errors {
			if err != nil {
				t.Fatalf("create %s: %v", topic, err)
			}
		}
	}

	// Large values: a partition's share is over outBatchBytes.
	big := bytes.Repeat([]byte("x"), 200<<10)
	var msgs []kafka.Message
	for i := 0; i < 300; i++ {
		topic := schemas.TopicOutcomes
		if i%3 == 0 {
			topic = schemas.TopicDLQ
		}
		msgs = append(msgs, kafka.Message{Topic: topic, Key: []byte(fmt.Sprintf("key-%d", i%17)),
			Value: append([]byte(fmt.Sprintf("%04d|", i)), big...), Time: time.UnixMilli(int64(1000 + i))})
	}
	if err := ow.write(ctx, msgs); err != nil {
		t.Fatalf("write: %v", err)
	}

	// The reference: kafka-go's Writer with the Hash balancer, same keys.
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: []string{addr}})
	refMsgs := make([]kafka.Message, len(msgs))
	for i, m := range msgs {
		refMsgs[i] = kafka.Message{Topic: ref[m.Topic], Key: m.Key, Value: m.Value[:5]}
	}
	if err := w.WriteMessages(ctx, refMsgs...); err != nil {
		t.Fatalf("reference write: %v", err)
	}
	w.Close()

	for topic, twin := range ref {
		want := map[string]int{} // key -> partition
		for _, p := range parts[topic] {
			for _, m := range readPartition(t, client, twin, p) {
				want[string(m.Key)] = p
			}
		}
		got := 0
		for _, p := range parts[topic] {
			last := -1
			for _, m := range readPartition(t, client, topic, p) {
				if wp, ok := want[string(m.Key)]; !ok || wp != p {
					t.Fatalf("%s: key %s on partition %d, kafka-go's Writer puts it on %d", topic, m.Key, p, wp)
				}
				var i int
				if _, err := fmt.Sscanf(string(m.Value[:4]), "%04d", &i); err != nil {
					t.Fatalf("value %q: %v", m.Value[:5], err)
				}
				if i <= last {
					t.Fatalf("%s/%d: message %d after %d, want the order given", topic, p, i, last)
				}
				if !bytes.Equal(m.Value, msgs[i].Value) {
					t.Fatalf("%s/%d: message %d value differs", topic, p, i)
				}
				last = i
				got++
			}
		}
		n := 0
		for _, m := range msgs {
			if m.Topic == topic {
				n++
			}
		}
		if got != n {
			t.Fatalf("%s: %d messages read, %d written", topic, got, n)
		}
	}

	if err := ow.write(ctx, []kafka.Message{{Topic: "hf.no-such-topic", Key: []byte("k"), Value: []byte("v")}}); err == nil {
		t.Fatal("write to a missing topic: want an error")
	}
}
