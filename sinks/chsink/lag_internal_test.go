package chsink

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/schemas"
)

// gateWriter writes nothing until open is closed: the sink reads, buffers
// and hands batches over, but commits nothing while the gate is shut.
type gateWriter struct{ open chan struct{} }

func (w *gateWriter) WriteBatch(ctx context.Context, table string, columns []string, data []any) error {
	select {
	case <-w.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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
	gate := &gateWriter{open: make(chan struct{})}
	const group = "lag-test"
	s, err := New(Config{Brokers: brokers, Group: group, Topics: []string{schemas.TopicAttempts}, MaxRows: 50,
		MaxAge: 10 * time.Millisecond, SkipMigrate: true, LagInterval: 50 * time.Millisecond, RetryMaxInterval: 50 * time.Millisecond},
		WithWriter(gate), WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	var spec int
	testenv.Eventually(t, 30*time.Second, "a lag series per partition, all 0", func() bool {
		lag := lagByPartition(t, reg, "hf_sink_commit_lag", group)
		spec = len(lag)
		return spec > 1 && total(lag) == 0
	})

	const n = 300
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: brokers})
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var msgs []kafka.Message
	for i := 0; i < n; i++ {
		ev := &schemas.TaskAttempt{Envelope: schemas.Envelope{EventID: fmt.Sprintf("lag%d", i), EventTime: t0, Project: "p", Source: "s"},
			CellID: fmt.Sprintf("c%d", i%7), TaskID: "t", Cycle: 1, Attempt: 1, HarnessVersion: "h0", Status: schemas.StatusOK, Score: 0.5, SkillsLoaded: []string{}}
		v, err := schemas.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, kafka.Message{Topic: schemas.TopicAttempts, Key: []byte(ev.CellID), Value: v})
	}
	if err := w.WriteMessages(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	w.Close()
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("lag %d while nothing can be inserted", n), func() bool {
		return total(lagByPartition(t, reg, "hf_sink_commit_lag", group)) == n
	})
	close(gate.open)
	testenv.Eventually(t, 30*time.Second, "lag 0 on every partition once inserted and committed", func() bool {
		lag := lagByPartition(t, reg, "hf_sink_commit_lag", group)
		return len(lag) == spec && total(lag) == 0
	})
}
