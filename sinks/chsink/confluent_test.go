package chsink_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers/producerstest"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/sinks/chsink"
)

// TestSinkDecodesConfluentFraming: Confluent-framed raw events (written
// through a schema registry speaking the REST API) land in their tables
// like single-object ones. While the registry answers 503 the sink rejects
// nothing and waits; once it answers, every row arrives. An id the registry
// does not know is a rejected_events row decode/unknown_schema_id; a sink
// without --schema-registry rejects Confluent-framed messages
// decode/schema_registry.
func TestSinkDecodesConfluentFraming(t *testing.T) {
	broker := testenv.Kafka(t)
	ch := testenv.ClickHouse(t)
	brokers := []string{broker.Addr()}
	reg := producerstest.NewRegistry(t)
	enc := schemas.NewRegistry(reg.URL, nil)
	ctx, cancel := testenv.Context(t)
	defer cancel()

	evs := attempts(0, 40)
	var msgs []kafka.Message
	for i, ev := range evs {
		var b []byte
		var err error
		if i%4 == 3 {
			b, err = schemas.Encode(ev) // single-object beside them
		} else {
			b, err = enc.EncodeConfluent(ctx, ev)
		}
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, kafka.Message{Topic: schemas.TopicAttempts, Key: []byte(ev.PartitionKey()), Value: b})
	}
	unknown := append([]byte(nil), msgs[0].Value...)
	binary.BigEndian.PutUint32(unknown[1:5], 99999)
	msgs = append(msgs, kafka.Message{Topic: schemas.TopicAttempts, Key: []byte("unknown-id"), Value: unknown})
	confluent := 0
	for _, m := range msgs {
		if schemas.IsConfluent(m.Value) {
			confluent++
		}
	}

	var down atomic.Bool
	down.Store(true)
	reg.Fake.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if !down.Load() {
			return false
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	})
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: brokers})
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	w.Close()

	pr := prometheus.NewRegistry()
	s, err := chsink.New(chsink.Config{Brokers: brokers, ClickHouse: ch.Addr, Database: ch.Database, Group: "confluent",
		MaxAge: 50 * time.Millisecond, RetryMaxInterval: 100 * time.Millisecond, SchemaRegistry: reg.URL},
		chsink.WithRegisterer(pr))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("sink: %v", err)
		}
	}()

	testenv.WaitFor(t, 60*time.Second, "the sink to retry the registry", func() (bool, string) {
		n := counterValue(t, pr, "hf_sink_schema_registry_errors_total")
		return n >= 3, fmt.Sprintf("%v retries, stats %+v", n, s.Stats())
	})
	if st := s.Stats(); st.Rejected != 0 {
		t.Fatalf("the sink rejected %d messages while the registry was down", st.Rejected)
	}
	down.Store(false)
	testenv.WaitFor(t, 60*time.Second, "every attempt in ClickHouse", func() (bool, string) {
		n, err := count(ch.Conn, "SELECT count() FROM task_attempts FINAL")
		return err == nil && n == uint64(len(evs)), fmt.Sprintf("%d rows, err %v, stats %+v", n, err, s.Stats())
	})
	testenv.WaitFor(t, 30*time.Second, "the unknown id's rejection", func() (bool, string) {
		n, err := count(ch.Conn, "SELECT count() FROM rejected_events FINAL")
		return err == nil && n >= 1, fmt.Sprintf("%d rows, err %v", n, err)
	})
	_, rows, err := chx.QueryStrings(ctx, ch.Conn, "SELECT stage, reason_code, source_topic, message FROM rejected_events FINAL")
	if err != nil || len(rows) != 1 || rows[0][0] != schemas.StageDecode || rows[0][1] != schemas.CodeUnknownSchemaID ||
		rows[0][2] != schemas.TopicAttempts {
		t.Fatalf("rejections %v (%v), want the unknown schema id's alone", rows, err)
	}

	// Without a registry, the Confluent-framed messages are rejected
	// decode/schema_registry, saying which flag is missing.
	s2, err := chsink.New(chsink.Config{Brokers: brokers, ClickHouse: ch.Addr, Database: ch.Database, Group: "no-registry",
		MaxAge: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx2, stop2 := context.WithCancel(context.Background())
	done2 := make(chan error, 1)
	go func() { done2 <- s2.Run(ctx2) }()
	testenv.WaitFor(t, 60*time.Second, "the registry-less sink's rejections", func() (bool, string) {
		n, err := count(ch.Conn, "SELECT count() FROM rejected_events FINAL WHERE reason_code = 'schema_registry' AND position(message, '--schema-registry') > 0")
		return err == nil && n == uint64(confluent), fmt.Sprintf("%d rows, err %v, stats %+v", n, err, s2.Stats())
	})
	stop2()
	if err := <-done2; err != nil {
		t.Errorf("registry-less sink: %v", err)
	}
}

// counterValue is the value of the counter or gauge name in reg (0 when
// absent).
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			if g := mf.GetMetric()[0].GetGauge(); g != nil {
				return g.GetValue()
			}
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}
