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
	parts := make([]string, len(e.Topics))
	for i, t := range e.Topics {
		parts[i] = fmt.Sprintf("%s asks replication factor %d", t.Topic, t.Factor)
	}
	return fmt.Sprintf("topic %s, but the Kafka cluster has %d broker(s): add brokers, "+
		"or create the topics with fewer replicas with --kafka-replication-factor %d "+
		"(env HF_KAFKA_REPLICATION_FACTOR; a topic loses its data with its last replica's broker)",
		strings.Join(parts, "; topic "), e.Brokers, max(e.Brokers, 1))
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
