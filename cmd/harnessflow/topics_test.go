package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/infra/kafkatopics"
	"github.com/harnessflow/harnessflow/internal/broker"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/processors"
	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/producers/producerstest"
	"github.com/harnessflow/harnessflow/schemas"
)

// TestTopicsListAndRaise: `topics` lists every declared topic with its
// actual and declared partitions and replication; `topics raise` raises,
// raises the five raw cell topics together, warns about cells in flight,
// and refuses to lower a count or to touch a topic that is not ours.
func TestTopicsListAndRaise(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	ctx := prodCtx(t, 60*time.Second)
	addr := b.Addr()

	code, out, stderr := prodRunCLI(t, ctx, "", "topics", "--brokers", addr)
	if code != 0 {
		t.Fatalf("topics: exit %d; stderr:\n%s", code, stderr)
	}
	// One broker holds one replica by design: not "under-replicated", no
	// warning that data will be lost.
	if !strings.HasPrefix(out, "brokers: 1\n") || !strings.Contains(out, "The cluster has one broker") ||
		strings.Contains(out, "under-replicated") || strings.Contains(out, "lose data") {
		t.Fatalf("topics output:\n%s", out)
	}
	for _, d := range kafkatopics.All() {
		if !strings.Contains(out, d.Name+" ") {
			t.Errorf("topics does not list %s:\n%s", d.Name, out)
		}
	}
	var row string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "hf.samples ") {
			row = strings.Join(strings.Fields(l), " ")
		}
	}
	if row != "hf.samples derived 6 6 1 3 one broker" {
		t.Errorf("hf.samples' row %q is not 6/6 partitions, 1/3 replicas:\n%s", row, out)
	}
	if code, out2, _ := prodRunCLI(t, ctx, "", "topics", "list", "--brokers", addr); code != 0 || out2 != out {
		t.Fatalf("topics list: exit %d, output differs from topics:\n%s", code, out2)
	}

	code, out, stderr = prodRunCLI(t, ctx, "", "topics", "raise", "hf.samples", "8", "--brokers", addr)
	if code != 0 || !strings.Contains(out, "hf.samples: 6 -> 8 partitions\n") || !strings.Contains(out, "WARNING") {
		t.Fatalf("raise hf.samples 8: exit %d\n%s\nstderr:\n%s", code, out, stderr)
	}
	code, out, stderr = prodRunCLI(t, ctx, "", "topics", "raise", "hf.samples", "--partitions", "8", "--brokers", addr)
	if code != 0 || !strings.Contains(out, "nothing changed") {
		t.Fatalf("raise to the same count: exit %d\n%s\nstderr:\n%s", code, out, stderr)
	}
	code, _, stderr = prodRunCLI(t, ctx, "", "topics", "raise", "hf.samples", "4", "--brokers", addr)
	if code != 2 || !strings.Contains(stderr, "cannot lower") || !strings.Contains(stderr, "hf.samples has 8 partitions") {
		t.Fatalf("lower 8 -> 4: exit %d; stderr:\n%s", code, stderr)
	}
	code, _, stderr = prodRunCLI(t, ctx, "", "topics", "raise", "hf.nope", "4", "--brokers", addr)
	if code != 2 || !strings.Contains(stderr, "no harnessflow topic") {
		t.Fatalf("unknown topic: exit %d; stderr:\n%s", code, stderr)
	}

	// A raw cell topic raises all five (the processors' co-partitioning).
	code, out, stderr = prodRunCLI(t, ctx, "", "topics", "raise", schemas.TopicAttempts, "9", "--brokers", addr)
	if code != 0 {
		t.Fatalf("raise %s: exit %d\n%s\nstderr:\n%s", schemas.TopicAttempts, code, out, stderr)
	}
	var cells []kafkatopics.Topic
	for _, topic := range processors.CellTopics {
		d, _ := kafkatopics.Lookup(topic)
		cells = append(cells, d)
	}
	st, _, err := kafkax.DescribeTopics(ctx, kafkax.NewClient([]string{addr}), cells)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if !strings.Contains(out, s.Declared.Name+": 6 -> 9 partitions") || s.Partitions != 9 {
			t.Errorf("%s: %d partitions after raising hf.attempts to 9; output:\n%s", s.Declared.Name, s.Partitions, out)
		}
	}

	code, out, _ = prodRunCLI(t, ctx, "", "topics", "raise", "--help")
	if code != 0 || !strings.Contains(out, "unknown_cell") || !strings.Contains(out, "between campaigns") {
		t.Fatalf("raise --help does not say what raising does to cells in flight:\n%s", out)
	}
}

// TestReplicationFactorFlag: on a one-broker cluster without topics a
// component refuses the declared factor 3 with an error naming the flag, and
// creates the topics with --kafka-replication-factor 1
// (HF_KAFKA_REPLICATION_FACTOR).
func TestReplicationFactorFlag(t *testing.T) {
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := prodCtx(t, 60*time.Second)
	in := filepath.Join(t.TempDir(), "events.jsonl")
	lines := prodJSONL(t, producerstest.Mixed(20, "rf"))
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := prodRunCLI(t, ctx, "", "produce", "--brokers", b.Addr(), "--progress", "0", in)
	if code == 0 || !strings.Contains(stderr, "ask replication factor 3, but the Kafka cluster has 1 broker:") ||
		!strings.Contains(stderr, "--kafka-replication-factor 1") {
		t.Fatalf("produce on one broker with factor-3 topics: exit %d; stderr:\n%s", code, stderr)
	}
	t.Setenv("HF_KAFKA_REPLICATION_FACTOR", "1")
	code, _, stderr = prodRunCLI(t, ctx, "", "produce", "--brokers", b.Addr(), "--progress", "0", in)
	if code != 0 {
		t.Fatalf("produce with HF_KAFKA_REPLICATION_FACTOR=1: exit %d; stderr:\n%s", code, stderr)
	}
	code, out, stderr := prodRunCLI(t, ctx, "", "topics", "--brokers", b.Addr())
	if code != 0 || strings.Contains(out, "missing") || !strings.Contains(out, "one broker") {
		t.Fatalf("topics after the override: exit %d\n%s\nstderr:\n%s", code, out, stderr)
	}
}

// TestTopicsUnderReplicatedOnSeveralBrokers: on a cluster of two brokers,
// topics created with one replica (--kafka-replication-factor 1) are
// "under-replicated", with the warning that they lose data with a broker;
// the one-broker wording is kept for a single broker.
func TestTopicsUnderReplicatedOnSeveralBrokers(t *testing.T) {
	b := testenv.KafkaCluster(t, 2)
	ctx := prodCtx(t, 60*time.Second)
	in := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(in, []byte(strings.Join(prodJSONL(t, producerstest.Mixed(4, "rf2")), "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HF_KAFKA_REPLICATION_FACTOR", "1")
	if code, _, stderr := prodRunCLI(t, ctx, "", "produce", "--brokers", b.Addr(), "--progress", "0", in); code != 0 {
		t.Fatalf("produce: exit %d; stderr:\n%s", code, stderr)
	}
	code, out, stderr := prodRunCLI(t, ctx, "", "topics", "--brokers", b.Addr())
	if code != 0 || !strings.HasPrefix(out, "brokers: 2\n") || !strings.Contains(out, "under-replicated") ||
		!strings.Contains(out, "lose data") || strings.Contains(out, "one broker") {
		t.Fatalf("topics on two brokers: exit %d\n%s\nstderr:\n%s", code, out, stderr)
	}
}

// TestTopicsGroupsShowsCommittedAndLag: a group that committed part of
// hf.attempts shows its committed and end offsets and its lag, per topic
// and per partition; with no --group the brokers' groups and the defaults
// are asked, and groups without commits are not shown.
func TestTopicsGroupsShowsCommittedAndLag(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	ctx := prodCtx(t, 60*time.Second)
	p, err := producers.New(producers.Config{Brokers: []string{b.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	var evs []schemas.Event
	for i := 0; i < 30; i++ {
		evs = append(evs, producerstest.TaskAttempt(i, "p"))
	}
	if err := p.EmitSync(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	p.Close(ctx)
	client := kafkax.NewClient([]string{b.Addr()})
	ends, err := kafkax.EndOffsets(ctx, client, schemas.TopicAttempts)
	if err != nil {
		t.Fatal(err)
	}
	// Commit every non-empty partition one short of its end.
	req := &kafka.OffsetCommitRequest{GroupID: "g-lag", GenerationID: -1, Topics: map[string][]kafka.OffsetCommit{}}
	var total, parts int64
	for id, end := range ends[schemas.TopicAttempts] {
		if end > 0 {
			req.Topics[schemas.TopicAttempts] = append(req.Topics[schemas.TopicAttempts], kafka.OffsetCommit{Partition: id, Offset: end - 1})
			total += end
			parts++
		}
	}
	if _, err := client.OffsetCommit(ctx, req); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := prodRunCLI(t, ctx, "", "topics", "groups", "--brokers", b.Addr(), "--group", "g-lag")
	want := fmt.Sprintf("g-lag hf.attempts %d/%d %d %d %d", parts, len(ends[schemas.TopicAttempts]), total-parts, total, parts)
	if code != 0 || !slices.Contains(fieldLines(out), want) {
		t.Fatalf("topics groups: exit %d\n%s\nwant a row %q; stderr:\n%s", code, out, want, stderr)
	}
	code, out, _ = prodRunCLI(t, ctx, "", "topics", "groups", "--brokers", b.Addr(), "--group", "g-lag", "--partitions")
	n := 0
	for _, l := range fieldLines(out) {
		if strings.HasPrefix(l, "g-lag hf.attempts ") && strings.HasSuffix(l, " 1") {
			n++
		}
	}
	if code != 0 || int64(n) != parts {
		t.Fatalf("--partitions: exit %d, %d rows, want %d:\n%s", code, n, parts, out)
	}
	code, out, _ = prodRunCLI(t, ctx, "", "topics", "groups", "--brokers", b.Addr())
	if code != 0 || !strings.Contains(out, "g-lag") && !strings.Contains(out, "no group has committed") || strings.Contains(out, "hf-sink ") {
		t.Fatalf("all groups: exit %d\n%s", code, out)
	}
}

// fieldLines is out's lines with their fields joined by one space.
func fieldLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return lines
}
