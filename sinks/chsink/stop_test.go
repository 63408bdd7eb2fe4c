package chsink_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/sinks/chsink"
)

// TestStopWhileConnectingIsClean: a sink stopped while it still retries its
// first ClickHouse ping (nothing read yet) returns nil, as a stop does, so
// that its process exits 0 (seen in the fleet test: exit 1 on SIGTERM).
func TestStopWhileConnectingIsClean(t *testing.T) {
	b := testenv.Kafka(t)
	s, err := chsink.New(chsink.Config{Brokers: []string{b.Addr()}, ClickHouse: "127.0.0.1:1", Database: "nowhere"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	time.Sleep(300 * time.Millisecond) // into the ping retries
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after a stop while connecting: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	select {
	case <-s.Ready():
		t.Error("Ready closed although ClickHouse never answered")
	default:
	}
}

// TestSinkWaitsOutClickHouseGoingAwayWhileMigrating: ClickHouse closes the
// sink's connection in the middle of its start-up migrations, twice (a
// proxy cuts the first two connections to carry 4 KiB, as a server restarting under a
// starting sink did in the fleet test, where the sink then exited 1). The
// sink connects again, finishes migrating, and writes what it reads.
func TestSinkWaitsOutClickHouseGoingAwayWhileMigrating(t *testing.T) {
	broker := testenv.Kafka(t)
	ch := testenv.ClickHouse(t)
	proxy := testenv.StartCutProxy(t, ch.Addr, 2, 4<<10)
	brokers := []string{broker.Addr()}
	produce(t, brokers, attempts(0, 20))
	s, stop := runSink(t, chsink.Config{Brokers: brokers, ClickHouse: proxy.Addr, Database: ch.Database, Group: "g",
		Topics: []string{schemas.TopicAttempts}, MaxAge: 50 * time.Millisecond})
	testenv.WaitFor(t, 90*time.Second, "the sink ready and every attempt written", func() (bool, string) {
		n, _ := count(ch.Conn, "SELECT count() FROM task_attempts FINAL")
		select {
		case <-s.Ready():
		default:
			return false, fmt.Sprintf("not ready; %d connections cut", proxy.Cut())
		}
		return n == 20, fmt.Sprintf("%d attempts, %+v", n, s.Stats())
	})
	if proxy.Cut() != 2 {
		t.Fatalf("%d connections cut, want 2: the test did not interrupt the migrations", proxy.Cut())
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}
