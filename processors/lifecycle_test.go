package processors

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/harnessflow/harnessflow/internal/broker"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers/gen"
	"github.com/harnessflow/harnessflow/schemas"
)

// rawEventsIn sums hf_process_events_in_total over the raw cell topics: the
// raw messages stage A has processed.
func rawEventsIn(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "hf_process_events_in_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "topic" && slices.Contains(CellTopics, l.GetValue()) {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// TestCleanStopDrainsEveryPartition stops, cleanly, a processor that holds
// work in its partitions (every cell_finished held for an hour): each
// partition must write and commit what it processed and admit what it
// holds, so stage A's group ends with every raw message committed. kafka-go
// ends a generation when any one partition's function returns, and that
// used to cancel the drains of the partitions still writing.
func TestCleanStopDrainsEveryPartition(t *testing.T) {
	testenv.NoLeaks(t, "github.com/harnessflow/harnessflow/processors")
	addr := startBroker(t)
	msgs, err := testCampaign().Messages()
	if err != nil {
		t.Fatal(err)
	}
	produce(t, addr, msgs)
	var raw int
	for _, topic := range CellTopics {
		raw += len(msgs[topic])
	}
	for round := 0; round < 3; round++ {
		group := "cleanstop-" + string(rune('a'+round))
		cfg := testConfig(addr, group)
		cfg.FinishHold = time.Hour
		reg := prometheus.NewRegistry()
		stop, errc := startProc(t, cfg, WithRegisterer(reg))
		deadline := time.Now().Add(60 * time.Second)
		for rawEventsIn(t, reg) < float64(raw) {
			select {
			case err := <-errc:
				t.Fatalf("processor stopped: %v", err)
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("stage A processed %.0f of %d raw messages in 60s", rawEventsIn(t, reg), raw)
			}
		}
		if err := stop(); err != nil {
			t.Fatalf("clean stop: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		client := kafkax.NewClient([]string{addr})
		ends, err := kafkax.EndOffsets(ctx, client, CellTopics...)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		committed, err := kafkax.Committed(ctx, client, group, ends)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if n := kafkax.Lag(ends, committed); n != 0 {
			t.Fatalf("stop %d: %d raw messages not committed after a clean stop (ends %v, committed %v)", round, n, ends, committed)
		}
	}
}

// deleteAllRecords deletes every record of topic's partitions (retention
// having expired them all: log start = end).
func deleteAllRecords(t *testing.T, addr, topic string, partitions int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrDeleteRecordsRequest()
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = topic
	for p := int32(0); p < int32(partitions); p++ {
		rp := kmsg.NewDeleteRecordsRequestTopicPartition()
		rp.Partition, rp.Offset = p, -1 // -1: up to the high watermark
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 5000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range res.Topics {
		for _, p := range rt.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				t.Fatalf("delete records %s/%d: %v", rt.Topic, p.Partition, err)
			}
		}
	}
}

// TestExpiredPartitionsCountAsCaughtUp: a raw topic whose records retention
// deleted before a fresh group ever read it (log start = end > 0) has
// nothing left to process. Lag must not count those records, and a run with
// StopWhenCaughtUp (replay --until-caught-up, always a fresh group) must
// return instead of waiting for commits that can never come.
func TestExpiredPartitionsCountAsCaughtUp(t *testing.T) {
	addr := startBroker(t)
	msgs, err := testCampaign().Messages()
	if err != nil {
		t.Fatal(err)
	}
	produce(t, addr, msgs)
	if len(msgs[schemas.TopicJudgments]) == 0 {
		t.Fatal("the test campaign has no judgments to expire")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := kafkax.NewClient([]string{addr})
	parts, err := kafkax.Partitions(ctx, client, schemas.TopicJudgments)
	if err != nil {
		t.Fatal(err)
	}
	deleteAllRecords(t, addr, schemas.TopicJudgments, len(parts[schemas.TopicJudgments]))

	// Before anything ran: everything but the expired judgments is lag.
	var raw int64
	for _, topic := range CellTopics {
		if topic != schemas.TopicJudgments {
			raw += int64(len(msgs[topic]))
		}
	}
	if n, err := Lag(ctx, []string{addr}, "expired"); err != nil || n != raw {
		t.Fatalf("lag before the run = %d (%v), want %d (the judgments expired)", n, err, raw)
	}

	cfg := testConfig(addr, "expired")
	cfg.StopWhenCaughtUp = true
	p, err := New(cfg, WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	defer rcancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(rctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(60 * time.Second):
		n, err := Lag(ctx, []string{addr}, "expired")
		rcancel()
		<-done
		t.Fatalf("StopWhenCaughtUp did not return within 60s; lag %d (%v)", n, err)
	}
	if n, err := Lag(ctx, []string{addr}, "expired"); err != nil || n != 0 {
		t.Fatalf("lag after the run = %d (%v), want 0", n, err)
	}
}

// fetchGaveUp reads hf_process_fetch_failures_total for topic.
func fetchGaveUp(t *testing.T, reg *prometheus.Registry, topic string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "hf_process_fetch_failures_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "topic" && l.GetValue() == topic {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestBrokerOutageLongerThanTheRetryBudget: the broker goes away for longer
// than the fetchers' retry budget while the processor idles. The campaign
// declarations' fetcher used to end the run with its error; now it starts
// again from where it stopped, and the processor, still running, processes
// a second campaign once the broker is back on its data dir.
func TestBrokerOutageLongerThanTheRetryBudget(t *testing.T) {
	testenv.NoLeaks(t, "github.com/harnessflow/harnessflow/processors")
	dir := t.TempDir()
	opts := []kfake.Opt{kfake.GroupMinSessionTimeout(100 * time.Millisecond)}
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", DataDir: dir, Opts: opts})
	if err != nil {
		t.Fatal(err)
	}
	addr := b.Addr()
	defer func() { b.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := kafkax.EnsureAllTopics(ctx, []string{addr}, b.TopicOption()); err != nil {
		t.Fatal(err)
	}
	produceCampaign(t, addr, testCampaign())
	cfg := testConfig(addr, "outage")
	cfg.RetryMaxElapsed = 300 * time.Millisecond
	reg := prometheus.NewRegistry()
	stop, errc := startProc(t, cfg, WithRegisterer(reg))
	waitCaughtUp(t, addr, "outage", 60*time.Second, errc)

	b.Close()
	deadline := time.Now().Add(60 * time.Second)
	for fetchGaveUp(t, reg, schemas.TopicCampaigns) == 0 {
		select {
		case err := <-errc:
			t.Fatalf("the processor stopped during the outage: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the campaign fetcher never gave up on the stopped broker")
		}
	}
	b, err = broker.Start(broker.Config{Listen: addr, DataDir: dir, Opts: opts})
	if err != nil {
		t.Fatal(err)
	}
	// produce retries: the restarted broker may drop the first connections
	// while it loads its data dir.
	produceCampaign(t, addr, gen.Generate(gen.Config{Seed: 12, Campaign: "after-outage", Agents: 1, Evolvers: 1, Rounds: 2, TasksPerRound: 4}))
	waitCaughtUp(t, addr, "outage", 90*time.Second, errc)
	if err := stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	set, _ := readDerived(t, addr)
	if countPrefix(set, schemas.TopicSamples) == 0 {
		t.Fatal("no labeled samples at all")
	}
	var after int
	for _, m := range readTopic(t, addr, schemas.TopicSamples) {
		if strings.Contains(string(m.Value), "after-outage") {
			after++
		}
	}
	if after == 0 {
		t.Fatal("no labeled sample of the campaign produced after the outage")
	}
}

// TestStopWhenCaughtUpRetriesTheEndOffsets: the end offsets a
// StopWhenCaughtUp run catches up with are read once at its start; a broker
// that fails that read (here the first three ListOffsets requests for a raw
// cell topic's latest offsets answer UNKNOWN_SERVER_ERROR) is retried, as the stages
// retry, instead of ending the run with the error.
func TestStopWhenCaughtUpRetriesTheEndOffsets(t *testing.T) {
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0",
		Opts: []kfake.Opt{kfake.GroupMinSessionTimeout(100 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	addr := b.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := kafkax.EnsureAllTopics(ctx, []string{addr}, b.TopicOption()); err != nil {
		t.Fatal(err)
	}
	produceCampaign(t, addr, testCampaign())
	var failed atomic.Int32
	c := b.Cluster()
	c.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.ListOffsetsRequest)
		// kafka-go asks per topic; the end offsets are timestamp -1.
		latestOfRaw := len(r.Topics) == 1 && slices.Contains(CellTopics, r.Topics[0].Topic) &&
			len(r.Topics[0].Partitions) > 0 && r.Topics[0].Partitions[0].Timestamp == -1
		if !latestOfRaw || failed.Load() >= 3 {
			return nil, nil, false
		}
		failed.Add(1)
		return broker.ErrorResponse(r, kerr.UnknownServerError.Code), nil, true
	})
	cfg := testConfig(addr, "endoffsets")
	cfg.StopWhenCaughtUp = true
	p, err := New(cfg, WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v (end-offset reads failed: %d)", err, failed.Load())
		}
	case <-ctx.Done():
		t.Fatal("StopWhenCaughtUp did not return within 90s")
	}
	if failed.Load() == 0 {
		t.Fatal("no end-offset read was failed: the test did not exercise the retry")
	}
	if n, err := Lag(context.Background(), []string{addr}, "endoffsets"); err != nil || n != 0 {
		t.Fatalf("lag after the run = %d (%v)", n, err)
	}
}
