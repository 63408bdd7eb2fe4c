// Package testenv starts the real parts harnessflow's tests run against: an
// embedded Kafka-protocol broker (kfake) and, in clickhouse.go, a real
// clickhouse-server. Nothing here mocks a protocol.
package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/broker"

	"github.com/harnessflow/harnessflow/internal/kafkax"
)

// Kafka starts an embedded broker on a free loopback port with every harnessflow
// topic created, and stops it when the test ends. It returns the broker.
func Kafka(t testing.TB, dataDir ...string) *broker.Broker {
	t.Helper()
	cfg := broker.Config{Listen: "127.0.0.1:0"}
	if len(dataDir) > 0 {
		cfg.DataDir = dataDir[0]
	}
	b, err := broker.Start(cfg)
	if err != nil {
		t.Fatalf("start embedded broker: %v", err)
	}
	t.Cleanup(b.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafkax.EnsureAllTopics(ctx, []string{b.Addr()}, b.TopicOption()); err != nil {
		t.Fatalf("create topics: %v", err)
	}
	return b
}

// KafkaCluster is Kafka with n broker nodes (broker.Config.Brokers): every
// harnessflow topic is created with n replicas (its declared 3 when n is 3)
// and partition leaders spread over the nodes.
func KafkaCluster(t testing.TB, n int) *broker.Broker {
	t.Helper()
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Brokers: n})
	if err != nil {
		t.Fatalf("start embedded %d-broker cluster: %v", n, err)
	}
	t.Cleanup(b.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafkax.EnsureAllTopics(ctx, []string{b.Addr()}, b.TopicOption()); err != nil {
		t.Fatalf("create topics: %v", err)
	}
	return b
}
