package stages

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/pprof"
	"sort"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/broker"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/schemas"
)

// Defaults of ProduceConfig (and of `harnessflow bench produce`'s flags).
const (
	// DefaultProduceEvents is the events each of the two writers writes per
	// round.
	DefaultProduceEvents = 200000
	// DefaultProduceBatch is the events per produce call of the raw writer
	// and the SDK's BatchSize.
	DefaultProduceBatch = 1000
	// DefaultProduceCells is the number of distinct cell ids (partition keys).
	DefaultProduceCells = 64
	// DefaultProduceRounds is the number of alternating raw/SDK rounds.
	DefaultProduceRounds = 3
	// produceConnectWait bounds the wait for a reachable broker.
	produceConnectWait = 10 * time.Second
)

// ProduceConfig sizes `harnessflow bench produce`.
type ProduceConfig struct {
	// Brokers to write to; they must be reachable within 10s. Required
	// unless Embedded.
	Brokers []string
	// Embedded starts an in-memory embedded broker on a free port for the
	// run instead (Brokers is then ignored). Default: false.
	Embedded bool
	// Events is the number of task_attempt events written by each writer in
	// each round. Default: DefaultProduceEvents.
	Events int
	// Batch is the events per produce call of the raw writer and the SDK's
	// BatchSize. Default: DefaultProduceBatch.
	Batch int
	// Cells is the number of distinct cell ids (partition keys). Default:
	// DefaultProduceCells.
	Cells int
	// Rounds alternate the raw writer and the SDK; the median is reported.
	// Default: DefaultProduceRounds.
	Rounds int
	// CPUProfile, when set, receives a pprof CPU profile of the whole run
	// (both writers, every round). Default: nil.
	CPUProfile io.Writer
}

func (c *ProduceConfig) setDefaults() {
	if c.Events == 0 {
		c.Events = DefaultProduceEvents
	}
	if c.Batch == 0 {
		c.Batch = DefaultProduceBatch
	}
	if c.Cells == 0 {
		c.Cells = DefaultProduceCells
	}
	if c.Rounds == 0 {
		c.Rounds = DefaultProduceRounds
	}
}

// Validate reports every size that is not positive, joined.
func (c *ProduceConfig) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{{"events", c.Events}, {"batch", c.Batch}, {"cells", c.Cells}, {"rounds", c.Rounds}} {
		if f.v < 1 {
			errs = append(errs, fmt.Errorf("%s %d: must be positive", f.name, f.v))
		}
	}
	return errors.Join(errs...)
}

// produceResult is one writer's round.
type produceResult struct {
	name    string
	events  int
	bytes   int64
	elapsed time.Duration
}

func (r produceResult) rate() float64 { return float64(r.events) / r.elapsed.Seconds() }
func (r produceResult) mbps() float64 { return float64(r.bytes) / 1e6 / r.elapsed.Seconds() }

// Produce writes cfg.Events task_attempt events per round twice against the
// same broker: with a raw kafka-go Writer given pre-encoded payloads (one
// WriteMessages call per batch, the SDK's writer settings), then through
// the producers SDK, which validates and Avro-encodes every event in Emit.
// It prints each round's events/s and MB/s to out, then the medians and the
// ratio SDK/raw against their goals (>= 0.8 x raw, >= 100k events/s).
func Produce(ctx context.Context, cfg ProduceConfig, out io.Writer) error {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("bench produce config: %w", err)
	}
	if cfg.Embedded {
		b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0"})
		if err != nil {
			return err
		}
		defer b.Close()
		cfg.Brokers = []string{b.Addr()}
		if err := kafkax.EnsureAllTopics(ctx, cfg.Brokers, b.TopicOption()); err != nil {
			return err
		}
	} else if err := kafkax.WaitReachable(ctx, cfg.Brokers, produceConnectWait); err != nil {
		return err
	}
	if err := kafkax.EnsureAllTopics(ctx, cfg.Brokers); err != nil {
		return err
	}
	if cfg.CPUProfile != nil {
		if err := pprof.StartCPUProfile(cfg.CPUProfile); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	return produceRounds(ctx, cfg, out)
}

// produceAttempt is the i-th event of the bench, over cells cells.
func produceAttempt(i, cells int) *schemas.TaskAttempt {
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

// produceRounds runs cfg.Rounds rounds of both writers and prints them and
// their medians.
func produceRounds(ctx context.Context, cfg ProduceConfig, out io.Writer) error {
	// Events for the SDK run, and the same events pre-encoded for the raw run.
	evs := make([]schemas.Event, cfg.Events)
	msgs := make([]kafka.Message, cfg.Events)
	for i := range evs {
		ev := produceAttempt(i, cfg.Cells)
		ev.EventID = schemas.DeriveEventID(ev)
		b, err := schemas.Encode(ev)
		if err != nil {
			return fmt.Errorf("encode: %w", err)
		}
		msgs[i] = kafka.Message{Topic: schemas.TopicAttempts, Key: []byte(ev.CellID), Value: b}
	}
	fmt.Fprintf(out, "bench produce: %d task_attempt events, batch %d, %d cells, brokers %v\n", cfg.Events, cfg.Batch, cfg.Cells, cfg.Brokers)

	// Rounds alternate raw and SDK so that load from elsewhere on a shared
	// machine hits both alike; the median round decides.
	var raws, sdks []produceResult
	var ratios []float64
	fmt.Fprintf(out, "%-6s %-14s %10s %9s %12s %9s\n", "round", "writer", "events", "seconds", "events/s", "MB/s")
	for r := 1; r <= cfg.Rounds; r++ {
		raw, err := produceRaw(ctx, cfg, msgs)
		if err != nil {
			return err
		}
		for i := range evs { // fresh events: Emit fills the event id itself
			evs[i] = produceAttempt(i, cfg.Cells)
		}
		sdk, err := produceSDK(ctx, cfg, evs)
		if err != nil {
			return err
		}
		for _, res := range []produceResult{raw, sdk} {
			fmt.Fprintf(out, "%-6d %-14s %10d %9.3f %12.0f %9.2f\n", r, res.name, res.events, res.elapsed.Seconds(), res.rate(), res.mbps())
		}
		raws, sdks = append(raws, raw), append(sdks, sdk)
		ratios = append(ratios, sdk.rate()/raw.rate())
	}
	rawRates, sdkRates := make([]float64, len(raws)), make([]float64, len(sdks))
	for i := range raws {
		rawRates[i], sdkRates[i] = raws[i].rate(), sdks[i].rate()
	}
	ratio, sdkRate := median(ratios), median(sdkRates)
	fmt.Fprintf(out, "median of %d rounds: raw %.0f events/s, sdk %.0f events/s\n", cfg.Rounds, median(rawRates), sdkRate)
	fmt.Fprintf(out, "ratio sdk/raw: %.2f (goal >= 0.80: %s); sdk %.0f events/s (goal >= 100000: %s)\n",
		ratio, goal(ratio >= 0.8), sdkRate, goal(sdkRate >= 100000))
	return nil
}

// median is the middle of xs (the upper one of an even count).
func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// goal words whether a goal was met.
func goal(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// produceRaw writes pre-encoded messages with a kafka-go Writer configured
// like the SDK's own (RequireAll, same batch limits, no linger), one call
// per batch.
func produceRaw(ctx context.Context, cfg ProduceConfig, msgs []kafka.Message) (produceResult, error) {
	w := kafkax.NewWriter(kafkax.WriterConfig{
		Brokers: cfg.Brokers, BatchSize: cfg.Batch, BatchBytes: 1000000 + 64,
		BatchTimeout: time.Microsecond, WriteTimeout: 10 * time.Second, MaxAttempts: 1,
	})
	defer w.Close()
	var bytes int64
	for _, m := range msgs {
		bytes += int64(len(m.Key) + len(m.Value))
	}
	runtime.GC() // garbage of the previous round is not this round's cost
	start := time.Now()
	for i := 0; i < len(msgs); i += cfg.Batch {
		j := min(i+cfg.Batch, len(msgs))
		if err := w.WriteMessages(ctx, msgs[i:j]...); err != nil {
			return produceResult{}, fmt.Errorf("raw writer: %w", err)
		}
	}
	return produceResult{name: "raw kafka-go", events: len(msgs), bytes: bytes, elapsed: time.Since(start)}, nil
}

// produceSDK emits the events through the producers SDK and waits for every
// acknowledgement (Close).
func produceSDK(ctx context.Context, cfg ProduceConfig, evs []schemas.Event) (produceResult, error) {
	p, err := producers.New(producers.Config{Brokers: cfg.Brokers, BatchSize: cfg.Batch})
	if err != nil {
		return produceResult{}, err
	}
	runtime.GC() // nor is building the events (same as the raw round)
	start := time.Now()
	for _, ev := range evs {
		if err := p.Emit(ctx, ev); err != nil {
			_ = p.Close(ctx)
			return produceResult{}, fmt.Errorf("sdk emit: %w", err)
		}
	}
	if err := p.Close(ctx); err != nil {
		return produceResult{}, fmt.Errorf("sdk: %w", err)
	}
	elapsed := time.Since(start)
	s := p.Stats()
	if s.Delivered != uint64(len(evs)) {
		return produceResult{}, fmt.Errorf("sdk delivered %d of %d events", s.Delivered, len(evs))
	}
	return produceResult{name: "producers SDK", events: len(evs), bytes: int64(s.Bytes), elapsed: elapsed}, nil
}
