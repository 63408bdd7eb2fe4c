package processors

import (
	"context"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/harnessflow/harnessflow/infra/kafkatopics"
	"github.com/harnessflow/harnessflow/internal/broker"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/schemas"
)

// startCluster starts an embedded three-broker cluster and creates every
// topic with its declared replication factor (3), without an override.
func startCluster(t *testing.T) string {
	t.Helper()
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Brokers: 3,
		Opts: []kfake.Opt{kfake.GroupMinSessionTimeout(100 * time.Millisecond)}})
	if err != nil {
		t.Fatalf("start 3-broker cluster: %v", err)
	}
	t.Cleanup(b.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafkax.EnsureAllTopics(ctx, []string{b.Addr()}); err != nil {
		t.Fatalf("create topics with their declared factor on 3 brokers: %v", err)
	}
	st, nb, err := kafkax.DescribeTopics(ctx, kafkax.NewClient([]string{b.Addr()}), kafkatopics.All())
	if err != nil {
		t.Fatal(err)
	}
	if nb != 3 {
		t.Fatalf("%d brokers in the metadata, want 3", nb)
	}
	for _, s := range st {
		if s.ReplicationFactor != 3 {
			t.Fatalf("%s: %d replicas, want 3", s.Declared.Name, s.ReplicationFactor)
		}
	}
	// The partition leaders are spread over the brokers, so the
	// processors' fetches and produce requests go to several nodes.
	md, err := (&kafka.Client{Addr: kafka.TCP(b.Addr()), Transport: &kafka.Transport{}}).
		Metadata(ctx, &kafka.MetadataRequest{Topics: append(append([]string{}, CellTopics...), schemas.TopicOutcomes, schemas.TopicSamples)})
	if err != nil {
		t.Fatal(err)
	}
	leaders := map[int]bool{}
	for _, tp := range md.Topics {
		for _, p := range tp.Partitions {
			leaders[p.Leader.ID] = true
		}
	}
	if len(leaders) < 2 {
		t.Fatalf("every partition is led by one broker (%v): the test would not exercise a cluster", leaders)
	}
	return b.Addr()
}

// TestThreeInstancesOnThreeBrokers runs the test campaign through three
// processor instances in one consumer group on a three-broker cluster
// (topics with three replicas, leaders on every node). One instance stops
// cleanly while the second part of the campaign is processed, another (a
// child process) is killed with SIGKILL during the third, so partitions move
// twice, once after a LeaveGroup and once after the session timeout. The
// derived set (samples, round metrics, dead letters: id -> bytes, every copy
// of an id byte-identical) equals the uninterrupted single-instance run's:
// nothing missing, nothing extra; copies of an id are the at-least-once
// re-emission the project allows (doc.go, "Delivery, state and
// rebalances"), and their number is logged.
func TestThreeInstancesOnThreeBrokers(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: three instances and a killed child")
	}
	want := reference(t)
	addr := startCluster(t)
	c := testCampaign()
	msgs, err := c.Messages()
	if err != nil {
		t.Fatal(err)
	}
	parts := splitByTime(c, msgs, 3)
	const group = "scaleout"
	cfg := testConfig(addr, group)
	cfg.BatchSize = 5
	var mu sync.Mutex
	commits := map[string]int{}
	progress := func(inst string) Option {
		return WithProgress(func(Progress) { mu.Lock(); commits[inst]++; mu.Unlock() })
	}
	count := func(inst string) int { mu.Lock(); defer mu.Unlock(); return commits[inst] }

	stopA, errcA := startProc(t, cfg, progress("a"))
	_, errcB := startProc(t, cfg, progress("b"))
	// The third instance is a child process (TestHelperProcess, same
	// Config and BatchSize), so that it can be killed for real.
	child := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	child.Env = append(os.Environ(), "HF_TEST_HELPER_BROKER="+addr, "HF_TEST_HELPER_GROUP="+group)
	child.Stdout, child.Stderr = os.Stderr, os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	t.Cleanup(func() {
		_ = child.Process.Kill()
		<-exited
	})
	waitMembers(t, addr, 3, cfg.Group, PairGroup(cfg.Group))
	assertEachAssigned(t, addr, cfg.Group)
	produce(t, addr, parts[0])
	waitCaughtUp(t, addr, group, 60*time.Second, errcB)

	// Part 2: instance a stops cleanly (drain, flush, commit, LeaveGroup)
	// while the part is being processed.
	produce(t, addr, parts[1])
	lagA, _ := Lag(context.Background(), []string{addr}, group)
	select {
	case err := <-errcA:
		t.Fatalf("instance a: %v", err)
	default:
	}
	if err := stopA(); err != nil {
		t.Fatalf("instance a: %v", err)
	}
	t.Logf("instance a stopped cleanly with lag %d", lagA)
	waitMembers(t, addr, 2, cfg.Group, PairGroup(cfg.Group))

	// Part 3: the child is killed (no drain, no commit, no LeaveGroup):
	// its partitions move to b after the session timeout.
	produce(t, addr, parts[2])
	lagKill, _ := Lag(context.Background(), []string{addr}, group)
	select {
	case err := <-exited:
		t.Fatalf("the child exited by itself: %v", err)
	default:
	}
	if err := child.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	t.Logf("child killed with lag %d", lagKill)
	waitMembers(t, addr, 1, cfg.Group, PairGroup(cfg.Group))
	waitCaughtUp(t, addr, group, 60*time.Second, errcB)
	if lagA == 0 && lagKill == 0 {
		t.Errorf("both stops came after the group had caught up; the test exercised no mid-stream stop")
	}

	got, copies := readDerived(t, addr)
	diffSets(t, want, got)
	t.Logf("%d derived ids, %d copies read (%d re-emitted after the rebalances); commits a %d, b %d",
		len(got), copies, copies-len(got), count("a"), count("b"))
}

// assertEachAssigned fails unless every member of group holds partitions of
// every raw cell topic (CoPartitionBalancer: 6 partitions, 2 each).
func assertEachAssigned(t *testing.T, addr, group string) {
	t.Helper()
	res, err := kafkax.NewClient([]string{addr}).DescribeGroups(context.Background(), &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil || len(res.Groups) != 1 {
		t.Fatalf("describe group %s: %+v, %v", group, res, err)
	}
	for _, m := range res.Groups[0].Members {
		held := map[string]int{}
		for _, tp := range m.MemberAssignments.Topics {
			held[tp.Topic] += len(tp.Partitions)
		}
		for _, topic := range CellTopics {
			if held[topic] == 0 {
				t.Errorf("member %s holds no partition of %s: %v", m.MemberID, topic, held)
			}
		}
	}
}
