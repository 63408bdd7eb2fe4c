package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"time"

	"github.com/harnessflow/harnessflow/internal/broker"

	"github.com/segmentio/kafka-go"
	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/schemas"
)

func init() { registerBench(newBenchProduceCmd) }

func newBenchProduceCmd() *cobra.Command {
	var o benchProduceOptions
	var brokers string
	cmd := &cobra.Command{
		Use:   "produce",
		Short: "Producer SDK throughput against a raw kafka-go Writer, same broker, same run",
		Long: `bench produce writes --events task_attempt events twice against the same broker:
first with a raw kafka-go Writer given pre-encoded payloads (one WriteMessages call
per batch of --batch-size, the same writer settings as the SDK's), then through the
producers SDK, which validates and Avro-encodes every event in Emit. It prints
events/s and MB/s (keys and values) of both and the ratio SDK/raw. Each timed run
starts after a garbage collection, so that neither pays for the other's garbage
(or for building the SDK's fresh events); --cpuprofile profiles the whole run.
Goals: SDK >= 0.8 x raw and >= 100k task_attempt events/s.`,
		Example: "  harnessflow bench produce --embedded --events 200000",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.events < 1 || o.batch < 1 || o.cells < 1 || o.rounds < 1 {
				return withCode(2, errors.New("--events, --batch-size, --cells and --rounds must be positive"))
			}
			ctx := cmd.Context()
			if o.embedded {
				b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0"})
				if err != nil {
					return withCode(2, err)
				}
				defer b.Close()
				o.brokers = []string{b.Addr()}
			} else {
				o.brokers = kafkax.ParseBrokers(brokers)
				if err := kafkax.WaitReachable(ctx, o.brokers, 10*time.Second); err != nil {
					return withCode(2, err)
				}
			}
			if err := kafkax.EnsureAllTopics(ctx, o.brokers); err != nil {
				return withCode(2, err)
			}
			if o.cpuProfile != "" {
				f, err := os.Create(o.cpuProfile)
				if err != nil {
					return withCode(2, err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return withCode(2, err)
				}
				defer pprof.StopCPUProfile()
			}
			return runBenchProduce(ctx, cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&brokers, "brokers", "127.0.0.1:9092", "Kafka brokers (ignored with --embedded)")
	f.BoolVar(&o.embedded, "embedded", false, "start an in-memory embedded broker on a free port for the run")
	f.IntVar(&o.events, "events", 200000, "events written by each of the two runs")
	f.IntVar(&o.batch, "batch-size", 1000, "events per produce call (raw) and SDK BatchSize")
	f.IntVar(&o.cells, "cells", 64, "distinct cell ids (partition keys)")
	f.IntVar(&o.rounds, "rounds", 3, "alternating raw/SDK rounds; the median is reported")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (both writers) to this file")
	return cmd
}

type benchProduceOptions struct {
	brokers  []string
	embedded bool
	events   int
	batch    int
	cells    int
	rounds   int
	// cpuProfile, when set, is where a CPU profile of the run is written.
	cpuProfile string
}

type produceBenchResult struct {
	name    string
	events  int
	bytes   int64
	elapsed time.Duration
}

func (r produceBenchResult) rate() float64 { return float64(r.events) / r.elapsed.Seconds() }
func (r produceBenchResult) mbps() float64 { return float64(r.bytes) / 1e6 / r.elapsed.Seconds() }

func produceBenchAttempt(i, cells int) *schemas.TaskAttempt {
	return &schemas.TaskAttempt{
		Envelope: schemas.Envelope{
			EventTime: time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Millisecond),
			Project:   "bench", Source: "bench-produce",
		},
		CellID: fmt.Sprintf("cell-%04d", i%cells), TaskID: fmt.Sprintf("task-%07d", i), StreamIdx: int32(i),
		Cycle: int32(i / 100), Attempt: 1, HarnessVersion: fmt.Sprintf("h%d", i/100), Status: schemas.StatusOK,
		Score: float64(i%10) / 10, Success: i%2 == 0, Final: true, SkillsAvailable: 3,
		SkillsLoaded: []string{"git-bisect"}, InputTokens: 1800, OutputTokens: 420, DurationMs: 5100,
	}
}

func runBenchProduce(ctx context.Context, out io.Writer, o benchProduceOptions) error {
	// Events for the SDK run, and the same events pre-encoded for the raw run.
	evs := make([]schemas.Event, o.events)
	msgs := make([]kafka.Message, o.events)
	for i := range evs {
		ev := produceBenchAttempt(i, o.cells)
		ev.EventID = schemas.DeriveEventID(ev)
		b, err := schemas.Encode(ev)
		if err != nil {
			return withCode(2, fmt.Errorf("encode: %w", err))
		}
		msgs[i] = kafka.Message{Topic: schemas.TopicAttempts, Key: []byte(ev.CellID), Value: b}
	}
	fmt.Fprintf(out, "bench produce: %d task_attempt events, batch %d, %d cells, brokers %v\n", o.events, o.batch, o.cells, o.brokers)

	// Rounds alternate raw and SDK so that load from elsewhere on a shared
	// machine hits both alike; the median round decides.
	var raws, sdks []produceBenchResult
	var ratios []float64
	fmt.Fprintf(out, "%-6s %-14s %10s %9s %12s %9s\n", "round", "writer", "events", "seconds", "events/s", "MB/s")
	for r := 1; r <= o.rounds; r++ {
		raw, err := produceBenchRaw(ctx, o, msgs)
		if err != nil {
			return withCode(2, err)
		}
		for i := range evs { // fresh events: Emit fills the event id itself
			evs[i] = produceBenchAttempt(i, o.cells)
		}
		sdk, err := produceBenchSDK(ctx, o, evs)
		if err != nil {
			return withCode(2, err)
		}
		for _, res := range []produceBenchResult{raw, sdk} {
			fmt.Fprintf(out, "%-6d %-14s %10d %9.3f %12.0f %9.2f\n", r, res.name, res.events, res.elapsed.Seconds(), res.rate(), res.mbps())
		}
		raws, sdks = append(raws, raw), append(sdks, sdk)
		ratios = append(ratios, sdk.rate()/raw.rate())
	}
	med := func(xs []float64) float64 {
		s := append([]float64(nil), xs...)
		sort.Float64s(s)
		return s[len(s)/2]
	}
	rawRates, sdkRates := make([]float64, len(raws)), make([]float64, len(sdks))
	for i := range raws {
		rawRates[i], sdkRates[i] = raws[i].rate(), sdks[i].rate()
	}
	ratio, sdkRate := med(ratios), med(sdkRates)
	fmt.Fprintf(out, "median of %d rounds: raw %.0f events/s, sdk %.0f events/s\n", o.rounds, med(rawRates), sdkRate)
	fmt.Fprintf(out, "ratio sdk/raw: %.2f (goal >= 0.80: %s); sdk %.0f events/s (goal >= 100000: %s)\n",
		ratio, produceGoal(ratio >= 0.8), sdkRate, produceGoal(sdkRate >= 100000))
	return nil
}

func produceGoal(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// produceBenchRaw writes pre-encoded messages with a kafka-go Writer configured like
// the SDK's own (RequireAll, same batch limits, no linger), one call per batch.
func produceBenchRaw(ctx context.Context, o benchProduceOptions, msgs []kafka.Message) (produceBenchResult, error) {
	w := kafkax.NewWriter(kafkax.WriterConfig{
		Brokers: o.brokers, BatchSize: o.batch, BatchBytes: 1000000 + 64,
		BatchTimeout: time.Microsecond, WriteTimeout: 10 * time.Second, MaxAttempts: 1,
	})
	defer w.Close()
	var bytes int64
	for _, m := range msgs {
		bytes += int64(len(m.Key) + len(m.Value))
	}
	runtime.GC() // garbage of the previous round is not this round's cost
	start := time.Now()
	for i := 0; i < len(msgs); i += o.batch {
		j := min(i+o.batch, len(msgs))
		if err := w.WriteMessages(ctx, msgs[i:j]...); err != nil {
			return produceBenchResult{}, fmt.Errorf("raw writer: %w", err)
		}
	}
	return produceBenchResult{name: "raw kafka-go", events: len(msgs), bytes: bytes, elapsed: time.Since(start)}, nil
}

// produceBenchSDK emits the events through the producers SDK and waits for every
// acknowledgement (Close).
func produceBenchSDK(ctx context.Context, o benchProduceOptions, evs []schemas.Event) (produceBenchResult, error) {
	p, err := producers.New(producers.Config{Brokers: o.brokers, BatchSize: o.batch})
	if err != nil {
		return produceBenchResult{}, err
	}
	runtime.GC() // nor is building the events (same as the raw round)
	start := time.Now()
	for _, ev := range evs {
		if err := p.Emit(ctx, ev); err != nil {
			_ = p.Close(ctx)
			return produceBenchResult{}, fmt.Errorf("sdk emit: %w", err)
		}
	}
	if err := p.Close(ctx); err != nil {
		return produceBenchResult{}, fmt.Errorf("sdk: %w", err)
	}
	elapsed := time.Since(start)
	s := p.Stats()
	if s.Delivered != uint64(len(evs)) {
		return produceBenchResult{}, fmt.Errorf("sdk delivered %d of %d events", s.Delivered, len(evs))
	}
	return produceBenchResult{name: "producers SDK", events: len(evs), bytes: int64(s.Bytes), elapsed: elapsed}, nil
}
