package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/bench/fleet"
	"github.com/harnessflow/harnessflow/infra/kafkatopics"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/schemas"
)

// Floor is the mandatory work per event (issue 41), each step measured in
// the same run as the pipeline, in µs of CPU per event:
//
//   - produce: a plain kafka-go Writer sending the events, encoded
//     beforehand, keyed by cell, batched, to a scratch topic; the embedded
//     broker's CPU included (both are this process: "driver");
//   - raw read: the kafka-go group reader of the read ceiling over the raw
//     cell topics, broker included (driver);
//   - relay: the events written once more and read back, packed 64 to a
//     record as stage A packs hf.outcomes, broker included (driver);
//   - decode + validate: schemas.Decode and schemas.Validate of every
//     encoded event, in this process;
//   - insert: the clickhouse-client TSV inserts of the insert ceiling, the
//     client's and the server's CPU per row.
//
// The pipeline's figure is the throughput phase's CPU per event without the
// trainer (its work is not on the path of an event: it learns from the
// labeled samples), and Ratio is that over Sum. The ratios per process set
// each process against the steps it cannot avoid: the driver (SDK producer
// and broker) against produce plus the broker's share of the reads, the
// processors against decode + validate, the sink and ClickHouse against
// the insert.
type Floor struct {
	Events          int     `json:"events"`
	ProduceUS       float64 `json:"produce_us"`
	RawReadUS       float64 `json:"raw_read_us"`
	RelayUS         float64 `json:"relay_us"`
	DecodeUS        float64 `json:"decode_validate_us"`
	InsertClientUS  float64 `json:"insert_client_us"`
	InsertServerUS  float64 `json:"insert_server_us"`
	SumUS           float64 `json:"sum_us"`
	PipelineUS      float64 `json:"pipeline_us"`
	Ratio           float64 `json:"ratio"`
	DriverRatio     float64 `json:"driver_ratio"`
	ProcessRatio    float64 `json:"process_ratio"`
	SinkServerRatio float64 `json:"sink_clickhouse_ratio"`
	Note            string  `json:"note,omitempty"`
}

// relayPack is how many events one relay record carries (stage A packs
// hf.outcomes records of up to Config.OutcomeBatch events).
const relayPack = 64

// floorEvents bounds the events the produce, relay and decode steps use:
// enough for a steady figure, fewer than the throughput run.
const floorEvents = 400000

// usage reads pid's CPU seconds (0 and a note on failure).
func usage(pid int, notes *[]string) float64 {
	u, err := fleet.ReadUsage(pid)
	if err != nil {
		*notes = append(*notes, fmt.Sprintf("pid %d: %v", pid, err))
		return 0
	}
	return u.CPUSeconds
}

// floor measures the steps of Floor that the ceilings did not (produce,
// relay, decode + validate) on the throughput plan's events, and sums them
// with the read and insert figures the ceilings measured (readCPU: the
// driver's CPU over the read ceiling; insert: the clickhouse-client run's
// client and server CPU).
func (b *bench) floor(ctx context.Context, p plan, readEvents int64, readCPU float64, ins insertCPU, pipeline *CPU) (*Floor, error) {
	var notes []string
	var values [][]byte
	var keys [][]byte
	for k := 0; len(values) < floorEvents && k < 10; k++ {
		for _, r := range b.chunk(p, "floor", k).Records {
			v, err := schemas.Encode(r.Event)
			if err != nil {
				return nil, fmt.Errorf("encode: %w", err)
			}
			values = append(values, v)
			keys = append(keys, []byte(r.Event.PartitionKey()))
		}
	}
	n := len(values)
	f := &Floor{Events: n}
	self := os.Getpid()
	b.pr("floor: %d events: produce, relay and decode + validate, each on its own", n)

	// Produce: a batched kafka-go Writer, pre-encoded messages.
	topic := b.run + "-floor-produce"
	if err := kafkax.EnsureTopics(ctx, b.cl.Brokers(), []kafkatopics.Topic{{Name: topic, Partitions: 8, ReplicationFactor: 1}}); err != nil {
		return nil, fmt.Errorf("floor topic: %w", err)
	}
	w := &kafka.Writer{Addr: kafka.TCP(b.cl.Brokers()...), Topic: topic, Balancer: &kafka.Hash{}, BatchSize: 1000,
		BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	msgs := make([]kafka.Message, 0, 1000)
	c0 := usage(self, &notes)
	for i := 0; i < n; i++ {
		msgs = append(msgs, kafka.Message{Key: keys[i], Value: values[i]})
		if len(msgs) == cap(msgs) || i == n-1 {
			if err := w.WriteMessages(ctx, msgs...); err != nil {
				w.Close()
				return nil, fmt.Errorf("floor produce: %w", err)
			}
			msgs = msgs[:0]
		}
	}
	w.Close()
	f.ProduceUS = (usage(self, &notes) - c0) / float64(n) * 1e6

	// Relay: the same bytes packed relayPack to a record, written and read
	// back.
	rtopic := b.run + "-floor-relay"
	if err := kafkax.EnsureTopics(ctx, b.cl.Brokers(), []kafkatopics.Topic{{Name: rtopic, Partitions: 8, ReplicationFactor: 1}}); err != nil {
		return nil, fmt.Errorf("floor topic: %w", err)
	}
	w = &kafka.Writer{Addr: kafka.TCP(b.cl.Brokers()...), Topic: rtopic, Balancer: &kafka.Hash{}, BatchSize: 100,
		BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	c0 = usage(self, &notes)
	var packed []kafka.Message
	records := 0
	for i := 0; i < n; i += relayPack {
		var buf []byte
		for _, v := range values[i:min(i+relayPack, n)] {
			buf = append(buf, v...)
		}
		packed = append(packed, kafka.Message{Key: keys[i], Value: buf})
		if len(packed) == 100 || i+relayPack >= n {
			if err := w.WriteMessages(ctx, packed...); err != nil {
				w.Close()
				return nil, fmt.Errorf("floor relay write: %w", err)
			}
			records += len(packed)
			packed = packed[:0]
		}
	}
	w.Close()
	r := kafka.NewReader(kafkax.ReaderConfig(b.cl.Brokers(), b.run+"-floor-relay", rtopic))
	for got := 0; got < records; got++ {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := r.FetchMessage(rctx)
		cancel()
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("floor relay read after %d of %d records: %w", got, records, err)
		}
	}
	r.Close()
	f.RelayUS = (usage(self, &notes) - c0) / float64(n) * 1e6

	// Decode and validate, in this process.
	lim := schemas.DefaultLimits()
	c0 = usage(self, &notes)
	bad := 0
	for _, v := range values {
		ev, err := schemas.Decode(v)
		if err != nil || schemas.Validate(ev, lim) != nil {
			bad++
		}
	}
	f.DecodeUS = (usage(self, &notes) - c0) / float64(n) * 1e6
	if bad > 0 {
		notes = append(notes, fmt.Sprintf("%d events did not decode or validate", bad))
	}

	if readEvents > 0 {
		f.RawReadUS = readCPU / float64(readEvents) * 1e6
	}
	if ins.rows > 0 {
		f.InsertClientUS = ins.client / float64(ins.rows) * 1e6
		f.InsertServerUS = ins.server / float64(ins.rows) * 1e6
	}
	f.SumUS = f.ProduceUS + f.RawReadUS + f.RelayUS + f.DecodeUS + f.InsertClientUS + f.InsertServerUS
	if pipeline != nil {
		us := pipeline.USPerEvent
		f.PipelineUS = us["pipeline"] - us["train"]
		f.Ratio = div(f.PipelineUS, f.SumUS)
		f.DriverRatio = div(us["driver"], f.ProduceUS+f.RawReadUS+f.RelayUS)
		f.ProcessRatio = div(us["process"], f.DecodeUS)
		f.SinkServerRatio = div(us["sink"]+us["clickhouse"], f.InsertClientUS+f.InsertServerUS)
	} else {
		notes = append(notes, "the throughput phase has no CPU budget: no ratio")
	}
	f.Note = strings.Join(notes, "; ")
	b.pr("floor: produce %.2f + raw read %.2f + relay %.2f + decode/validate %.2f + insert %.2f (client) + %.2f (server) = %.2f µs/event; the pipeline %.2f µs/event (trainer aside): %.2f ×",
		f.ProduceUS, f.RawReadUS, f.RelayUS, f.DecodeUS, f.InsertClientUS, f.InsertServerUS, f.SumUS, f.PipelineUS, f.Ratio)
	return f, nil
}

// insertCPU is the CPU seconds the insert ceiling cost: the
// clickhouse-client processes' and the server's, over rows rows.
type insertCPU struct {
	rows           int
	client, server float64
}
