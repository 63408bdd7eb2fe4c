// Package kafkatopics is the one place where harnessflow's Kafka topics are defined:
// names, partitions, replication and retention/compaction settings (docs/design.md §3).
// Every component applies these idempotently at start (internal/kafkax.EnsureTopics),
// against the embedded broker or a real cluster alike.
package kafkatopics

import "github.com/harnessflow/harnessflow/schemas"

// Class groups topics by role.
type Class string

// Topic classes.
const (
	Raw      Class = "raw"
	Internal Class = "internal"
	Derived  Class = "derived"
	DLQ      Class = "dlq"
)

// Topic is one topic definition.
type Topic struct {
	Name       string
	Class      Class
	Partitions int
	// ReplicationFactor is the replicas of each partition. A cluster with
	// fewer brokers refuses the topic (kafkax.EnsureTopics: no silent cap)
	// unless it is created with an explicit factor: the embedded broker's
	// broker count, or --kafka-replication-factor. A topic that exists keeps
	// the factor it was created with.
	ReplicationFactor int
	// Configs are Kafka topic configs (cleanup.policy, retention.ms, ...).
	Configs map[string]string
}

// MaxMessageBytes is every topic's max.message.bytes: a record batch
// carries one whole event at the schemas' 4 MiB cap (Limits.Event) with room
// to spare (Kafka's default is 1 MiB). Producers keep their batches under it
// (producers.Config.BatchBytes, default 5 MiB) and at least one event long.
const MaxMessageBytes = 8 << 20

const (
	maxMessage = "8388608" // MaxMessageBytes; TestMaxMessageBytes checks it
	week       = "604800000"
	month      = "2592000000"
	forever    = "-1"
)

// All returns every harnessflow topic definition.
//
// Raw topics keep events for a month (they are the source of truth that replay reads
// from offset 0; set retention to -1 in production if replays must cover all time).
// hf.campaigns is compacted by campaign_id: it is a small global table every
// processor reads whole. hf.outcomes is internal (re-keyed by pairing key) and
// needs only to outlive processing. Derived topics are rebuilt by replay.
func All() []Topic {
	return []Topic{
		{Name: schemas.TopicCampaigns, Class: Raw, Partitions: 1, ReplicationFactor: 3,
			Configs: map[string]string{"max.message.bytes": maxMessage, "cleanup.policy": "compact", "retention.ms": forever}},
		{Name: schemas.TopicCells, Class: Raw, Partitions: 6, ReplicationFactor: 3,
			Configs: map[string]string{"max.message.bytes": maxMessage, "cleanup.policy": "delete", "retention.ms": month}},
		{Name: schemas.TopicAttempts, Class: Raw, Partitions: 6, ReplicationFactor: 3,
			Configs: map[string]string{"max.message.bytes": maxMessage, "cleanup.policy": "delete", "retention.ms": month}},
		{Name: schemas.TopicSkillEvents, Class: Raw, Partitions: 6, ReplicationFactor: 3,
			Configs: map[string]string{"max.message.bytes": maxMessage, "cleanup.policy": "delete", "retention.ms": month}},
		{Name: schemas.TopicUpdates, Class: Raw, Partitions: 6, ReplicationFactor: 3,
			Configs: map[string]string{"max.message.bytes": maxMessage, "cleanup.policy": "delete", "retention.ms": month}},
		{Name: schemas.TopicJudgments, Class: Raw, Partitions: 6, ReplicationFactor: 3,
			Configs: map[string]string{"max.message.bytes": maxMessage, "cleanup.policy": "delete", "retention.ms": month}},
		{Name: schemas.TopicOutcomes, Class: Internal, Partitions: 6, ReplicationFactor: 3,
			Configs: map[string]string{"max.message.bytes": maxMessage, "cleanup.policy": "delete", "retention.ms": month}},
		{Name: schemas.TopicSamples, Class: Derived, Partitions: 6, ReplicationFactor: 3,
			Configs: map[string]string{"max.message.bytes": maxMessage, "cleanup.policy": "delete", "retention.ms": forever}},
		{Name: schemas.TopicRoundMetrics, Class: Derived, Partitions: 6, ReplicationFactor: 3,
			Configs: map[string]string{"max.message.bytes": maxMessage, "cleanup.policy": "delete", "retention.ms": month}},
		{Name: schemas.TopicDLQ, Class: DLQ, Partitions: 3, ReplicationFactor: 3,
			Configs: map[string]string{"max.message.bytes": maxMessage, "cleanup.policy": "delete", "retention.ms": month}},
		{Name: schemas.TopicCheckpoints, Class: Derived, Partitions: 1, ReplicationFactor: 3,
			Configs: map[string]string{"max.message.bytes": maxMessage, "cleanup.policy": "delete", "retention.ms": week}},
	}
}

// Names returns the names of every topic in All, in order.
func Names() []string {
	all := All()
	out := make([]string, len(all))
	for i, t := range all {
		out[i] = t.Name
	}
	return out
}

// Lookup returns the definition of the named topic.
func Lookup(name string) (Topic, bool) {
	for _, t := range All() {
		if t.Name == name {
			return t, true
		}
	}
	return Topic{}, false
}
