package processors

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/producers/producerstest"
	"github.com/harnessflow/harnessflow/schemas"
)

// confluentMessages re-encodes the test campaign's raw messages: two of
// every three in the Confluent wire format through reg (the schemas
// registered there), the rest left single-object, so that both framings
// share the topics.
func confluentMessages(t *testing.T, reg *schemas.Registry) map[string][]kafka.Message {
	t.Helper()
	msgs, err := testCampaign().Messages()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ms := range msgs {
		for i := range ms {
			if n++; n%3 == 0 {
				continue
			}
			ev, err := schemas.Decode(ms[i].Value)
			if err != nil {
				t.Fatal(err)
			}
			if ms[i].Value, err = reg.EncodeConfluent(context.Background(), ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	return msgs
}

// withSchemaID returns a copy of a Confluent-framed value with another
// schema id.
func withSchemaID(v []byte, id uint32) []byte {
	out := append([]byte(nil), v...)
	binary.BigEndian.PutUint32(out[1:5], id)
	return out
}

// TestConfluentFramedInput: raw topics holding Confluent-framed events
// (every topic, hf.campaigns included, mixed with single-object ones)
// derive what the same campaign derives in single-object encoding. While
// the schema registry answers 503 nothing is dead-lettered and nothing is
// committed past the messages that need it; once it answers, everything is
// processed. An id the registry does not know is dead-lettered
// decode/unknown_schema_id. hf.outcomes holds single-object events only.
func TestConfluentFramedInput(t *testing.T) {
	addr := startBroker(t)
	reg := producerstest.NewRegistry(t)
	msgs := confluentMessages(t, schemas.NewRegistry(reg.URL, nil))
	var unknown kafka.Message
	for _, m := range msgs[schemas.TopicAttempts] {
		if schemas.IsConfluent(m.Value) {
			unknown = kafka.Message{Key: m.Key, Time: m.Time, Value: withSchemaID(m.Value, 99999)}
			break
		}
	}
	msgs[schemas.TopicAttempts] = append(msgs[schemas.TopicAttempts], unknown)

	var down atomic.Bool
	down.Store(true)
	reg.Fake.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if !down.Load() {
			return false
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error_code":50003,"message":"down for the test"}`))
		return true
	})
	produce(t, addr, msgs)

	cfg := testConfig(addr, "confluent")
	cfg.SchemaRegistry = reg.URL
	cfg.RetryMaxElapsed = time.Second // past it, a partition's work restarts
	pr := prometheus.NewRegistry()
	_, errc := startProc(t, cfg, WithRegisterer(pr))

	// The registry is down: the processor retries and restarts; it
	// dead-letters nothing and does not catch up.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-errc:
			t.Fatalf("processor stopped while the registry was down: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if dl := readTopic(t, addr, schemas.TopicDLQ); len(dl) != 0 {
		t.Fatalf("%d dead letters while the registry was down, want 0", len(dl))
	}
	if n, err := Lag(context.Background(), []string{addr}, "confluent"); err != nil || n == 0 {
		t.Fatalf("caught up while the registry was down: lag %d, %v", n, err)
	}
	if n := promCounter(t, pr, "hf_process_schema_registry_errors_total", nil); n == 0 {
		t.Fatal("hf_process_schema_registry_errors_total is 0 while the registry was down")
	}

	down.Store(false)
	waitCaughtUp(t, addr, "confluent", 90*time.Second, errc) // both stages

	set, _ := readDerived(t, addr)
	var dead []*schemas.Rejected
	for k, v := range set {
		if strings.HasPrefix(k, schemas.TopicDLQ+"/") {
			ev, _ := schemas.Decode(v)
			dead = append(dead, ev.(*schemas.Rejected))
			delete(set, k)
		}
	}
	if len(dead) != 1 || dead[0].Stage != schemas.StageDecode || dead[0].ReasonCode != schemas.CodeUnknownSchemaID ||
		dead[0].SourceTopic != schemas.TopicAttempts || !bytes.Equal(dead[0].Payload, unknown.Value) ||
		!strings.Contains(dead[0].Message, "unknown schema id 99999") {
		for _, d := range dead {
			t.Logf("dead letter: %s/%s %s", d.Stage, d.ReasonCode, d.Message)
		}
		t.Fatalf("%d dead letters, want the unknown schema id's alone", len(dead))
	}

	// The same campaign, single-object, through the in-process pipeline.
	l := newLocal(t, Config{MinPairs: 2})
	want := map[string][]byte{}
	for _, m := range l.runCampaign(t, testCampaign(), time.Now()) {
		ev, err := schemas.Decode(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		want[m.Topic+"/"+ev.Header().EventID] = m.Value
	}
	if len(want) == 0 {
		t.Fatal("the reference derived nothing")
	}
	diffSets(t, want, set)

	for _, m := range readTopic(t, addr, schemas.TopicOutcomes) {
		vs, _ := outcomeValues(t, m)
		for _, v := range vs {
			if len(v) < 2 || v[0] != schemas.SingleObjectMagic[0] || v[1] != schemas.SingleObjectMagic[1] {
				t.Fatalf("hf.outcomes/%d@%d holds an event that is not single-object: % x", m.Partition, m.Offset, v[:min(len(v), 8)])
			}
		}
	}
}

// TestDecodeMsgConfluentWithoutRegistry: a Confluent-framed message read
// without a schema registry is dead-lettered decode/schema_registry, naming
// the flag; with a registry that cannot be asked it is left undecided and
// the error returned (the fetch is tried again), never dead-lettered.
func TestDecodeMsgConfluentWithoutRegistry(t *testing.T) {
	ctx := context.Background()
	reg := producerstest.NewRegistry(t)
	msgs := confluentMessages(t, schemas.NewRegistry(reg.URL, nil))
	var v []byte
	for _, m := range msgs[schemas.TopicCells] {
		if schemas.IsConfluent(m.Value) {
			v = m.Value
			break
		}
	}
	lim := schemas.DefaultLimits()

	m := &inMsg{topic: schemas.TopicCells, value: v}
	if err := decodeMsg(ctx, m, lim, nil); err != nil || m.rej == nil || m.rej.stage != schemas.StageDecode ||
		m.rej.code != schemas.CodeSchemaRegistry || !strings.Contains(m.rej.msg, "--schema-registry") {
		t.Fatalf("without a registry: err %v, rejection %+v", err, m.rej)
	}

	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	m = &inMsg{topic: schemas.TopicCells, value: v}
	err := decodeMsg(ctx, m, lim, &schemas.Decoder{Registry: schemas.NewRegistry(gone.URL, nil)})
	if !errors.Is(err, schemas.ErrRegistryUnavailable) || m.rej != nil || m.ev != nil {
		t.Fatalf("registry down: err %v, rejection %+v, event %v", err, m.rej, m.ev)
	}

	m = &inMsg{topic: schemas.TopicCells, value: v}
	if err := decodeMsg(ctx, m, lim, &schemas.Decoder{Registry: schemas.NewRegistry(reg.URL, nil)}); err != nil || m.rej != nil || m.ev == nil {
		t.Fatalf("with the registry: err %v, rejection %+v", err, m.rej)
	}
	if single, _ := schemas.Encode(m.ev); !bytes.Equal(m.outcomeValue(), single) {
		t.Fatal("the outcome of a Confluent-framed event is not its single-object encoding")
	}
}
