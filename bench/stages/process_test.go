package stages

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/harnessflow/harnessflow/internal/broker"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/testenv"
)

// startBroker starts an embedded broker with every topic, closed at the
// test's end, and returns its address.
func startBroker(t *testing.T) string {
	t.Helper()
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0",
		Opts: []kfake.Opt{kfake.GroupMinSessionTimeout(100 * time.Millisecond)}})
	if err != nil {
		t.Fatalf("start broker: %v", err)
	}
	t.Cleanup(b.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafkax.EnsureAllTopics(ctx, []string{b.Addr()}, b.TopicOption()); err != nil {
		t.Fatalf("create topics: %v", err)
	}
	return b.Addr()
}

// BenchmarkProcess runs Process (the `harnessflow bench process`
// measurement) against an embedded broker and reports both rates and their
// ratio.
func BenchmarkProcess(b *testing.B) {
	bk, err := broker.Start(broker.Config{Listen: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	defer bk.Close()
	if err := kafkax.EnsureAllTopics(context.Background(), []string{bk.Addr()}, bk.TopicOption()); err != nil {
		b.Fatal(err)
	}
	var raw, proc, relay float64
	for i := 0; i < b.N; i++ {
		res, err := Process(context.Background(), ProcessConfig{Brokers: []string{bk.Addr()}, Agents: 6, Rounds: 10, Tasks: 100, Seed: int64(i + 1), Relay: true})
		if err != nil {
			b.Fatal(err)
		}
		raw, proc, relay = res.RawRate(), res.ProcessRate(), res.RelayRate()
	}
	b.ReportMetric(raw, "raw-events/s")
	b.ReportMetric(proc, "process-events/s")
	b.ReportMetric(proc/raw, "ratio")
	b.ReportMetric(relay/raw, "relay-ratio")
}

// TestProcessRelayFloor runs Process with the relay floor three times on one
// broker, the last packing 7 messages per record: each run relays and reads
// back exactly its own records (it returns only once all are read back, and
// a later run must not count an earlier one's), and the rates are positive.
func TestProcessRelayFloor(t *testing.T) {
	addr := startBroker(t)
	ctx, cancel := testenv.Context(t)
	defer cancel()
	client := kafkax.NewClient([]string{addr})
	var total int64
	for run := 1; run <= 3; run++ {
		k := 1
		if run == 3 {
			k = 7 // 7 raw messages per relayed record
		}
		res, err := Process(ctx, ProcessConfig{Brokers: []string{addr}, Agents: 2, Rounds: 3, Tasks: 20, Seed: int64(run), Relay: true, RelayBatch: k})
		if err != nil {
			t.Fatal(err)
		}
		if res.Events == 0 || res.Relay <= 0 || !(res.RelayRate() > 0) || !(res.RawRate() > 0) || !(res.ProcessRate() > 0) {
			t.Fatalf("run %d: result %+v: relay %.0f/s, raw %.0f/s, process %.0f/s", run, res, res.RelayRate(), res.RawRate(), res.ProcessRate())
		}
		total += relayRecords(res.Events, k) // each run relays every raw event, earlier runs' included
		ends, err := kafkax.EndOffsets(ctx, client, relayTopic)
		if err != nil {
			t.Fatal(err)
		}
		var relayed int64
		for _, e := range ends[relayTopic] {
			relayed += e
		}
		if relayed != total {
			t.Fatalf("run %d: scratch topic holds %d messages, want %d", run, relayed, total)
		}
	}
}

// TestProcessErrorsAreFailed: an error of the measured run (here: no broker
// listening, retried until the context ends) wraps ErrFailed, keeping its
// text.
func TestProcessErrorsAreFailed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := Process(ctx, ProcessConfig{Brokers: []string{"127.0.0.1:1"}, Agents: 1, Rounds: 1, Tasks: 1})
	if err == nil || !errors.Is(err, ErrFailed) || err.Error() == ErrFailed.Error() {
		t.Fatalf("err %v: want the run's own error, wrapping ErrFailed", err)
	}
}
