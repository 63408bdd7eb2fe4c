package chsink_test

import (
	"context"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/testenv"
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
