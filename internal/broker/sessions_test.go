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
	t.Parallel()
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
	client := &kafka.Client{Addr: kafka.TCP(b.Addr())}
	group := func() (state string, members int) {
		res, err := client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{"g"}})
		if err != nil || len(res.Groups) != 1 {
			return fmt.Sprint(err), 0
		}
		return res.Groups[0].GroupState, len(res.Groups[0].Members)
	}
	// waitAlone waits until this member is the group's only one, the group
	// is stable, and it owns every partition.
	waitAlone := func(what string) {
		testenv.WaitFor(t, 30*time.Second, what+": the surviving member alone in a stable group with all 6 partitions", func() (bool, string) {
			state, members := group()
			n := owned()
			return state == "Stable" && members == 1 && n == 6, fmt.Sprintf("group %s with %d members; this one owns %d", state, members, n)
		})
	}
	waitAlone("alone")

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), joinerEnv+"="+b.Addr()+",g,t")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill it while its JoinGroup waits for this member to rejoin (this
		// member's slow heartbeat leaves up to 1.5s): the group prepares a
		// rebalance with two members.
		testenv.WaitFor(t, 10*time.Second, fmt.Sprintf("joiner %d in a rebalance of two members", i+1), func() (bool, string) {
			state, members := group()
			return state == "PreparingRebalance" && members == 2, fmt.Sprintf("group %s with %d members", state, members)
		})
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		waitAlone(fmt.Sprintf("after kill %d", i+1))
	}
}
