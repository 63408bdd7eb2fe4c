package broker_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/broker"
	"github.com/harnessflow/harnessflow/internal/testenv"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// joinerEnv makes the test binary a group member that joins and waits to be
// killed: "broker,group,topic".
const joinerEnv = "KAFKAX_TEST_JOINER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(joinerEnv); spec != "" {
		parts := strings.Split(spec, ",")
		cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{ID: parts[1], Brokers: []string{parts[0]}, Topics: []string{parts[2]},
			SessionTimeout: time.Second, RebalanceTimeout: 2 * time.Second, HeartbeatInterval: 200 * time.Millisecond,
			JoinGroupBackoff: 100 * time.Millisecond})
		if err != nil {
			os.Exit(3)
		}
		for {
			if _, err := cg.Next(context.Background()); err != nil {
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	os.Exit(m.Run())
}

// TestMemberKilledMidJoinIsEvicted kills a second group member (a child
// process) at random moments of its start-up, several times, while this
// process is a member: after each kill the survivor must get every
// partition back. kfake keeps a member that dies while its JoinGroup waits
// for a rebalance (no session timer is armed for it), and without the
// broker's session watch the survivor stays with half the partitions for
// good: a trainer killed mid-join left hf.samples partitions unread.
func TestMemberKilledMidJoinIsEvicted(t *testing.T) {
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", AssumedSessionTimeout: 2 * time.Second,
		Opts: []kfake.Opt{kfake.GroupMinSessionTimeout(100 * time.Millisecond), kfake.SeedTopics(6, "t")}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := testenv.Context(t)
	defer cancel()

	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{ID: "g", Brokers: []string{b.Addr()}, Topics: []string{"t"},
		// A slow heartbeat: a joiner waits up to 1.5s for this member to
		// rejoin, the window in which it is killed.
		SessionTimeout: 4 * time.Second, RebalanceTimeout: 4 * time.Second, HeartbeatInterval: 1500 * time.Millisecond,
		JoinGroupBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	var (
		mu    sync.Mutex
		parts int
	)
	go func() {
		for {
			gen, err := cg.Next(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				continue
			}
			mu.Lock()
			parts = len(gen.Assignments["t"])
			mu.Unlock()
		}
	}()
	owned := func() int { mu.Lock(); defer mu.Unlock(); return parts }
	waitAll := func(what string) {
		deadline := time.Now().Add(30 * time.Second)
		for owned() != 6 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the surviving member owns %d of 6 partitions after 30s", what, owned())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitAll("alone")

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	client := &kafka.Client{Addr: kafka.TCP(b.Addr())}
	for i := 0; i < 3; i++ {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), joinerEnv+"="+b.Addr()+",g,t")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill it while its JoinGroup waits for this member to rejoin (this
		// member's slow heartbeat leaves up to 1.5s): the group prepares a
		// rebalance with two members.
		deadline := time.Now().Add(10 * time.Second)
		waitAll(fmt.Sprintf("before start %d", i+1))
		for {
			res, err := client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{"g"}})
			if err == nil && len(res.Groups) == 1 && res.Groups[0].GroupState == "PreparingRebalance" && len(res.Groups[0].Members) == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the second member never joined")
			}
			time.Sleep(10 * time.Millisecond)
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		// The rebalance completes once this member rejoins.
		for owned() == 6 {
			if time.Now().After(deadline) {
				break // it may also complete without the dead member
			}
			time.Sleep(10 * time.Millisecond)
		}
		waitAll(fmt.Sprintf("after kill %d", i+1))
	}
}
