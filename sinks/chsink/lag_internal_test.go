package chsink

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/broker"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/schemas"
)

// gateWriter writes nothing while its gate is shut: the sink reads,
// buffers and hands batches over, but commits nothing.
type gateWriter struct {
	mu   sync.Mutex
	open chan struct{}
}

func newGate() *gateWriter { return &gateWriter{open: make(chan struct{})} }

// release opens the gate (if shut); shut closes it again.
func (w *gateWriter) release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.open:
	default:
		close(w.open)
	}
}

func (w *gateWriter) shut() { w.mu.Lock(); w.open = make(chan struct{}); w.mu.Unlock() }

func (w *gateWriter) WriteBatch(ctx context.Context, table string, columns []string, data []any) error {
	w.mu.Lock()
	open := w.open
	w.mu.Unlock()
	select {
	case <-open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// attemptMessages returns n encoded task attempts, event ids from prefix.
func attemptMessages(t *testing.T, prefix string, n int) []kafka.Message {
	t.Helper()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var msgs []kafka.Message
	for i := 0; i < n; i++ {
		ev := &schemas.TaskAttempt{Envelope: schemas.Envelope{EventID: fmt.Sprintf("%s%d", prefix, i), EventTime: t0, Project: "p", Source: "s"},
			CellID: fmt.Sprintf("c%d", i%7), TaskID: "t", Cycle: 1, Attempt: 1, HarnessVersion: "h0", Status: schemas.StatusOK, Score: 0.5, SkillsLoaded: []string{}}
		v, err := schemas.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, kafka.Message{Topic: schemas.TopicAttempts, Key: []byte(ev.CellID), Value: v})
	}
	return msgs
}

func produceAttempts(t *testing.T, brokers []string, prefix string, n int) {
	t.Helper()
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: brokers})
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, attemptMessages(t, prefix, n)...); err != nil {
		t.Fatal(err)
	}
}

// runLagSink runs a sink of group over hf.attempts that writes through gate
// and polls its lag every 50 ms into reg; it stops when the test ends.
func runLagSink(t *testing.T, brokers []string, group string, gate *gateWriter, reg *prometheus.Registry) {
	t.Helper()
	s, err := New(Config{Brokers: brokers, Group: group, Topics: []string{schemas.TopicAttempts}, MaxRows: 50,
		MaxAge: 10 * time.Millisecond, SkipMigrate: true, LagInterval: 50 * time.Millisecond, RetryMaxInterval: 50 * time.Millisecond},
		WithWriter(gate), WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		gate.release()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
}

// lagByPartition gathers name's series of group from reg: partition -> lag.
func lagByPartition(t *testing.T, reg *prometheus.Registry, name, group string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["group"] == group {
				out[l["topic"]+"/"+l["partition"]] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

func total(m map[string]float64) (n float64) {
	for _, v := range m {
		n += v
	}
	return n
}

// TestCommitLagRisesAndFallsToZero: on a real broker, hf_sink_commit_lag
// is 0 on every partition of an empty topic, rises to exactly the records
// produced while the sink cannot insert (nothing is committed), and falls
// to 0 on every partition once the inserts go through and the offsets are
// committed.
func TestCommitLagRisesAndFallsToZero(t *testing.T) {
	b := testenv.Kafka(t)
	brokers := []string{b.Addr()}
	reg := prometheus.NewRegistry()
	gate := newGate()
	const group = "lag-test"
	runLagSink(t, brokers, group, gate, reg)
	var spec int
	testenv.Eventually(t, 30*time.Second, "a lag series per partition, all 0", func() bool {
		lag := lagByPartition(t, reg, "hf_sink_commit_lag", group)
		spec = len(lag)
		return spec > 1 && total(lag) == 0
	})
	const n = 300
	produceAttempts(t, brokers, "lag", n)
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("lag %d while nothing can be inserted", n), func() bool {
		return total(lagByPartition(t, reg, "hf_sink_commit_lag", group)) == n
	})
	gate.release()
	testenv.Eventually(t, 30*time.Second, "lag 0 on every partition once inserted and committed", func() bool {
		lag := lagByPartition(t, reg, "hf_sink_commit_lag", group)
		return len(lag) == spec && total(lag) == 0
	})
}

// TestCommitLagAfterBrokerRestart: the lag poll recovers from a broker
// restart: the records produced after it while the sink cannot insert show
// as lag (the gauge stood at 0 before), and it falls to 0 once they are in.
func TestCommitLagAfterBrokerRestart(t *testing.T) {
	dir := t.TempDir()
	b1 := testenv.Kafka(t, dir)
	addr := b1.Addr()
	brokers := []string{addr}
	reg := prometheus.NewRegistry()
	gate := newGate()
	gate.release()
	const group = "lag-restart"
	runLagSink(t, brokers, group, gate, reg)
	produceAttempts(t, brokers, "before", 100)
	testenv.Eventually(t, 30*time.Second, "lag 0 after the first records", func() bool {
		lag := lagByPartition(t, reg, "hf_sink_commit_lag", group)
		return len(lag) > 1 && total(lag) == 0
	})
	gate.shut()
	b1.Close()
	var b2 *broker.Broker
	var err error
	for i := 0; i < 50; i++ {
		if b2, err = broker.Start(broker.Config{Listen: addr, DataDir: dir}); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("restart broker: %v", err)
	}
	t.Cleanup(b2.Close)
	produceAttempts(t, brokers, "after", 100)
	// The restarted broker may have lost the group's last commit before its
	// close (kfake persists offsets asynchronously): then the lag is more
	// than the 100 new records. The gauge must show what the broker says.
	client := kafkax.NewClient(brokers)
	testenv.Eventually(t, 60*time.Second, "the broker's lag, at least 100, after the restart", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ends, err := kafkax.EndOffsets(ctx, client, schemas.TopicAttempts)
		if err != nil {
			return false
		}
		want, err := kafkax.CommittedLag(ctx, client, group, ends)
		if err != nil || want < 100 {
			return false
		}
		return total(lagByPartition(t, reg, "hf_sink_commit_lag", group)) == float64(want)
	})
	gate.release()
	testenv.Eventually(t, 60*time.Second, "lag 0 once inserted", func() bool {
		return total(lagByPartition(t, reg, "hf_sink_commit_lag", group)) == 0
	})
}
