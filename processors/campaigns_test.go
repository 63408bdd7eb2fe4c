package processors

import (
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/schemas"
)

// TestMalformedCampaignDeadLetteredOnce: a malformed hf.campaigns record is
// dead-lettered (hf.dlq, stage decode, the source coordinates), and only
// once: a restarted processor reads the topic whole again but does not write
// the dead letter again; a new bad record after the restart is
// dead-lettered. Before, it was only logged, at every start.
func TestMalformedCampaignDeadLetteredOnce(t *testing.T) {
	addr := startBroker(t)
	key := []byte("camp")
	produce(t, addr, map[string][]kafka.Message{schemas.TopicCampaigns: {{Key: key, Value: []byte("{not a declaration")}}})

	cfg := testConfig(addr, "campaigns-dlq")
	waitDLQ := func(n int) []*schemas.Rejected {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var out []*schemas.Rejected
			for _, m := range readTopic(t, addr, schemas.TopicDLQ) {
				ev, err := schemas.Decode(m.Value)
				if err != nil {
					t.Fatalf("dead letter does not decode: %v", err)
				}
				out = append(out, ev.(*schemas.Rejected))
			}
			if len(out) >= n || time.Now().After(deadline) {
				return out
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	stop, _ := startProc(t, cfg)
	got := waitDLQ(1)
	if len(got) != 1 {
		t.Fatalf("%d dead letters for one malformed declaration, want 1", len(got))
	}
	r := got[0]
	if r.SourceTopic != schemas.TopicCampaigns || r.Offset != 0 || r.Stage != schemas.StageDecode || r.Message == "" {
		t.Errorf("dead letter: topic %s offset %d stage %s code %s message %q", r.SourceTopic, r.Offset, r.Stage, r.ReasonCode, r.Message)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// A restart reads hf.campaigns from its start again. A second bad
	// record on the same partition is processed after the first is read
	// again: once its dead letter is there, the first had its chance.
	stop, _ = startProc(t, cfg)
	produce(t, addr, map[string][]kafka.Message{schemas.TopicCampaigns: {{Key: key, Value: []byte("also not one")}}})
	// The first record is read again before the second (one partition),
	// so a second dead letter of it would be written no later than the
	// second record's: two dead letters, one per offset, is the answer.
	got = waitDLQ(2)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	offs := map[int64]int{}
	for _, r := range got {
		offs[r.Offset]++
	}
	if len(got) != 2 || offs[0] != 1 || offs[1] != 1 {
		t.Errorf("after a restart: %d dead letters by source offset %v, want one each of offsets 0 and 1", len(got), offs)
	}
}
