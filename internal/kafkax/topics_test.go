package kafkax_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/infra/kafkatopics"
	"github.com/harnessflow/harnessflow/internal/broker"
	"github.com/harnessflow/harnessflow/internal/kafkax"
)

func startBrokers(t *testing.T, n int) *broker.Broker {
	t.Helper()
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Brokers: n})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func topicDef(name string, partitions, rf int) kafkatopics.Topic {
	return kafkatopics.Topic{Name: name, Class: kafkatopics.Internal, Partitions: partitions, ReplicationFactor: rf,
		Configs: map[string]string{"cleanup.policy": "delete"}}
}

// TestEnsureTopicsRefusesFactorAboveBrokers: a factor-3 topic on a one-broker
// cluster is refused at once with an error naming the topic, the factor, the
// broker count and the flag (it used to be created with one replica, without
// a word); it is created with an explicit factor, and then left as it is.
func TestEnsureTopicsRefusesFactorAboveBrokers(t *testing.T) {
	b := startBrokers(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	brokers := []string{b.Addr()}
	def := topicDef("rf3", 2, 3)
	start := time.Now()
	err := kafkax.EnsureTopics(ctx, brokers, []kafkatopics.Topic{def})
	if err == nil {
		t.Fatal("a factor-3 topic was created on a one-broker cluster")
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("refusal took %v: a missing broker is not retried", el)
	}
	var re *kafkax.ReplicationError
	if !errors.Is(err, kafkax.ErrReplicationFactor) || !errors.As(err, &re) {
		t.Fatalf("error %v (%T) is no ReplicationError", err, err)
	}
	if re.Brokers != 1 || len(re.Topics) != 1 || re.Topics[0] != (kafkax.TopicFactor{Topic: "rf3", Factor: 3}) {
		t.Fatalf("ReplicationError %+v", re)
	}
	for _, want := range []string{"rf3", "replication factor 3", "1 broker", "--kafka-replication-factor 1", "HF_KAFKA_REPLICATION_FACTOR"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	client := kafkax.NewClient(brokers)
	st, nb, err := kafkax.DescribeTopics(ctx, client, []kafkatopics.Topic{def})
	if err != nil {
		t.Fatal(err)
	}
	if nb != 1 || st[0].Exists {
		t.Fatalf("after the refusal: %d brokers, %+v", nb, st[0])
	}

	// Told explicitly, it is created with that factor.
	if err := kafkax.EnsureTopics(ctx, brokers, []kafkatopics.Topic{def}, kafkax.WithReplicationFactor(1)); err != nil {
		t.Fatalf("with WithReplicationFactor(1): %v", err)
	}
	// The process-wide override (--kafka-replication-factor) does as well.
	kafkax.SetReplicationFactor(1)
	def2 := topicDef("rf3-global", 3, 3)
	err = kafkax.EnsureTopics(ctx, brokers, []kafkatopics.Topic{def2})
	kafkax.SetReplicationFactor(0)
	if err != nil {
		t.Fatalf("with SetReplicationFactor(1): %v", err)
	}
	// An existing topic below its declared factor is left as it is.
	if err := kafkax.EnsureTopics(ctx, brokers, []kafkatopics.Topic{def, def2}); err != nil {
		t.Fatalf("existing under-replicated topics: %v", err)
	}
	st, _, err = kafkax.DescribeTopics(ctx, client, []kafkatopics.Topic{def, def2})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{2, 3} {
		if s := st[i]; !s.Exists || s.Partitions != want || s.ReplicationFactor != 1 || !s.UnderReplicated() {
			t.Errorf("%s: %+v (under-replicated %v), want %d partitions with 1 replica", s.Declared.Name, s, s.UnderReplicated(), want)
		}
	}
	// An override above the broker count is refused as well.
	err = kafkax.EnsureTopics(ctx, brokers, []kafkatopics.Topic{topicDef("rf2", 1, 1)}, kafkax.WithReplicationFactor(2))
	if !errors.Is(err, kafkax.ErrReplicationFactor) {
		t.Fatalf("factor 2 on one broker: %v", err)
	}
}

// TestEnsureTopicsDeclaredFactorOnThreeBrokers: on three brokers every
// topic gets its declared three replicas, without any option.
func TestEnsureTopicsDeclaredFactorOnThreeBrokers(t *testing.T) {
	b := startBrokers(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if n := len(b.Addrs()); n != 3 {
		t.Fatalf("%d broker addresses, want 3", n)
	}
	if err := kafkax.EnsureAllTopics(ctx, []string{b.Addr()}); err != nil {
		t.Fatal(err)
	}
	st, nb, err := kafkax.DescribeTopics(ctx, kafkax.NewClient([]string{b.Addr()}), kafkatopics.All())
	if err != nil {
		t.Fatal(err)
	}
	if nb != 3 {
		t.Fatalf("%d brokers in the metadata, want 3", nb)
	}
	for _, s := range st {
		if !s.Exists || s.Partitions != s.Declared.Partitions || s.ReplicationFactor != s.Declared.ReplicationFactor {
			t.Errorf("%s: %+v", s.Declared.Name, s)
		}
	}
}

// TestRaisePartitions raises a topic's partitions, changes nothing at the
// same count and refuses to lower them or to touch a missing topic.
func TestRaisePartitions(t *testing.T) {
	b := startBrokers(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	brokers := []string{b.Addr()}
	def := topicDef("grow", 2, 1)
	if err := kafkax.EnsureTopics(ctx, brokers, []kafkatopics.Topic{def}); err != nil {
		t.Fatal(err)
	}
	client := kafkax.NewClient(brokers)
	if before, err := kafkax.RaisePartitions(ctx, client, "grow", 5); err != nil || before != 2 {
		t.Fatalf("raise 2 -> 5: before %d, %v", before, err)
	}
	if before, err := kafkax.RaisePartitions(ctx, client, "grow", 5); err != nil || before != 5 {
		t.Fatalf("raise 5 -> 5: before %d, %v", before, err)
	}
	var pe *kafkax.PartitionsError
	_, err := kafkax.RaisePartitions(ctx, client, "grow", 3)
	if !errors.As(err, &pe) || pe.Current != 5 || !strings.Contains(err.Error(), "cannot lower") {
		t.Fatalf("lower 5 -> 3: %v", err)
	}
	if _, err := kafkax.RaisePartitions(ctx, client, "missing", 3); !errors.As(err, &pe) || pe.Current != -1 {
		t.Fatalf("missing topic: %v", err)
	}
	st, _, err := kafkax.DescribeTopics(ctx, client, []kafkatopics.Topic{def})
	if err != nil || st[0].Partitions != 5 {
		t.Fatalf("after raising: %+v, %v", st, err)
	}
}
