package processors

import (
	"bytes"
	"context"
	"math/rand"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/schemas"
)

// progressCount is the number of input messages both stages of group have
// committed, read from the broker.
func progressCount(t *testing.T, addr, group string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := kafkax.NewClient([]string{addr})
	var n int64
	for _, g := range []struct {
		group  string
		topics []string
	}{{group, CellTopics}, {PairGroup(group), []string{schemas.TopicOutcomes}}} {
		ends, err := kafkax.EndOffsets(ctx, client, g.topics...)
		if err != nil {
			return 0
		}
		c, err := kafkax.Committed(ctx, client, g.group, ends)
		if err != nil {
			return 0
		}
		for _, ps := range c {
			for _, off := range ps {
				if off > 0 {
					n += off
				}
			}
		}
	}
	return n
}

// TestCrashCancelWithoutFlush stops the processor several times at random
// points without writing or committing its in-flight batch (DrainTimeout < 0,
// like a crash), restarting it each time; the deduplicated derived set equals
// the uninterrupted run's.
func TestCrashCancelWithoutFlush(t *testing.T) {
	want := reference(t)
	addr := startBroker(t)
	produceCampaign(t, addr, testCampaign())
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	t.Logf("crash points seed %d", seed)
	cfg := testConfig(addr, "crash")
	cfg.BatchSize = 5
	cfg.DrainTimeout = -1
	crashes := 0
	for i := 0; i < 4; i++ {
		var commits atomic.Int64
		target := int64(1 + rng.Intn(12))
		stop, errc := startProc(t, cfg, WithProgress(func(Progress) { commits.Add(1) }))
		deadline := time.Now().Add(60 * time.Second)
		for commits.Load() < target {
			if n, err := Lag(context.Background(), []string{addr}, cfg.Group); err == nil && n == 0 {
				break
			}
			select {
			case err := <-errc:
				t.Fatalf("run %d: %v", i, err)
			case <-time.After(5 * time.Millisecond): // polling interval
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %d: no progress (%d commits)", i, commits.Load())
			}
		}
		if n, err := Lag(context.Background(), []string{addr}, cfg.Group); err == nil && n > 0 {
			crashes++
		}
		if err := stop(); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	if crashes == 0 {
		t.Fatalf("every crash came after the run had caught up; the test exercised nothing")
	}
	t.Logf("%d crashes before catching up", crashes)
	_, errc := startProc(t, testConfig(addr, "crash"))
	waitCaughtUp(t, addr, "crash", 90*time.Second, errc)
	got, _ := readDerived(t, addr)
	diffSets(t, want, got)
}

// TestHelperProcess is the child of TestCrashSIGKILL: it runs a processor
// against HF_TEST_HELPER_BROKER until it is killed.
func TestHelperProcess(t *testing.T) {
	addr := os.Getenv("HF_TEST_HELPER_BROKER")
	if addr == "" {
		return // not a child: nothing to do
	}
	cfg := testConfig(addr, os.Getenv("HF_TEST_HELPER_GROUP"))
	cfg.BatchSize = 5
	p, err := New(cfg, WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestCrashSIGKILL kills a child process running the processor with SIGKILL
// at random points, several times, then finishes the run; the deduplicated
// derived set equals the uninterrupted run's and nothing is missing.
func TestCrashSIGKILL(t *testing.T) {
	want := reference(t)
	addr := startBroker(t)
	produceCampaign(t, addr, testCampaign())
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	t.Logf("kill points seed %d", seed)
	const group = "sigkill"
	total := progressTotal(t, addr)
	kills := 0
	for i := 0; i < 3; i++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "HF_TEST_HELPER_BROKER="+addr, "HF_TEST_HELPER_GROUP="+group)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		from := progressCount(t, addr, group)
		target := from + 1 + rng.Int63n(max(total/4, 1))
		deadline := time.Now().Add(90 * time.Second)
		for progressCount(t, addr, group) < target {
			if n, err := Lag(context.Background(), []string{addr}, group); err == nil && n == 0 {
				break
			}
			select {
			case err := <-exited:
				t.Fatalf("child %d exited by itself: %v", i, err)
			case <-time.After(5 * time.Millisecond): // polling interval
			}
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				t.Fatalf("child %d made no progress", i)
			}
		}
		if n, err := Lag(context.Background(), []string{addr}, group); err == nil && n > 0 {
			kills++
		}
		if err := cmd.Process.Kill(); err != nil { // SIGKILL
			t.Fatal(err)
		}
		<-exited
	}
	if kills == 0 {
		t.Fatalf("every kill came after the run had caught up; the test exercised nothing")
	}
	t.Logf("%d kills before catching up", kills)
	cfg := testConfig(addr, group)
	_, errc := startProc(t, cfg)
	waitCaughtUp(t, addr, group, 120*time.Second, errc)
	got, _ := readDerived(t, addr)
	diffSets(t, want, got)
}

// progressTotal is the number of raw cell-topic messages.
func progressTotal(t *testing.T, addr string) int64 {
	t.Helper()
	client := kafkax.NewClient([]string{addr})
	ends, err := kafkax.EndOffsets(context.Background(), client, CellTopics...)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, ps := range ends {
		for _, e := range ps {
			n += e
		}
	}
	return n
}

// TestCommitInsideBatchedRecordLosesNothing puts each pairing key's outcomes
// in one batched hf.outcomes record, so stage B's first commit (BatchSize 5)
// falls inside a record, then crashes right after that commit, abandoning the
// rest, and restarts: the record must be read again whole. Committing a
// record's offset with its first events would lose the samples and round
// metrics its later events derive.
func TestCommitInsideBatchedRecordLosesNothing(t *testing.T) {
	want := reference(t)
	c := testCampaign()

	// Stage A's outcomes of the campaign, per key in order (as in local).
	acfg := Config{Brokers: []string{"unused:9092"}, MinPairs: 2}
	acfg.setDefaults()
	a := newCells(&acfg, newMetrics())
	var out sink
	off := map[string]int64{}
	now := time.Now()
	for _, r := range encodeRecords(t, c) {
		m := &inMsg{topic: r.topic, offset: off[r.topic], ts: r.msg.Time, key: r.msg.Key, value: r.msg.Value}
		off[r.topic]++
		decodeMsg(context.Background(), m, acfg.Limits, nil)
		a.process(m, true, &out, now)
	}
	a.drain(&out, now)
	var recs sink
	for _, o := range out.msgs {
		if o.Topic != schemas.TopicOutcomes {
			t.Fatalf("stage A wrote %s for a clean campaign", o.Topic)
		}
		vs, ts := outcomeValues(t, o)
		for i, v := range vs {
			recs.addOutcome(o.Key, v, ts[i], 1<<20)
		}
	}
	if len(recs.msgs) == 0 || recs.outcomes < 10*len(recs.msgs) {
		t.Fatalf("%d outcomes in %d records: the test needs records far longer than a batch", recs.outcomes, len(recs.msgs))
	}

	addr := startBroker(t)
	msgs, err := c.Messages()
	if err != nil {
		t.Fatal(err)
	}
	produce(t, addr, map[string][]kafka.Message{schemas.TopicCampaigns: msgs[schemas.TopicCampaigns], schemas.TopicOutcomes: recs.msgs})

	cfg := testConfig(addr, "midrecord")
	cfg.BatchSize = 5
	cfg.DrainTimeout = -1
	ctx, crash := context.WithCancel(context.Background())
	defer crash()
	committed := make(chan Progress, 1)
	var once sync.Once
	p, err := New(cfg, WithLogger(testLogger(t)), WithProgress(func(pr Progress) {
		if pr.Group != PairGroup(cfg.Group) {
			return
		}
		once.Do(func() {
			// Crash from inside the flush that committed: with DrainTimeout
			// < 0 nothing after this commit is written or committed.
			crash()
			committed <- pr
		})
	}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the processor did not stop within 60s")
	}
	var first Progress
	select {
	case first = <-committed:
	default:
		t.Fatal("the processor stopped before stage B committed")
	}
	t.Logf("crashed after stage B committed %s/%d at %d", first.Topic, first.Partition, first.Offset)

	_, errc := startProc(t, testConfig(addr, "midrecord"))
	waitCaughtUp(t, addr, "midrecord", 90*time.Second, errc)
	got, _ := readDerived(t, addr)
	diffSets(t, want, got)
}

// TestDamagedOutcomeRecordIsDeadLettered: an hf.outcomes record with the
// batch marker whose framing does not parse becomes one dead letter (stage
// decode, malformed, its coordinates and payload), and the processor goes on.
func TestDamagedOutcomeRecordIsDeadLettered(t *testing.T) {
	addr := startBroker(t)
	bad := append(append([]byte{}, outcomeBatchMagic...), 0x7f, 0x02, 'x') // 127 bytes announced, 1 there
	produce(t, addr, map[string][]kafka.Message{schemas.TopicOutcomes: {{Key: []byte("p/c/b/a/1"), Value: bad}}})
	_, errc := startProc(t, testConfig(addr, "damaged"))
	waitCaughtUp(t, addr, "damaged", 60*time.Second, errc)
	got, _ := readDerived(t, addr)
	if len(got) != 1 {
		t.Fatalf("derived %d events, want one dead letter", len(got))
	}
	for k, v := range got {
		ev, err := schemas.Decode(v)
		if err != nil {
			t.Fatal(err)
		}
		r, ok := ev.(*schemas.Rejected)
		if !ok || r.SourceTopic != schemas.TopicOutcomes || r.Stage != schemas.StageDecode || r.ReasonCode != schemas.CodeMalformed ||
			!bytes.Equal(r.Payload, bad) || !strings.Contains(r.Message, "overruns") {
			t.Errorf("%s: %+v, want a decode/malformed dead letter of the hf.outcomes record", k, ev)
		}
	}
}
