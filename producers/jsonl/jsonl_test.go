package jsonl_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
