package jsonl_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers/jsonl"
	"github.com/harnessflow/harnessflow/producers/producerstest"
	"github.com/harnessflow/harnessflow/schemas"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// lines returns the JSON forms of evs, one per element.
func lines(t *testing.T, evs []schemas.Event) []string {
	t.Helper()
	out := make([]string, len(evs))
	for i, ev := range evs {
		b, err := schemas.MarshalJSON(ev)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = string(b)
	}
	return out
}

// stored decodes every event on the raw topics with d.
func stored(t *testing.T, ctx context.Context, addr string, d *schemas.Decoder) []schemas.Event {
	t.Helper()
	var out []schemas.Event
	for _, topic := range schemas.RawTopics {
		msgs, err := producerstest.ReadTopic(ctx, addr, topic)
		if err != nil {
			t.Fatalf("read %s: %v", topic, err)
		}
		for _, m := range msgs {
			ev, err := d.Decode(ctx, m.Value)
			if err != nil {
				t.Fatalf("decode %s@%d: %v", topic, m.Offset, err)
			}
			out = append(out, ev)
		}
	}
	return out
}

func TestProduceRejectsBadLinesAndProducesTheRest(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	ctx := ctxT(t, 60*time.Second)
	good := lines(t, producerstest.Mixed(3, "p"))
	bad := `{"type": "no_such_event", "cell_id": "c"}`
	_, perr := schemas.ParseJSON([]byte(bad), schemas.DefaultLimits())
	if perr == nil {
		t.Fatal("the bad line parses")
	}
	in := strings.Join([]string{good[0], "", bad, good[1], "  ", good[2]}, "\n") + "\n"
	var stderr bytes.Buffer
	err := jsonl.Produce(ctx, jsonl.Config{Brokers: []string{b.Addr()}}, strings.NewReader(in), &stderr)
	if !errors.Is(err, jsonl.ErrRejected) {
		t.Fatalf("Produce: %v, want ErrRejected; stderr:\n%s", err, stderr.String())
	}
	want := fmt.Sprintf("line 3: %v\nproduced 3, rejected 1\n", perr)
	if stderr.String() != want {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
	if evs := stored(t, ctx, b.Addr(), &schemas.Decoder{}); len(evs) != 3 {
		t.Fatalf("%d events on the broker, want 3", len(evs))
	}
}

func TestProduceFillsEnvelope(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	ctx := ctxT(t, 60*time.Second)
	evs := producerstest.Mixed(7, "")
	for _, ev := range evs {
		ev.Header().Source = ""
	}
	cfg := jsonl.Config{Brokers: []string{b.Addr()}, Project: "acme", Source: jsonl.DefaultSource}
	var stderr bytes.Buffer
	if err := jsonl.Produce(ctx, cfg, strings.NewReader(strings.Join(lines(t, evs), "\n")), &stderr); err != nil {
		t.Fatalf("Produce: %v; stderr:\n%s", err, stderr.String())
	}
	got := stored(t, ctx, b.Addr(), &schemas.Decoder{})
	if len(got) != len(evs) {
		t.Fatalf("%d events on the broker, want %d", len(got), len(evs))
	}
	for _, ev := range got {
		if h := ev.Header(); h.Project != "acme" || h.Source != jsonl.DefaultSource {
			t.Fatalf("envelope %+v: want project acme and source %s filled in", h, jsonl.DefaultSource)
		}
	}
}

func TestProduceWithSchemaRegistry(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	ctx := ctxT(t, 60*time.Second)
	reg := producerstest.NewRegistry(t)
	evs := producerstest.Mixed(14, "p")
	cfg := jsonl.Config{Brokers: []string{b.Addr()}, SchemaRegistry: reg.URL}
	var stderr bytes.Buffer
	if err := jsonl.Produce(ctx, cfg, strings.NewReader(strings.Join(lines(t, evs), "\n")), &stderr); err != nil {
		t.Fatalf("Produce: %v; stderr:\n%s", err, stderr.String())
	}
	got := stored(t, ctx, b.Addr(), &schemas.Decoder{Registry: schemas.NewRegistry(reg.URL, nil)})
	if len(got) != len(evs) {
		t.Fatalf("%d events on the broker, want %d", len(got), len(evs))
	}
	want := map[string]string{}
	for _, l := range lines(t, evs) {
		ev, err := schemas.ParseJSON([]byte(l), schemas.DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		want[ev.Header().EventID] = l
	}
	for _, ev := range got {
		if l := lines(t, []schemas.Event{ev})[0]; l != want[ev.Header().EventID] {
			t.Fatalf("event %s: got %s, want %s", ev.Header().EventID, l, want[ev.Header().EventID])
		}
	}
	if reg.Registrations() == 0 {
		t.Fatal("nothing registered")
	}
	// Single-object readers do not read these bytes: the framing is Confluent.
	msgs, err := producerstest.ReadTopic(ctx, b.Addr(), schemas.TopicAttempts)
	if err != nil || len(msgs) == 0 {
		t.Fatalf("read %s: %d messages, %v", schemas.TopicAttempts, len(msgs), err)
	}
	if msgs[0].Value[0] != schemas.ConfluentMagic {
		t.Fatalf("value starts %#x, want the Confluent magic byte", msgs[0].Value[0])
	}
}

func TestProduceSchemaRegistryDownIsNotARejectedLine(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	ctx := ctxT(t, 60*time.Second)
	in := strings.Join(lines(t, producerstest.Mixed(3, "p")), "\n")
	cfg := jsonl.Config{Brokers: []string{b.Addr()}, SchemaRegistry: "http://127.0.0.1:1"}
	var stderr bytes.Buffer
	err := jsonl.Produce(ctx, cfg, strings.NewReader(in), &stderr)
	if err == nil || errors.Is(err, jsonl.ErrRejected) || !strings.HasPrefix(err.Error(), "line 1: ") {
		t.Fatalf("Produce with the registry down: %v, want a line 1 error that is not ErrRejected; stderr:\n%s", err, stderr.String())
	}
}

// endlessLine is a reader of one line of n 'a' bytes after '{', then rest.
type endlessLine struct {
	n    int
	rest *strings.Reader
}

func (r *endlessLine) Read(p []byte) (int, error) {
	if r.n == 0 {
		return r.rest.Read(p)
	}
	k := min(len(p), r.n)
	for i := range p[:k] {
		p[i] = 'a'
	}
	r.n -= k
	return k, nil
}

// TestProduceSkipsALineOverTheCapWithoutHoldingIt: a 256 MiB line is
// reported as over the event cap and skipped, the next line is produced,
// and the line was never held (less than 64 MiB allocated in all; reading
// it whole allocated more than 256 MiB).
func TestProduceSkipsALineOverTheCapWithoutHoldingIt(t *testing.T) {
	b := testenv.Kafka(t)
	ctx := ctxT(t, 60*time.Second)
	good := lines(t, producerstest.Mixed(1, "p"))[0]
	in := &endlessLine{n: 256 << 20, rest: strings.NewReader("\n" + good + "\n")}
	var stderr bytes.Buffer
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := jsonl.Produce(ctx, jsonl.Config{Brokers: []string{b.Addr()}}, in, &stderr)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, jsonl.ErrRejected) {
		t.Fatalf("Produce: %v, want ErrRejected; stderr:\n%s", err, stderr.String())
	}
	want := fmt.Sprintf("line 1: longer than the %d-byte event cap: skipped\nproduced 1, rejected 1\n", schemas.DefaultLimits().Event)
	if stderr.String() != want {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
		t.Errorf("allocated %d MiB while reading a 256 MiB line: it was held", alloc>>20)
	}
	if evs := stored(t, ctx, b.Addr(), &schemas.Decoder{}); len(evs) != 1 {
		t.Fatalf("%d events on the broker, want 1", len(evs))
	}
}
