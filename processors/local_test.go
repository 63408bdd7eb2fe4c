package processors

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/producers/gen"
	"github.com/harnessflow/harnessflow/schemas"
)

// local runs both stages in one goroutine without Kafka: raw messages (in
// merge order) go through stage A; its hf.outcomes outputs go straight to
// stage B. It is the hot path of the runtime minus the network.
type local struct {
	cfg   Config
	a     *cells
	b     *pairs
	outA  sink
	outB  sink
	cache *evCache
	off   map[string]int64
	peakA int
	peakB int
	track bool // measure peak state sizes (costly)
	t     testing.TB
}

func newLocal(t testing.TB, cfg Config) *local {
	t.Helper()
	if len(cfg.Brokers) == 0 {
		cfg.Brokers = []string{"unused:9092"}
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	l := &local{cfg: cfg, off: map[string]int64{}, cache: newEvCache(), t: t}
	m := newMetrics()
	l.a = newCells(&l.cfg, m)
	l.b = newPairs(&l.cfg, m, newCampaignTable())
	return l
}

// feed processes one raw message and returns the derived messages it caused
// (dead letters of both stages, samples, round metrics; not the outcomes).
func (l *local) feed(topic string, msg kafka.Message, now time.Time, derived *[]kafka.Message) {
	if topic == schemas.TopicCampaigns {
		ev, err := schemas.Decode(msg.Value)
		if err == nil {
			l.b.camps.put(ev.(*schemas.CampaignDeclared))
		}
		return
	}
	m := &inMsg{topic: topic, offset: l.off[topic], ts: msg.Time, key: msg.Key, value: msg.Value, emit: true}
	l.off[topic]++
	decodeMsg(context.Background(), m, l.cfg.Limits, nil)
	l.outA.reset()
	l.a.process(m, true, &l.outA, now)
	l.route(now, derived)
}

// end admits the held cell_finished events, as an idle partition does once
// their hold is over, and routes what that derives.
func (l *local) end(now time.Time, derived *[]kafka.Message) {
	l.outA.reset()
	l.a.drain(&l.outA, now)
	l.route(now, derived)
}

// route sends stage A's outputs on: hf.outcomes through stage B, the rest
// to derived.
func (l *local) route(now time.Time, derived *[]kafka.Message) {
	l.cache.put(l.outA.admitted) // as startFlush does
	for _, o := range l.outA.msgs {
		if o.Topic != schemas.TopicOutcomes {
			*derived = append(*derived, o)
			continue
		}
		vs, ts := outcomeValues(l.t, o)
		for i, v := range vs {
			om := &inMsg{topic: o.Topic, offset: l.off[o.Topic], ts: ts[i], key: o.Key, value: v, sub: i, more: i < len(vs)-1}
			decodeAll(context.Background(), []*inMsg{om}, l.cfg.Limits, l.cache, nil) // as stage B's fetcher does
			l.outB.reset()
			l.b.process(om, true, &l.outB, now)
			*derived = append(*derived, l.outB.msgs...)
		}
		l.off[o.Topic]++
	}
	if !l.track {
		return
	}
	if n := l.a.size(); n > l.peakA {
		l.peakA = n
	}
	if n := l.b.stateSize(); n > l.peakB {
		l.peakB = n
	}
}

// runCampaign feeds every record of c in production order.
func (l *local) runCampaign(t testing.TB, c *gen.Campaign, now time.Time) []kafka.Message {
	t.Helper()
	var derived []kafka.Message
	for _, r := range c.Records {
		b, err := schemas.Encode(r.Event)
		if err != nil {
			t.Fatalf("encode %s: %v", r.Event.Type(), err)
		}
		l.feed(r.Topic, kafka.Message{Key: []byte(r.Event.PartitionKey()), Value: b, Time: r.Time}, now, &derived)
	}
	l.end(now, &derived)
	return derived
}

func countByTopic(msgs []kafka.Message) map[string]int {
	out := map[string]int{}
	for _, m := range msgs {
		out[m.Topic]++
	}
	return out
}

func TestLocalPipelineProducesSamplesAndRoundMetrics(t *testing.T) {
	l := newLocal(t, Config{MinPairs: 2})
	c := gen.Generate(gen.Config{Seed: 7})
	derived := l.runCampaign(t, c, time.Now())
	n := countByTopic(derived)
	if n[schemas.TopicDLQ] != 0 {
		for _, m := range derived {
			if m.Topic == schemas.TopicDLQ {
				ev, _ := schemas.Decode(m.Value)
				t.Errorf("unexpected dead letter: %+v", ev)
			}
		}
	}
	// 2 evolvers × 3 updates, 3 cells × 3 rounds.
	if n[schemas.TopicSamples] != 6 {
		t.Errorf("samples = %d, want 6 (one per update)", n[schemas.TopicSamples])
	}
	if n[schemas.TopicRoundMetrics] != 9 {
		t.Errorf("round metrics = %d, want 9 (3 cells x 3 rounds)", n[schemas.TopicRoundMetrics])
	}
	if l.a.size() != 0 && l.cfg.Grace > time.Hour {
		t.Logf("cells still held: %d", l.a.size())
	}
}

// TestStateStaysFlat processes 10x more finished cells and checks that the
// peak state (stage A cells + pending, stage B pairer sizes) does not grow:
// finished cells and done pairers are evicted after the grace period.
func TestStateStaysFlat(t *testing.T) {
	run := func(campaigns int) (int, int) {
		l := newLocal(t, Config{MinPairs: 2, Grace: time.Minute})
		l.track = true
		base := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
		now := time.Now()
		samples := 0
		for i := 0; i < campaigns; i++ {
			c := gen.Generate(gen.Config{Seed: int64(i + 1), Campaign: fmt.Sprintf("c%04d", i), Start: base.Add(time.Duration(i) * time.Hour)})
			samples += countByTopic(l.runCampaign(t, c, now))[schemas.TopicSamples]
		}
		if samples != 6*campaigns {
			t.Fatalf("%d campaigns: %d samples, want %d", campaigns, samples, 6*campaigns)
		}
		return l.peakA, l.peakB
	}
	a1, b1 := run(5)
	a10, b10 := run(50)
	t.Logf("peak state: 5 campaigns A=%d B=%d; 50 campaigns A=%d B=%d", a1, b1, a10, b10)
	if a1 == 0 || b1 == 0 {
		t.Fatalf("no state measured (A=%d, B=%d)", a1, b1)
	}
	if a10 > a1+a1/4 || b10 > b1+b1/4 {
		t.Errorf("state grew with 10x more finished cells: A %d -> %d, B %d -> %d", a1, a10, b1, b10)
	}
}

// hotPathInput is BenchmarkHotPath's stream: a task_attempt-heavy campaign's
// raw messages in production order.
type hotPathMsg struct {
	topic string
	msg   kafka.Message
}

func hotPathInput(b *testing.B) (msgs []hotPathMsg, attempts int, bytes int64) {
	c := gen.Generate(gen.Config{Seed: 3, Agents: 4, Evolvers: 3, Rounds: 10, TasksPerRound: 50})
	for _, r := range c.Records {
		v, err := schemas.Encode(r.Event)
		if err != nil {
			b.Fatal(err)
		}
		if r.Topic == schemas.TopicAttempts {
			attempts++
		}
		bytes += int64(len(v))
		msgs = append(msgs, hotPathMsg{r.Topic, kafka.Message{Key: []byte(r.Event.PartitionKey()), Value: v, Time: r.Time}})
	}
	return msgs, attempts, bytes
}

// BenchmarkHotPath measures decode -> validate -> re-key -> decode -> score
// per raw event, on one core, with task_attempt-heavy campaigns.
func BenchmarkHotPath(b *testing.B) {
	msgs, attempts, bytes := hotPathInput(b)
	b.ReportAllocs()
	b.SetBytes(bytes)
	b.ResetTimer()
	now := time.Now()
	var derived []kafka.Message
	var dlq int
	for i := 0; i < b.N; i++ {
		l := newLocal(b, Config{MinPairs: 2})
		derived = derived[:0]
		for _, m := range msgs {
			l.feed(m.topic, m.msg, now, &derived)
		}
		dlq += countByTopic(derived)[schemas.TopicDLQ]
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(len(msgs)*b.N)/sec, "events/s")
	b.ReportMetric(float64(attempts*b.N)/sec, "attempts/s")
	b.ReportMetric(float64(dlq)/float64(b.N), "dlq/op")
}

// BenchmarkHotPathAttempts runs BenchmarkHotPath's stream but reports the
// rate of its task_attempt events alone: the wall time spent feeding them
// (decode, validate, re-key, decode, score, and the outputs they trigger),
// excluding the other event types. This is the figure of the hot-path goal
// (task_attempt events/s per core).
func BenchmarkHotPathAttempts(b *testing.B) {
	msgs, attempts, _ := hotPathInput(b)
	b.ReportAllocs()
	b.ResetTimer()
	now := time.Now()
	var derived []kafka.Message
	var inAttempts time.Duration
	for i := 0; i < b.N; i++ {
		l := newLocal(b, Config{MinPairs: 2})
		derived = derived[:0]
		for _, m := range msgs {
			if m.topic != schemas.TopicAttempts {
				l.feed(m.topic, m.msg, now, &derived)
				continue
			}
			t0 := time.Now()
			l.feed(m.topic, m.msg, now, &derived)
			inAttempts += time.Since(t0)
		}
	}
	if inAttempts <= 0 {
		b.Fatal("no time measured in task_attempt events")
	}
	b.ReportMetric(float64(attempts*b.N)/inAttempts.Seconds(), "attempt-only/s")
	b.ReportMetric(float64(inAttempts.Nanoseconds())/float64(attempts*b.N), "ns/attempt")
}
