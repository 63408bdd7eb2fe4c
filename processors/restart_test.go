package processors

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/producers/gen"
	"github.com/harnessflow/harnessflow/schemas"
)

// TestRestartInAnotherMergeOrderLosesNothing is stage A across a restart
// whose merge order differs from the first run's, as it does after a broker
// restart or a rebalance: the first incarnation processes one interleaving
// of the raw topics and commits where it stops (each topic capped at its
// oldest message still waiting in memory, as startFlush does); the second
// rebuilds from the log start in
// another interleaving, emitting only from the committed offsets on. Between
// them they must admit every event an uninterrupted run admits.
//
// The cases this pins down, both found by the chaos campaign's broker
// restart: (1) an attempt past the committed offset that waits for its
// version, released by the update that introduced it, which is below the
// committed offset (the first incarnation had merged the update before the
// attempt): the update's "already emitted" decided for the attempt too;
// (2) an event that waited in the pending buffer when its offset was
// committed: the next incarnation met it after what it waited for and
// admitted it as already emitted. Either way its outcome was never
// written.
func TestRestartInAnotherMergeOrderLosesNothing(t *testing.T) {
	c := gen.Generate(gen.Config{Seed: 7})
	recs := encodeRecords(t, c)
	logs := map[string][]rec{}
	var topics []string
	for _, r := range recs {
		if r.topic == schemas.TopicCampaigns {
			continue
		}
		if _, ok := logs[r.topic]; !ok {
			topics = append(topics, r.topic)
		}
		logs[r.topic] = append(logs[r.topic], r)
	}
	cfg := Config{Brokers: []string{"unused:9092"}, MinPairs: 2,
		// Random interleavings ignore time: nothing may time out or be
		// evicted because of the order alone.
		PendingTimeout: 1000 * time.Hour, Grace: 1000 * time.Hour, FinishHold: time.Second}
	cfg.setDefaults()
	now := time.Now()

	// run processes the messages of order (each topic in log order) and
	// returns the admitted event ids it emitted and how far it consumed
	// each topic. committed nil: emit everything.
	run := func(order []string, committed map[string]int64, stopAfter int, end bool) (map[string]bool, map[string]int64, *cells) {
		st := newCells(&cfg, newMetrics())
		next := map[string]int64{}
		got := map[string]bool{}
		var out sink
		collect := func() {
			for _, o := range out.msgs {
				if o.Topic != schemas.TopicOutcomes {
					continue
				}
				vs, _ := outcomeValues(t, o)
				for _, v := range vs {
					ev, err := schemas.Decode(v)
					if err != nil {
						t.Fatal(err)
					}
					got[ev.Header().EventID] = true
				}
			}
			out.reset()
		}
		for i, topic := range order {
			if i == stopAfter {
				break
			}
			off := next[topic]
			next[topic]++
			r := logs[topic][off]
			m := &inMsg{topic: topic, offset: off, ts: r.msg.Time, key: r.msg.Key, value: r.msg.Value}
			decodeMsg(context.Background(), m, cfg.Limits, nil)
			c, ok := committed[topic]
			m.emit = committed == nil || !ok || off >= c
			st.process(m, m.emit, &out, now)
			collect()
		}
		if end {
			st.drain(&out, now)
			collect()
		}
		return got, next, st
	}
	inOrder := make([]string, len(recs))
	for i, r := range recs {
		inOrder[i] = r.topic
	}
	var filtered []string
	for _, tp := range inOrder {
		if tp != schemas.TopicCampaigns {
			filtered = append(filtered, tp)
		}
	}
	want, _, _ := run(filtered, nil, -1, true)
	if len(want) == 0 {
		t.Fatal("the uninterrupted run admitted nothing")
	}

	// interleave returns a random order of the topics' messages that keeps
	// each topic's log order, skewed so that a topic runs ahead for a while
	// (what a lagging fetch or a producer's batching does).
	interleave := func(r *rand.Rand) []string {
		left := map[string]int{}
		total := 0
		for _, tp := range topics {
			left[tp] = len(logs[tp])
			total += len(logs[tp])
		}
		var order []string
		for len(order) < total {
			tp := topics[r.IntN(len(topics))]
			for n := 1 + r.IntN(8); n > 0 && left[tp] > 0; n-- {
				order = append(order, tp)
				left[tp]--
			}
		}
		return order
	}
	r := rand.New(rand.NewPCG(7, 8))
	lostTotal := 0
	for trial := 0; trial < 40; trial++ {
		first := interleave(r)
		cut := 1 + r.IntN(len(first)-1)
		got1, consumed, st := run(first, nil, cut, false)
		committed := map[string]int64{}
		for tp, n := range consumed {
			committed[tp] = n
		}
		for tp, held := range st.commitFrom() {
			if held < committed[tp] {
				committed[tp] = held
			}
		}
		got2, _, _ := run(interleave(r), committed, -1, true)
		var lost []string
		for id := range want {
			if !got1[id] && !got2[id] {
				lost = append(lost, id)
			}
		}
		for id := range got2 {
			if !want[id] {
				t.Fatalf("trial %d: admitted %s, which the uninterrupted run does not", trial, id)
			}
		}
		if len(lost) > 0 {
			lostTotal += len(lost)
			t.Errorf("trial %d (cut after %d of %d messages): %d of %d outcomes never written, e.g. %v", trial, cut, len(first), len(lost), len(want), lost[:min(3, len(lost))])
		}
	}
	if lostTotal > 0 {
		t.Logf("%d outcomes lost in all", lostTotal)
	}
}
