package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/broker"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/schemas"
)

func TestCountRequestsObservesWithoutAnswering(t *testing.T) {
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rc := countRequests(b.Cluster())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := kafkax.EnsureAllTopics(ctx, []string{b.Addr()}, b.TopicOption()); err != nil {
		t.Fatal(err)
	}
	before := rc.snap()
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: []string{b.Addr()}})
	defer w.Close()
	for i := range 3 {
		// One message per call: a produce request each, which the broker
		// must still answer (the counter only observes).
		if err := w.WriteMessages(ctx, kafka.Message{Topic: schemas.TopicCampaigns, Value: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	r := kafka.NewReader(kafkax.ReaderConfig([]string{b.Addr()}, "", schemas.TopicCampaigns))
	defer r.Close()
	for i := range 3 {
		m, err := r.ReadMessage(ctx)
		if err != nil || len(m.Value) != 1 || m.Value[0] != byte(i) {
			t.Fatalf("read %d: %v %v", i, m.Value, err)
		}
	}
	after := rc.snap()
	if d := after["Produce"] - before["Produce"]; d != 3 {
		t.Errorf("Produce requests counted %d, want 3", d)
	}
	if after["Fetch"] < 1 || after["Metadata"] < 1 || after["CreateTopics"] < 1 {
		t.Errorf("counts %v: want Fetch, Metadata and CreateTopics", after)
	}
	if (*reqCounter)(nil).snap() != nil {
		t.Error("nil counter: want nil counts")
	}
}
