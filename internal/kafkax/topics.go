package kafkax

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/infra/kafkatopics"
	"github.com/harnessflow/harnessflow/internal/retry"
)

// TopicOption changes how EnsureTopics creates the topics it is given.
type TopicOption func(*topicOptions)

type topicOptions struct {
	rf int // 0: SetReplicationFactor's, else each topic's declared factor
}

// WithReplicationFactor creates every missing topic with replication factor
// n instead of the factor it declares (infra/kafkatopics): the embedded
// broker passes its broker count (1), `--kafka-replication-factor` passes
// what the operator asked. It wins over SetReplicationFactor. n < 1 leaves
// the declared factors.
func WithReplicationFactor(n int) TopicOption {
	return func(o *topicOptions) { o.rf = n }
}

// replicationOverride is SetReplicationFactor's value; 0: none.
var replicationOverride atomic.Int64

// SetReplicationFactor makes n the replication factor of every topic
// EnsureTopics creates from now on in this process, unless a call passes
// WithReplicationFactor (the global flag --kafka-replication-factor sets it
// at start-up). n < 1 goes back to each topic's declared factor. Safe for
// concurrent use.
func SetReplicationFactor(n int) {
	replicationOverride.Store(int64(max(n, 0)))
}

// ReplicationFactor is the factor SetReplicationFactor set, 0 when none.
func ReplicationFactor() int { return int(replicationOverride.Load()) }

// replicationFactor is the factor EnsureTopics creates d with under o.
func (o topicOptions) replicationFactor(d kafkatopics.Topic) int {
	switch {
	case o.rf > 0:
		return o.rf
	case ReplicationFactor() > 0:
		return ReplicationFactor()
	}
	return max(d.ReplicationFactor, 1)
}

// EnsureTopics creates every topic in defs that does not exist yet, with its
// declared replication factor unless an option or SetReplicationFactor says
// otherwise. When the cluster has fewer brokers than a topic's factor it
// creates nothing and returns a *ReplicationError naming each such topic,
// at once: the factor is not capped. A topic that exists already is left as
// it is, whatever its partitions and factor (`harnessflow topics` shows
// them). It is idempotent and retries transient failures (broker still
// starting) for up to 30 s.
func EnsureTopics(ctx context.Context, brokers []string, defs []kafkatopics.Topic, opts ...TopicOption) error {
	if len(brokers) == 0 {
		return ErrNoBrokers
	}
	return EnsureTopicsWith(ctx, NewClient(brokers), defs, opts...)
}

// EnsureTopicsWith is EnsureTopics over a client the caller built (the
// embedded broker's own, which authenticates as its internal user).
func EnsureTopicsWith(ctx context.Context, client *kafka.Client, defs []kafkatopics.Topic, opts ...TopicOption) error {
	var o topicOptions
	for _, opt := range opts {
		opt(&o)
	}
	op := func() error {
		md, err := client.Metadata(ctx, &kafka.MetadataRequest{})
		if err != nil {
			return fmt.Errorf("metadata: %w", err)
		}
		existing := map[string]bool{}
		for _, t := range md.Topics {
			if t.Error == nil {
				existing[t.Name] = true
			}
		}
		nb := len(md.Brokers)
		var req kafka.CreateTopicsRequest
		short := &ReplicationError{Brokers: nb}
		for _, d := range defs {
			if existing[d.Name] {
				continue
			}
			rf := o.replicationFactor(d)
			if rf > nb {
				short.Topics = append(short.Topics, TopicFactor{Topic: d.Name, Factor: rf})
				continue
			}
			tc := kafka.TopicConfig{Topic: d.Name, NumPartitions: d.Partitions, ReplicationFactor: rf}
			for k, v := range d.Configs {
				tc.ConfigEntries = append(tc.ConfigEntries, kafka.ConfigEntry{ConfigName: k, ConfigValue: v})
			}
			req.Topics = append(req.Topics, tc)
		}
		if len(short.Topics) > 0 {
			return retry.Permanent(short)
		}
		if len(req.Topics) == 0 {
			return nil
		}
		resp, err := client.CreateTopics(ctx, &req)
		if err != nil {
			return fmt.Errorf("create topics: %w", err)
		}
		var errs []error
		refused := &ReplicationError{Brokers: nb}
		for _, tc := range req.Topics {
			terr := resp.Errors[tc.Topic]
			switch {
			case terr == nil, errors.Is(terr, kafka.TopicAlreadyExists):
			case errors.Is(terr, kafka.InvalidReplicationFactor):
				// A broker left between the metadata and the create.
				refused.Topics = append(refused.Topics, TopicFactor{Topic: tc.Topic, Factor: tc.ReplicationFactor})
				refused.Err = terr
			default:
				errs = append(errs, fmt.Errorf("create topic %s: %w", tc.Topic, terr))
			}
		}
		if len(refused.Topics) > 0 {
			return retry.Permanent(errors.Join(append(errs, refused)...))
		}
		return errors.Join(errs...)
	}
	if err := retry.Do(ctx, retry.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second, MaxElapsed: 30 * time.Second}, op, nil); err != nil {
		return fmt.Errorf("ensure topics on %s: %w", client.Addr, err)
	}
	return nil
}

// EnsureAllTopics applies every harnessflow topic definition (infra/kafkatopics).
func EnsureAllTopics(ctx context.Context, brokers []string, opts ...TopicOption) error {
	return EnsureTopics(ctx, brokers, kafkatopics.All(), opts...)
}

// TopicState is what the cluster holds of one topic, beside its declaration.
type TopicState struct {
	// Declared is the topic's definition (infra/kafkatopics); its Name is
	// the topic's.
	Declared kafkatopics.Topic
	// Exists is false when the cluster has no such topic.
	Exists bool
	// Partitions is the topic's partition count in the cluster.
	Partitions int
	// ReplicationFactor is the fewest replicas of any of its partitions.
	ReplicationFactor int
}

// UnderReplicated reports whether the topic exists with fewer replicas than
// it declares (created under an override or on a smaller cluster).
func (s TopicState) UnderReplicated() bool {
	return s.Exists && s.ReplicationFactor < s.Declared.ReplicationFactor
}

// DescribeTopics returns the cluster's state of each topic in defs, in
// order, and the cluster's broker count, as the cluster answers now (not
// from client's metadata cache).
func DescribeTopics(ctx context.Context, client *kafka.Client, defs []kafkatopics.Topic) ([]TopicState, int, error) {
	client, done := uncached(client)
	defer done()
	names := make([]string, len(defs))
	for i, d := range defs {
		names[i] = d.Name
	}
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: names})
	if err != nil {
		return nil, 0, fmt.Errorf("metadata of %s: %w", strings.Join(names, ","), err)
	}
	byName := map[string]kafka.Topic{}
	for _, t := range md.Topics {
		if t.Error == nil {
			byName[t.Name] = t
		}
	}
	out := make([]TopicState, len(defs))
	for i, d := range defs {
		out[i].Declared = d
		t, ok := byName[d.Name]
		if !ok {
			continue
		}
		out[i].Exists = true
		out[i].Partitions = len(t.Partitions)
		for j, p := range t.Partitions {
			if j == 0 || len(p.Replicas) < out[i].ReplicationFactor {
				out[i].ReplicationFactor = len(p.Replicas)
			}
		}
	}
	return out, len(md.Brokers), nil
}

// RaisePartitions raises topic's partition count to n (CreatePartitions).
// It returns the count before. n equal to the current count changes
// nothing; n below it is a *PartitionsError (Kafka cannot remove
// partitions), as is a topic the cluster does not have.
func RaisePartitions(ctx context.Context, client *kafka.Client, topic string, n int) (int, error) {
	client, done := uncached(client)
	defer done()
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return 0, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	cur := -1
	for _, t := range md.Topics {
		if t.Name == topic && t.Error == nil {
			cur = len(t.Partitions)
		}
	}
	if cur < 0 {
		return 0, &PartitionsError{Topic: topic, Current: -1, Asked: n}
	}
	if n < cur {
		return cur, &PartitionsError{Topic: topic, Current: cur, Asked: n}
	}
	if n == cur {
		return cur, nil
	}
	resp, err := client.CreatePartitions(ctx, &kafka.CreatePartitionsRequest{
		Topics: []kafka.TopicPartitionsConfig{{Name: topic, Count: int32(n)}},
	})
	if err != nil {
		return cur, fmt.Errorf("create partitions of %s: %w", topic, err)
	}
	if terr := resp.Errors[topic]; terr != nil {
		return cur, fmt.Errorf("raise %s from %d to %d partitions: %w", topic, cur, n, terr)
	}
	return cur, nil
}

// uncached returns a client like c on a transport of its own, whose first
// metadata request goes to the cluster: a kafka-go Transport answers
// metadata from a cache of up to 6 s, which misses partitions just added.
// done closes its connections.
func uncached(c *kafka.Client) (*kafka.Client, func()) {
	t := NewTransport()
	if ct, ok := c.Transport.(*kafka.Transport); ok && ct != nil {
		t.SASL, t.TLS = ct.SASL, ct.TLS
	}
	return &kafka.Client{Addr: c.Addr, Timeout: c.Timeout, Transport: t}, t.CloseIdleConnections
}
