package chaos

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/processors"
	"github.com/harnessflow/harnessflow/producers/gen"
	"github.com/harnessflow/harnessflow/schemas"
)

// Fault kinds, as named in the report and chaos.json's "faults".
const (
	FaultKillProcessors   = "kill_processors"
	FaultKillSink         = "kill_sink"
	FaultKillTrainer      = "kill_trainer"
	FaultBrokerRestart    = "broker_restart"
	FaultClickHouseOutage = "clickhouse_outage"
	// FaultProduceError answers produce requests with KAFKA_STORAGE_ERROR
	// (nothing appended) for a burst.
	FaultProduceError = "kafka_produce_error"
	// FaultFetchError answers fetch requests with KAFKA_STORAGE_ERROR.
	FaultFetchError = "kafka_fetch_error"
	// FaultNotLeader answers produce and fetch requests with
	// NOT_LEADER_FOR_PARTITION.
	FaultNotLeader = "kafka_not_leader"
	// FaultTimeout answers produce requests with REQUEST_TIMED_OUT after
	// appending them (the retry duplicates them in the log) and holds fetch
	// answers for Config.KafkaDelay.
	FaultTimeout = "kafka_request_timeout"
	// FaultMalformed counts the malformed events mixed into the stream.
	FaultMalformed = "malformed_events"
)

// campaign generates the run's campaign: whole agents until cfg.Events good
// events are reached.
func campaign(cfg *Config) *gen.Campaign {
	gc := gen.Config{Seed: cfg.Seed, Campaign: fmt.Sprintf("chaos-%d", cfg.Seed), Agents: 1,
		Evolvers: cfg.Evolvers, Rounds: cfg.Rounds, TasksPerRound: cfg.Tasks}
	one := len(gen.Generate(gc).Records)
	gc.Agents = max(1, int(math.Ceil(float64(cfg.Events)/float64(one))))
	return gen.Generate(gc)
}

// malformed is one bad message mixed into the raw topics.
type malformed struct {
	// After is the index of the good record it follows in the stream.
	After int
	// Kind describes it (garbage, truncated_avro, json, unknown_fingerprint).
	Kind string
	// Reason is the DLQ reason code the processors must give it.
	Reason string
	Msg    kafka.Message
}

// malformedKinds and the reason code each must be dead-lettered with.
var malformedKinds = []struct{ kind, reason string }{
	{"garbage", schemas.CodeMalformed},
	{"truncated_avro", schemas.CodeMalformed},
	{"json", schemas.CodeMalformed},
	{"unknown_fingerprint", schemas.CodeUnknownFingerprint},
}

// malformedEvents builds the campaign's malformed messages: a fraction of the
// good events, at seeded positions, on the raw cell topics, keyed by one of
// the campaign's cells; every payload is unique.
func malformedEvents(cfg *Config, c *gen.Campaign, msgs map[string][]kafka.Message) []malformed {
	if cfg.MalformedFraction <= 0 {
		return nil
	}
	n := int(math.Round(cfg.MalformedFraction * float64(len(c.Records))))
	if n == 0 {
		n = 1
	}
	rng := rand.New(rand.NewSource(cfg.Seed ^ 0x6d616c66))
	out := make([]malformed, 0, n)
	truncated := 0
	for i := 0; i < n; i++ {
		k := malformedKinds[i%len(malformedKinds)]
		topic := processors.CellTopics[rng.Intn(len(processors.CellTopics))]
		cell := c.Cells[rng.Intn(len(c.Cells))]
		tag := fmt.Sprintf("chaos-%d-bad-%d", cfg.Seed, i)
		var v []byte
		switch k.kind {
		case "garbage":
			v = append([]byte(tag+":"), randomBytes(rng, 16+rng.Intn(48))...)
		case "truncated_avro":
			// A real task_attempt, encoded, its last 1-8 bytes cut: the
			// decoder follows the same path as on the whole encoding and
			// runs out of input. Each cut has its own source event (whose
			// id leads the body), so the payloads are unique.
			src := msgs[schemas.TopicAttempts]
			full := src[truncated%len(src)].Value
			truncated++
			v = append([]byte(nil), full[:len(full)-1-rng.Intn(8)]...)
		case "json":
			v = []byte(fmt.Sprintf(`{"type":"task_attempt","event_id":%q,"project":"proj","source":"chaos","cell_id":%q,"task_id":"task-000","cycle":1,"attempt":1,"harness_version":"h0","status":"ok","score":0.5,"success":true,"final":true}`, tag, cell))
		case "unknown_fingerprint":
			v = []byte{schemas.SingleObjectMagic[0], schemas.SingleObjectMagic[1]}
			v = binary.LittleEndian.AppendUint64(v, 0xC4A05_0000_0000^uint64(cfg.Seed)<<20^uint64(i))
			v = append(v, []byte(tag)...)
		}
		out = append(out, malformed{Kind: k.kind, Reason: k.reason,
			Msg: kafka.Message{Topic: topic, Key: []byte(cell), Value: v}})
	}
	// Seeded positions, spread over the stream.
	pos := rng.Perm(len(c.Records))[:n]
	sort.Ints(pos)
	for i := range out {
		out[i].After = pos[i]
	}
	return out
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	rng.Read(b)
	return b
}

// fault is one planned fault: it fires when the producer has emitted At (a
// fraction) of the good events.
type fault struct {
	At   float64
	Kind string
	// Downtime is the pause between a SIGKILL and the restart.
	Downtime time.Duration
}

func (f fault) String() string {
	if f.Downtime > 0 {
		return fmt.Sprintf("%5.1f%% %s (down %v)", 100*f.At, f.Kind, f.Downtime.Round(time.Millisecond))
	}
	return fmt.Sprintf("%5.1f%% %s", 100*f.At, f.Kind)
}

// planFaults draws the fault plan from the seed: each fault at a uniform
// moment between 5 % and 95 % of the produce stream, sorted by moment.
func planFaults(cfg *Config) []fault {
	rng := rand.New(rand.NewSource(cfg.Seed ^ 0x6661756c))
	var out []fault
	add := func(kind string, n int, down bool) {
		if slices.Contains(cfg.Skip, kind) {
			return
		}
		for i := 0; i < count(n); i++ {
			f := fault{At: 0.05 + 0.9*rng.Float64(), Kind: kind}
			if down && cfg.MaxDowntime > 0 {
				f.Downtime = time.Duration(rng.Int63n(int64(cfg.MaxDowntime)))
			}
			out = append(out, f)
		}
	}
	add(FaultKillProcessors, cfg.Kills, true)
	add(FaultKillSink, cfg.Kills, true)
	add(FaultKillTrainer, cfg.Kills, true)
	add(FaultBrokerRestart, cfg.BrokerRestarts, false)
	add(FaultClickHouseOutage, cfg.ClickHouseOutages, false)
	for _, k := range []string{FaultProduceError, FaultFetchError, FaultNotLeader, FaultTimeout} {
		add(k, cfg.KafkaBursts, false)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

// planString renders the plan, one fault per line.
func planString(plan []fault) string {
	var b strings.Builder
	for _, f := range plan {
		b.WriteString("  " + f.String() + "\n")
	}
	return b.String()
}
