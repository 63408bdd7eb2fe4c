package kafkax

import (
	"errors"
	"fmt"
	"strings"
)

// ErrReplicationFactor is what every *ReplicationError matches with
// errors.Is: a topic asks more replicas than the cluster has brokers.
var ErrReplicationFactor = errors.New("replication factor above the broker count")

// ReplicationError is EnsureTopics' refusal to create topics whose
// replication factor is above the cluster's broker count. Nothing is capped:
// a factor-3 topic created with one replica would lose its data with its one
// broker, without a word.
type ReplicationError struct {
	// Topics are the topics refused, each with the factor it asks.
	Topics []TopicFactor
	// Brokers is how many brokers the cluster's metadata listed.
	Brokers int
	// Err is the broker's own refusal, when it was the broker that refused.
	Err error
}

// TopicFactor is a topic and the replication factor it asks.
type TopicFactor struct {
	Topic  string
	Factor int
}

func (e *ReplicationError) Error() string {
	// Topics grouped by the factor they ask, in order of appearance.
	var factors []int
	names := map[int][]string{}
	for _, t := range e.Topics {
		if _, ok := names[t.Factor]; !ok {
			factors = append(factors, t.Factor)
		}
		names[t.Factor] = append(names[t.Factor], t.Topic)
	}
	parts := make([]string, len(factors))
	for i, f := range factors {
		if n := names[f]; len(n) == 1 {
			parts[i] = fmt.Sprintf("topic %s asks replication factor %d", n[0], f)
		} else {
			parts[i] = fmt.Sprintf("topics %s ask replication factor %d", strings.Join(n, ", "), f)
		}
	}
	brokers := "brokers"
	if e.Brokers == 1 {
		brokers = "broker"
	}
	return fmt.Sprintf("%s, but the Kafka cluster has %d %s: add brokers, "+
		"or create the topics with fewer replicas with --kafka-replication-factor %d "+
		"(env HF_KAFKA_REPLICATION_FACTOR; a topic loses its data with its last replica's broker)",
		strings.Join(parts, "; "), e.Brokers, brokers, max(e.Brokers, 1))
}

// Is makes errors.Is(err, ErrReplicationFactor) true.
func (e *ReplicationError) Is(target error) bool { return target == ErrReplicationFactor }

// Unwrap returns the broker's refusal, if any.
func (e *ReplicationError) Unwrap() error { return e.Err }

// PartitionsError is RaisePartitions' refusal: the topic does not exist
// (Current -1) or has more partitions than asked (Kafka cannot remove
// partitions).
type PartitionsError struct {
	Topic          string
	Current, Asked int
}

func (e *PartitionsError) Error() string {
	if e.Current < 0 {
		return fmt.Sprintf("topic %s does not exist: create the topics first (any harnessflow component creates them at start, or `harnessflow broker`)", e.Topic)
	}
	return fmt.Sprintf("topic %s has %d partitions, more than the %d asked: Kafka cannot lower a topic's partition count "+
		"(to have fewer, create a new topic and replay into it)", e.Topic, e.Current, e.Asked)
}
