package main

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers/producerstest"
	"github.com/harnessflow/harnessflow/schemas"
)

// TestConsumeOutcomes: consume prints the events of hf.outcomes, the
// processors' internal topic, one line each, whether a record is a batch
// (schemas.OutcomeBatchMagic, built here byte by byte as docs/design.md
// describes it) or a single event; --max may stop inside a batch; a batch
// that does not parse is reported with its coordinates, and a topic of
// nothing but such records exits 1.
func TestConsumeOutcomes(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	ctx := prodCtx(t, 60*time.Second)
	var evs []schemas.Event
	var enc [][]byte
	for i := 0; i < 4; i++ {
		ev := producerstest.TaskAttempt(i, "p")
		v, err := schemas.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		evs, enc = append(evs, ev), append(enc, v)
	}
	// "HFB\x01", then per event uvarint(len) varint(unix ms) event.
	batch := []byte{'H', 'F', 'B', 0x01}
	for i, v := range enc[:3] {
		batch = schemas.AppendOutcome(batch, time.UnixMilli(1_700_000_000_000+int64(i)), v)
	}
	if len(enc[0]) < 128 {
		// The first event's length is one uvarint byte, its timestamp 6 zig-zag bytes.
		if batch[4] != byte(len(enc[0])) || string(batch[11:11+len(enc[0])]) != string(enc[0]) {
			t.Fatalf("batch layout: % x", batch[:16])
		}
	}
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: []string{b.Addr()}, Topic: schemas.TopicOutcomes})
	defer w.Close()
	if err := w.WriteMessages(ctx,
		kafka.Message{Key: []byte("k"), Value: batch},
		kafka.Message{Key: []byte("k"), Value: enc[3]},
		kafka.Message{Key: []byte("k"), Value: []byte("HFB\x01\x7f\x02x")}, // 127 bytes announced, 1 there
	); err != nil {
		t.Fatal(err)
	}
	want := prodJSONL(t, evs)
	sort.Strings(want)
	code, out, stderr := prodRunCLI(t, ctx, "", "consume", "--brokers", b.Addr(), "--topic", schemas.TopicOutcomes,
		"--from-beginning", "--idle-timeout", "2s")
	got := consumeLines(out)
	sort.Strings(got)
	if code != 0 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("exit %d, printed:\n%s\nwant:\n%s\nstderr:\n%s", code, out, strings.Join(want, "\n"), stderr)
	}
	if !strings.Contains(stderr, "hf.outcomes/") || !strings.Contains(stderr, "overruns the record") || strings.Count(stderr, "cannot decode") != 1 {
		t.Fatalf("the damaged batch is not reported once: %s", stderr)
	}
	code, out, _ = prodRunCLI(t, ctx, "", "consume", "--brokers", b.Addr(), "--topic", schemas.TopicOutcomes,
		"--from-beginning", "--idle-timeout", "2s", "--max", "2")
	if lines := consumeLines(out); code != 0 || len(lines) != 2 {
		t.Fatalf("--max 2 inside a batch: exit %d, %d lines", code, len(lines))
	}

	// Nothing but a damaged batch: nothing decoded, exit 1.
	b2 := testenv.Kafka(t)
	w2 := kafkax.NewWriter(kafkax.WriterConfig{Brokers: []string{b2.Addr()}, Topic: schemas.TopicOutcomes})
	defer w2.Close()
	if err := w2.WriteMessages(ctx, kafka.Message{Key: []byte("k"), Value: []byte("HFB\x01")}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = prodRunCLI(t, ctx, "", "consume", "--brokers", b2.Addr(), "--topic", schemas.TopicOutcomes,
		"--from-beginning", "--idle-timeout", "2s")
	if code != 1 || out != "" || !strings.Contains(stderr, "no event") {
		t.Fatalf("only a damaged batch: exit %d, stdout %q, stderr %s", code, out, stderr)
	}
}
