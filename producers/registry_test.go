package producers_test

import (
	"bytes"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/producers/producerstest"
	"github.com/harnessflow/harnessflow/schemas"
)

// produceAll emits evs one by one through a producer made with opts and
// closes it; it returns every message then on the raw topics.
func produceAll(t *testing.T, evs []schemas.Event, opts ...producers.Option) []kafka.Message {
	t.Helper()
	b := testenv.Kafka(t)
	ctx := ctxT(t, 60*time.Second)
	p, err := producers.New(producers.Config{Brokers: []string{b.Addr()}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if err := p.Emit(ctx, ev); err != nil {
			t.Fatalf("emit %s: %v", ev.Header().EventID, err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	var msgs []kafka.Message
	for _, topic := range schemas.RawTopics {
		m, err := producerstest.ReadTopic(ctx, b.Addr(), topic)
		if err != nil {
			t.Fatalf("read %s: %v", topic, err)
		}
		msgs = append(msgs, m...)
	}
	if len(msgs) != len(evs) {
		t.Fatalf("%d messages on the raw topics, want %d", len(msgs), len(evs))
	}
	return msgs
}

func TestWithSchemaRegistryWritesConfluentFraming(t *testing.T) {
	t.Parallel()
	reg := producerstest.NewRegistry(t)
	evs := producerstest.Mixed(70, "proj")
	msgs := produceAll(t, evs, producers.WithSchemaRegistry(schemas.NewRegistry(reg.URL, nil)))
	// A reader with its own client of the same registry: it learns the
	// writer schemas by id.
	d := &schemas.Decoder{Registry: schemas.NewRegistry(reg.URL, nil)}
	ctx := ctxT(t, 30*time.Second)
	got := map[string]schemas.Event{}
	for _, m := range msgs {
		if len(m.Value) < 5 || m.Value[0] != schemas.ConfluentMagic {
			t.Fatalf("%s@%d: value starts % x, want the Confluent frame (0x00, schema id)", m.Topic, m.Offset, m.Value[:min(len(m.Value), 5)])
		}
		if _, err := schemas.Decode(m.Value); err == nil {
			t.Fatalf("%s@%d: Confluent bytes decode as single-object", m.Topic, m.Offset)
		}
		ev, err := d.Decode(ctx, m.Value)
		if err != nil {
			t.Fatalf("decode %s@%d: %v", m.Topic, m.Offset, err)
		}
		if string(m.Key) != ev.PartitionKey() {
			t.Errorf("%s: key %q, want %q", ev.Header().EventID, m.Key, ev.PartitionKey())
		}
		got[ev.Header().EventID] = ev
	}
	for _, ev := range evs {
		g, ok := got[ev.Header().EventID]
		if !ok {
			t.Fatalf("event %s missing", ev.Header().EventID)
		}
		if jsonForm(t, g) != jsonForm(t, ev) {
			t.Fatalf("event %s changed:\n got %s\nwant %s", ev.Header().EventID, jsonForm(t, g), jsonForm(t, ev))
		}
	}
	// One registration per event type: the ids are cached.
	if n := reg.Registrations(); n != len(producerstest.RawTypes) {
		t.Errorf("%d registrations, want %d (one per type)", n, len(producerstest.RawTypes))
	}
}

func TestWithoutSchemaRegistryWritesSingleObject(t *testing.T) {
	t.Parallel()
	evs := producerstest.Mixed(14, "proj")
	msgs := produceAll(t, evs)
	want := map[string][]byte{}
	for _, ev := range evs {
		b, err := schemas.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		want[ev.Header().EventID] = b
	}
	for _, m := range msgs {
		ev, err := schemas.Decode(m.Value)
		if err != nil {
			t.Fatalf("decode %s@%d: %v", m.Topic, m.Offset, err)
		}
		if !bytes.Equal(m.Value, want[ev.Header().EventID]) {
			t.Fatalf("%s: value is not the single-object encoding of its event", ev.Header().EventID)
		}
	}
}

func TestSchemaRegistryDownIsNotAnInvalidEvent(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	ctx := ctxT(t, 30*time.Second)
	// No broker is contacted before the first batch, and nothing is queued.
	p, err := producers.New(producers.Config{Brokers: []string{"127.0.0.1:1"}}, producers.WithSchemaRegistry(schemas.NewRegistry(url, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	err = p.Emit(ctx, producerstest.TaskAttempt(1, "proj"))
	if !errors.Is(err, producers.ErrSchemaRegistry) || errors.Is(err, producers.ErrInvalidEvent) {
		t.Fatalf("emit with the registry down: %v, want ErrSchemaRegistry and not ErrInvalidEvent", err)
	}
	// An invalid event is still an invalid event.
	bad := producerstest.TaskAttempt(2, "proj")
	bad.Status = "exploded"
	if err := p.Emit(ctx, bad); !errors.Is(err, producers.ErrInvalidEvent) {
		t.Fatalf("emit invalid: %v, want ErrInvalidEvent", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
}
