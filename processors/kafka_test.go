package processors

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/broker"

	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
	"github.com/harnessflow/harnessflow/producers/gen"
	"github.com/harnessflow/harnessflow/schemas"
)

// startBroker starts an embedded broker (real Kafka protocol) with every
// topic and short group session timeouts, so that a killed member's
// partitions move on quickly.
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

// testConfig is a Config for tests: small batches (many commit points),
// short group timeouts.
func testConfig(addr, group string) Config {
	return Config{
		Brokers: []string{addr}, Group: group, MinPairs: 2, BatchSize: 40,
		FetchWait: 50 * time.Millisecond, MergeIdle: 200 * time.Millisecond, FinishHold: 200 * time.Millisecond, SessionTimeout: 3 * time.Second, HeartbeatInterval: 300 * time.Millisecond,
		RebalanceTimeout: 3 * time.Second, RetryMaxElapsed: 20 * time.Second,
	}
}

// testCampaign is the campaign every Kafka test processes: 2 agents (two
// pairing keys) x (baseline + 2 evolvers), 3 rounds of 5 tasks.
func testCampaign() *gen.Campaign {
	return gen.Generate(gen.Config{Seed: 11, Agents: 2, Evolvers: 2, Rounds: 3, TasksPerRound: 5})
}

func produce(t *testing.T, addr string, msgs map[string][]kafka.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: []string{addr}})
	defer w.Close()
	for _, topic := range gen.Topics(msgs) {
		ms := append([]kafka.Message(nil), msgs[topic]...)
		for i := range ms {
			ms[i].Topic = topic
		}
		// Retried as a producer would: a broker just restarted on its
		// data dir may drop the first connections.
		for try := 1; ; try++ {
			err := w.WriteMessages(ctx, ms...)
			if err == nil {
				break
			}
			if try == 50 || ctx.Err() != nil {
				t.Fatalf("produce %s: %v", topic, err)
			}
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
			}
		}
	}
}

func produceCampaign(t *testing.T, addr string, c *gen.Campaign) {
	t.Helper()
	msgs, err := c.Messages()
	if err != nil {
		t.Fatal(err)
	}
	produce(t, addr, msgs)
}

// waitCaughtUp polls Lag until the group has processed everything.
func waitCaughtUp(t *testing.T, addr, group string, timeout time.Duration, errc <-chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last int64 = -1
	for {
		n, err := Lag(ctx, []string{addr}, group)
		if err == nil && n == 0 {
			return
		}
		if err == nil {
			last = n
		}
		select {
		case err := <-errc:
			t.Fatalf("processor stopped while waiting to catch up (lag %d): %v", last, err)
		case <-ctx.Done():
			t.Fatalf("group %s not caught up within %v (lag %d, last error %v)", group, timeout, last, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// derived is one derived message read back.
type derived struct {
	topic string
	id    string
	value []byte
}

// readTopic reads every message of every partition of topic.
func readTopic(t *testing.T, addr, topic string) []kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := kafkax.NewClient([]string{addr})
	ends, err := kafkax.EndOffsets(ctx, client, topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []kafka.Message
	parts := make([]int, 0, len(ends[topic]))
	for p := range ends[topic] {
		parts = append(parts, p)
	}
	sort.Ints(parts)
	for _, p := range parts {
		end := ends[topic][p]
		for off := int64(0); off < end; {
			res, err := client.Fetch(ctx, &kafka.FetchRequest{Topic: topic, Partition: p, Offset: off, MinBytes: 1, MaxBytes: 8 << 20, MaxWait: 100 * time.Millisecond})
			if err != nil {
				t.Fatalf("fetch %s/%d: %v", topic, p, err)
			}
			if res.Error != nil {
				t.Fatalf("fetch %s/%d: %v", topic, p, res.Error)
			}
			for {
				r, err := res.Records.ReadRecord()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("read %s/%d: %v", topic, p, err)
				}
				if r.Offset < off || r.Offset >= end {
					continue
				}
				k, _ := protocol.ReadAll(r.Key)
				v, _ := protocol.ReadAll(r.Value)
				out = append(out, kafka.Message{Topic: topic, Partition: p, Offset: r.Offset, Key: k, Value: v, Time: r.Time})
				off = r.Offset + 1
			}
		}
	}
	return out
}

// readDerived reads hf.samples, hf.round-metrics and hf.dlq and returns the
// deduplicated set (topic/id -> bytes), failing if two copies of one id
// differ, plus the number of copies read.
func readDerived(t *testing.T, addr string) (map[string][]byte, int) {
	t.Helper()
	set := map[string][]byte{}
	n := 0
	for _, topic := range []string{schemas.TopicSamples, schemas.TopicRoundMetrics, schemas.TopicDLQ} {
		for _, m := range readTopic(t, addr, topic) {
			ev, err := schemas.Decode(m.Value)
			if err != nil {
				t.Fatalf("derived %s/%d@%d does not decode: %v", topic, m.Partition, m.Offset, err)
			}
			k := topic + "/" + ev.Header().EventID
			if prev, ok := set[k]; ok && !bytes.Equal(prev, m.Value) {
				t.Errorf("derived %s has two different encodings:\n%x\n%x", k, prev, m.Value)
			}
			set[k] = m.Value
			n++
		}
	}
	return set, n
}

func countPrefix(set map[string][]byte, topic string) int {
	n := 0
	for k := range set {
		if len(k) > len(topic) && k[:len(topic)+1] == topic+"/" {
			n++
		}
	}
	return n
}

// diffSets reports the differences between two derived sets.
func diffSets(t *testing.T, want, got map[string][]byte) {
	t.Helper()
	var missing, extra, changed []string
	for k, v := range want {
		g, ok := got[k]
		switch {
		case !ok:
			missing = append(missing, k)
		case !bytes.Equal(v, g):
			changed = append(changed, k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	sort.Strings(changed)
	for _, k := range extra {
		if ev, err := schemas.Decode(got[k]); err == nil {
			if r, ok := ev.(*schemas.Rejected); ok {
				t.Logf("extra dead letter %s: %s/%s %s (%s/%d@%d)", k, r.Stage, r.ReasonCode, r.Message, r.SourceTopic, r.Partition, r.Offset)
			}
		}
	}
	if len(missing)+len(extra)+len(changed) > 0 {
		t.Errorf("derived sets differ: %d missing %v, %d extra %v, %d changed %v", len(missing), missing, len(extra), extra, len(changed), changed)
	}
}

// startProc runs a Processor in the background; the returned stop cancels
// it and waits for Run.
func startProc(t *testing.T, cfg Config, opts ...Option) (stop func() error, errc <-chan error) {
	t.Helper()
	opts = append([]Option{WithLogger(testLogger(t))}, opts...)
	p, err := New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = p.Run(ctx)
		if runErr != nil {
			ch <- runErr
		}
	}()
	var once sync.Once
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				t.Errorf("processor did not stop within 60s")
			}
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return stop, ch
}

func testLogger(t *testing.T) zerolog.Logger {
	if os.Getenv("HF_TEST_LOG") != "" {
		return obs.NewLogger("process-test")
	}
	return zerolog.Nop()
}

// reference processes the test campaign once, uninterrupted, on a broker of
// its own and returns the derived set. It is computed once per test binary.
var (
	refOnce sync.Once
	refSet  map[string][]byte
)

func reference(t *testing.T) map[string][]byte {
	t.Helper()
	refOnce.Do(func() {
		addr := startBroker(t)
		produceCampaign(t, addr, testCampaign())
		stop, errc := startProc(t, testConfig(addr, "ref"))
		waitCaughtUp(t, addr, "ref", 90*time.Second, errc)
		if err := stop(); err != nil {
			t.Fatalf("run: %v", err)
		}
		set, n := readDerived(t, addr)
		if n != len(set) {
			t.Errorf("uninterrupted run wrote %d derived messages for %d ids", n, len(set))
		}
		refSet = set
	})
	if refSet == nil {
		t.Fatal("reference run failed")
	}
	return refSet
}

func TestReferenceRunDerivesEverything(t *testing.T) {
	set := reference(t)
	// 2 agents x 2 evolvers x 3 updates; 2 agents x 3 cells x 3 rounds.
	if n := countPrefix(set, schemas.TopicSamples); n != 12 {
		t.Errorf("samples = %d, want 12", n)
	}
	if n := countPrefix(set, schemas.TopicRoundMetrics); n != 18 {
		t.Errorf("round metrics = %d, want 18", n)
	}
	if n := countPrefix(set, schemas.TopicDLQ); n != 0 {
		t.Errorf("dead letters = %d, want 0", n)
	}
	// The Kafka run equals the in-process pipeline over the same events.
	l := newLocal(t, Config{MinPairs: 2})
	local := map[string][]byte{}
	for _, m := range l.runCampaign(t, testCampaign(), time.Now()) {
		ev, err := schemas.Decode(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		local[m.Topic+"/"+ev.Header().EventID] = m.Value
	}
	diffSets(t, local, set)
}

// TestDeterministicReplay processes the same raw log twice from scratch (the
// second time as `replay` does: a new group generation) and requires
// byte-identical derived events with the same ids.
func TestDeterministicReplay(t *testing.T) {
	addr := startBroker(t)
	produceCampaign(t, addr, testCampaign())
	var sets []map[string][]byte
	for i, group := range []string{"det", "det-gen2"} {
		cfg := testConfig(addr, group)
		cfg.StopWhenCaughtUp = true
		p, err := New(cfg, WithLogger(testLogger(t)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		err = p.Run(ctx)
		cancel()
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if n, err := Lag(context.Background(), []string{addr}, group); err != nil || n != 0 {
			t.Fatalf("run %d returned before catching up: lag %d, %v", i, n, err)
		}
		set, copies := readDerived(t, addr) // fails on differing copies of one id
		if want := len(set) * (i + 1); copies != want {
			t.Errorf("after run %d: %d derived copies, want %d (each id once per run)", i+1, copies, want)
		}
		sets = append(sets, set)
	}
	if len(sets[0]) == 0 {
		t.Fatal("no derived events")
	}
	diffSets(t, sets[0], sets[1])
	diffSets(t, reference(t), sets[1])
}

// TestTwoInstancesWithRebalance feeds the campaign in three parts: the first
// to one instance, the second after a second instance joined (a rebalance:
// partitions move, their state is rebuilt from the log), the third after the
// first instance left (another rebalance). The derived set equals the
// uninterrupted run's.
func TestTwoInstancesWithRebalance(t *testing.T) {
	want := reference(t)
	addr := startBroker(t)
	c := testCampaign()
	msgs, err := c.Messages()
	if err != nil {
		t.Fatal(err)
	}
	parts := splitByTime(c, msgs, 3)
	var mu sync.Mutex
	commits := map[int]int{}
	progress := func(inst int) Option {
		return WithProgress(func(Progress) { mu.Lock(); commits[inst]++; mu.Unlock() })
	}
	cfg := testConfig(addr, "two")
	cfg.BatchSize = 5
	produce(t, addr, parts[0])
	stop1, errc1 := startProc(t, cfg, progress(1))
	waitCaughtUp(t, addr, "two", 60*time.Second, errc1)
	_, errc2 := startProc(t, cfg, progress(2))
	waitMembers(t, addr, 2, cfg.Group, PairGroup(cfg.Group))
	produce(t, addr, parts[1])
	waitCaughtUp(t, addr, "two", 60*time.Second, errc2)
	mu.Lock()
	c2 := commits[2]
	mu.Unlock()
	if c2 == 0 {
		t.Errorf("the second instance committed nothing after joining")
	}
	if err := stop1(); err != nil {
		t.Fatalf("instance 1: %v", err)
	}
	waitMembers(t, addr, 1, cfg.Group, PairGroup(cfg.Group))
	produce(t, addr, parts[2])
	waitCaughtUp(t, addr, "two", 60*time.Second, errc2)
	got, _ := readDerived(t, addr)
	diffSets(t, want, got)
}

// splitByTime splits the campaign's messages into n parts of consecutive
// timestamps.
func splitByTime(c *gen.Campaign, msgs map[string][]kafka.Message, n int) []map[string][]kafka.Message {
	recs := c.Records
	cuts := make([]time.Time, n-1)
	for i := range cuts {
		cuts[i] = recs[(i+1)*len(recs)/n].Time
	}
	out := make([]map[string][]kafka.Message, n)
	for i := range out {
		out[i] = map[string][]kafka.Message{}
	}
	for topic, ms := range msgs {
		for _, m := range ms {
			i := 0
			for i < len(cuts) && !m.Time.Before(cuts[i]) {
				i++
			}
			out[i][topic] = append(out[i][topic], m)
		}
	}
	return out
}

// waitMembers polls until every group has n members and is stable.
func waitMembers(t *testing.T, addr string, n int, groups ...string) {
	t.Helper()
	client := kafkax.NewClient([]string{addr})
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok := true
		res, err := client.DescribeGroups(context.Background(), &kafka.DescribeGroupsRequest{GroupIDs: groups})
		if err != nil {
			ok = false
		} else {
			for _, g := range res.Groups {
				if g.Error != nil || len(g.Members) != n || g.GroupState != "Stable" {
					ok = false
				}
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("groups %v did not reach %d stable members (last: %+v, %v)", groups, n, res, err)
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}
