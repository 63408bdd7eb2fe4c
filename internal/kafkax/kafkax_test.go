package kafkax_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	kafkatopics "github.com/harnessflow/harnessflow/infra/kafka"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/testenv"
)

func TestEnsureTopicsIdempotentAndRoundTrip(t *testing.T) {
	b := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	brokers := []string{b.Addr()}
	// A second application changes nothing and does not fail.
	if err := kafkax.EnsureAllTopics(ctx, brokers); err != nil {
		t.Fatalf("second EnsureAllTopics: %v", err)
	}
	conn, err := kafka.DialContext(ctx, "tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, def := range kafkatopics.All() {
		parts, err := conn.ReadPartitions(def.Name)
		if err != nil {
			t.Fatalf("read partitions of %s: %v", def.Name, err)
		}
		if len(parts) != def.Partitions {
			t.Errorf("%s: %d partitions, want %d", def.Name, len(parts), def.Partitions)
		}
	}

	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: brokers, Topic: "hf.attempts"})
	defer w.Close()
	const n = 200
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Key: []byte(fmt.Sprintf("cell-%d", i%7)), Value: []byte(fmt.Sprint(i))}
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("write: %v", err)
	}
	r := kafka.NewReader(kafkax.ReaderConfig(brokers, "test-group", "hf.attempts"))
	defer r.Close()
	seen := map[string]bool{}
	for len(seen) < n {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("fetch after %d: %v", len(seen), err)
		}
		seen[string(m.Value)] = true
		if err := r.CommitMessages(ctx, m); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
}

func TestBrokerDataSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := kafkax.StartBroker(kafkax.BrokerConfig{Listen: "127.0.0.1:0", DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	addr := b.Addr()
	if err := kafkax.EnsureAllTopics(ctx, []string{addr}); err != nil {
		t.Fatal(err)
	}
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: []string{addr}, Topic: "hf.cells"})
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("c1"), Value: []byte("persisted")}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	b.Close()

	b2, err := kafkax.StartBroker(kafkax.BrokerConfig{Listen: addr, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	r := kafka.NewReader(kafkax.ReaderConfig([]string{addr}, "", "hf.cells"))
	defer r.Close()
	found := false
	conn, err := kafka.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := conn.ReadPartitions("hf.cells")
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		pr := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{addr}, Topic: "hf.cells", Partition: p.ID, MaxWait: 100 * time.Millisecond})
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := pr.ReadMessage(pctx)
		pcancel()
		pr.Close()
		if err == nil && string(m.Value) == "persisted" {
			found = true
		}
	}
	if !found {
		t.Fatal("message written before the restart is gone")
	}
}

func TestFloorAtStart(t *testing.T) {
	starts := map[string]map[int]int64{"a": {0: 10, 1: 5, 2: 7}, "b": {0: 3}}
	committed := map[string]map[int]int64{"a": {0: 4, 1: 9, 2: -1}}
	got := kafkax.FloorAtStart(committed, starts)
	want := map[string]map[int]int64{"a": {0: 10, 1: 9, 2: 7}, "b": {0: 3}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("FloorAtStart = %v, want %v", got, want)
	}
	// Expired records are no lag: a whole expired partition (b/0: start = end)
	// is caught up, a commit below the start counts from the start.
	ends := map[string]map[int]int64{"a": {0: 12, 1: 9, 2: 7}, "b": {0: 3}}
	if n := kafkax.Lag(ends, got); n != 2 {
		t.Fatalf("lag = %d, want 2 (a/0: 10..12)", n)
	}
}
