package kafkax_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/broker"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/harnessflow/harnessflow/infra/kafkatopics"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/testenv"
)

func TestEnsureTopicsIdempotentAndRoundTrip(t *testing.T) {
	b := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	brokers := []string{b.Addr()}
	// A second application changes nothing and does not fail.
	if err := kafkax.EnsureAllTopics(ctx, brokers, b.TopicOption()); err != nil {
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
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	addr := b.Addr()
	if err := kafkax.EnsureAllTopics(ctx, []string{addr}, b.TopicOption()); err != nil {
		t.Fatal(err)
	}
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: []string{addr}, Topic: "hf.cells"})
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("c1"), Value: []byte("persisted")}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	b.Close()

	b2, err := broker.Start(broker.Config{Listen: addr, DataDir: dir})
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

// TestReaderKeepsItsConnectionWhenTheBrokerAnswersLate: a reader built from
// ReaderConfig polls an idle partition through a broker that answers each
// fetch brokerLag later than asked (a loaded machine). kafka-go drops the
// connection when an answer misses the quarter of MaxWait it keeps for
// itself; with the old 100 ms (a 25 ms margin) this reader redialled on
// every poll, each dial costing the broker a connection, ApiVersions,
// Metadata and ListOffsets.
func TestReaderKeepsItsConnectionWhenTheBrokerAnswersLate(t *testing.T) {
	// brokerLag is the fault this test injects: how late the broker is,
	// not a wait for anything.
	const brokerLag = 40 * time.Millisecond
	const polls = 6
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Opts: []kfake.Opt{kfake.SeedTopics(1, "idle")}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var fetches atomic.Int64
	reached := make(chan struct{})
	// kfake arms a parked fetch's timer after the control functions
	// return, so the lag adds to the broker's wait. Not handled: the
	// function stays and the broker answers.
	b.Cluster().ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		if fetches.Add(1) == polls {
			close(reached)
		}
		time.Sleep(brokerLag)
		return nil, nil, false
	})
	r := kafka.NewReader(kafkax.ReaderConfig([]string{b.Addr()}, "", "idle"))
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	fetched := make(chan error, 1)
	go func() {
		_, err := r.FetchMessage(ctx)
		fetched <- err
	}()
	select {
	case <-reached:
	case err := <-fetched:
		t.Fatalf("FetchMessage on an empty topic returned: %v", err)
	case <-time.After(time.Minute):
		t.Fatalf("only %d fetches reached the broker in a minute", fetches.Load())
	}
	cancel()
	if err := <-fetched; err == nil {
		t.Fatal("fetched a message from an empty topic")
	}
	// One dial for all the polls; a reader that redials on each poll dials
	// about as often as it fetches.
	if st := r.Stats(); st.Dials > 2 {
		t.Fatalf("%d fetches at the broker took %d dials (%d reader errors); want one connection (a redial means an answer missed kafka-go's deadline)",
			fetches.Load(), st.Dials, st.Errors)
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

// TestReadToEnd: every message of a topic's partitions, once each, up to
// the end offsets read at the start; an error of fn stops the read and is
// returned.
func TestReadToEnd(t *testing.T) {
	b := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	brokers := []string{b.Addr()}
	const topic = "hf.samples"
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: brokers, Topic: topic})
	defer w.Close()
	const n = 120
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Key: []byte(fmt.Sprintf("k-%d", i%11)), Value: []byte(fmt.Sprint(i))}
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	if err := kafkax.ReadToEnd(ctx, brokers, func(m kafka.Message) error { seen[string(m.Value)]++; return nil }, topic); err != nil {
		t.Fatal(err)
	}
	if len(seen) != n {
		t.Fatalf("read %d distinct messages, want %d", len(seen), n)
	}
	for v, c := range seen {
		if c != 1 {
			t.Fatalf("message %s read %d times", v, c)
		}
	}
	stop := errors.New("enough")
	calls := 0
	err := kafkax.ReadToEnd(ctx, brokers, func(kafka.Message) error { calls++; return stop }, topic)
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("fn's error: %v after %d calls, want it after 1", err, calls)
	}
}
