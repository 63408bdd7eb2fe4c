// Package e2e is `harnessflow bench e2e`: the whole pipeline, co-located on
// one machine (embedded broker, managed clickhouse-server, and the real
// `process`, `sink` and `train` components as child processes), measured in
// one run against ceilings measured side by side:
//
//   - rss 1x/10x: Events/10 generated events, then 10x as many, as
//     campaigns of Events/40 paced at RSSRate events/s, through fresh
//     children; their peak RSS after each (the same load, 10x the stream
//     length);
//   - latency:    a paced campaign at LatencyRate events/s; produce -> visible
//     in ClickHouse for a sample of task attempts, polled every PollEvery;
//   - throughput: Events generated events in 10 sequential chunks of the 1x
//     size (the same width, 10x the stream length), produced through the Go
//     SDK; end to end = events / (first Emit until every raw row, labeled
//     sample and round metric is visible); the children's peak RSS over
//     the latency and throughput phases is the backlog figure;
//   - ceilings:   a plain kafka-go group reader over the raw cell topics, and
//     clickhouse-client inserting the same rows from TSV into twin tables;
//   - storm:      the throughput load again with MalformedPct malformed
//     messages mixed in; the rate beside the clean one, and every malformed
//     message asserted in rejected_events with its reason code;
//   - peer:       ClickHouse's Kafka table engine reading the same attempts as
//     JSONEachRow from the same broker into a twin of task_attempts.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/rs/zerolog"

	"github.com/harnessflow/harnessflow/bench/fleet"
	"github.com/harnessflow/harnessflow/internal/chx"
)

// Config sizes a run. Zero fields take the defaults.
type Config struct {
	// Bin is the harnessflow executable the children run. Required.
	Bin string
	// Dir holds the cluster's data and logs. Default: a new temporary
	// directory, removed at the end unless Keep.
	Dir string
	// Keep leaves Dir in place. Default: false.
	Keep bool
	// Events is the size of the throughput run (and of the storm).
	// Default: 2000000.
	Events int
	// LatencyRate is the offered load of the latency phase in events/s.
	// Default: 10000.
	LatencyRate int
	// LatencyDuration is how long the latency phase produces. Default: 30s.
	LatencyDuration time.Duration
	// LatencySample: one task attempt in LatencySample is timed.
	// Default: 50.
	LatencySample int
	// PollEvery is the latency poll period of ClickHouse. Default: 50ms.
	PollEvery time.Duration
	// MalformedPct is the storm's share of malformed messages, in percent
	// of the events. Default: 1. Negative: skip the storm.
	MalformedPct float64
	// StormBlocks is how many blocks the storm alternates, a multiple of 4
	// (groups S C C S). Default: 16.
	StormBlocks int
	// SkipPeer skips the Kafka table engine peer. Default: false.
	SkipPeer bool
	// PeerTimeout bounds the peer phase. Default: 60s.
	PeerTimeout time.Duration
	// RSSRate paces the 1x and 10x RSS phases, in events/s. Default: 25000.
	RSSRate int
	// RSSTolerance is how much the 10x peak RSS may exceed the 1x peak, as
	// a fraction, for the "flat" goal. Default: 0.5.
	RSSTolerance float64
	// Client is the clickhouse-client binary. Default: found on PATH.
	Client string
	// PhaseTimeout bounds the wait for one phase's rows (a wait also ends
	// when the counts stop changing for 1 min with the processors caught
	// up, or for 3 min at all). Default: 20m.
	PhaseTimeout time.Duration
	// CPUProfile, when set, receives a pprof CPU profile of this process
	// (the SDK producer, the load generator and the embedded broker) over
	// the throughput phase. Default: none.
	CPUProfile io.Writer
	// ProcessArgs, SinkArgs and TrainArgs are passed on to the children.
	ProcessArgs, SinkArgs, TrainArgs []string
	// LatencyOnly runs the latency phase alone (no RSS, throughput,
	// ceilings, storm or peer): for side-by-side runs of a latency change
	// (A B A B with different SinkArgs). Default: false.
	LatencyOnly bool
	// Command is recorded in the result. Default: "harnessflow bench e2e".
	Command string
	// Progress receives readable progress lines. Default: discarded.
	Progress io.Writer
}

// DefaultConfig is the configuration Run fills in for the fields left zero:
// what `harnessflow bench e2e` runs without flags (Bin, Dir and Client are
// left empty: found at run time).
func DefaultConfig() Config {
	var c Config
	c.setDefaults()
	return c
}

func (c *Config) setDefaults() {
	if c.Events == 0 {
		c.Events = 2000000
	}
	if c.LatencyRate == 0 {
		c.LatencyRate = 10000
	}
	if c.LatencyDuration == 0 {
		c.LatencyDuration = 30 * time.Second
	}
	if c.LatencySample == 0 {
		c.LatencySample = 50
	}
	if c.PollEvery == 0 {
		c.PollEvery = 50 * time.Millisecond
	}
	if c.MalformedPct == 0 {
		c.MalformedPct = 1
	}
	if c.StormBlocks == 0 {
		c.StormBlocks = 16
	}
	if c.PeerTimeout == 0 {
		c.PeerTimeout = 60 * time.Second
	}
	if c.RSSRate == 0 {
		c.RSSRate = 25000
	}
	if c.RSSTolerance == 0 {
		c.RSSTolerance = 0.5
	}
	if c.PhaseTimeout == 0 {
		c.PhaseTimeout = 20 * time.Minute
	}
	if c.Command == "" {
		c.Command = "harnessflow bench e2e"
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

// Validate reports every problem of the configuration, joined.
func (c *Config) Validate() error {
	var errs []error
	if c.Bin == "" {
		errs = append(errs, errors.New("bin: the harnessflow executable is required"))
	}
	if c.Events < 1000 {
		errs = append(errs, fmt.Errorf("events %d: need at least 1000", c.Events))
	}
	if c.LatencyRate < 100 {
		errs = append(errs, fmt.Errorf("latency rate %d: need at least 100 events/s", c.LatencyRate))
	}
	if c.LatencyDuration < time.Second {
		errs = append(errs, fmt.Errorf("latency duration %s: need at least 1s", c.LatencyDuration))
	}
	if c.LatencySample < 1 {
		errs = append(errs, fmt.Errorf("latency sample %d: must be at least 1", c.LatencySample))
	}
	if c.MalformedPct > 50 {
		errs = append(errs, fmt.Errorf("malformed pct %g: at most 50", c.MalformedPct))
	}
	if c.StormBlocks < 4 || c.StormBlocks%4 != 0 {
		errs = append(errs, fmt.Errorf("storm blocks %d: must be a multiple of 4 (groups storm, clean, clean, storm)", c.StormBlocks))
	}
	if c.RSSRate < 100 {
		errs = append(errs, fmt.Errorf("rss rate %d: need at least 100 events/s", c.RSSRate))
	}
	if c.RSSTolerance < 0 {
		errs = append(errs, fmt.Errorf("rss tolerance %g: must not be negative", c.RSSTolerance))
	}
	return errors.Join(errs...)
}

// Result is what a run measured; it is written as bench/results/e2e.json.
type Result struct {
	Date    string  `json:"date"`
	Command string  `json:"command"`
	Machine Machine `json:"machine"`

	// Events is the number of events of the throughput run (Config.Events,
	// rounded up to whole generated chunks).
	Events int `json:"events"`
	// ProduceEventsPerS is the SDK's rate: events / (first Emit until
	// Flush returned, every event acknowledged).
	ProduceEventsPerS float64 `json:"produce_events_per_s"`
	// E2EEventsPerS is events / (first Emit until every expected row is
	// visible in ClickHouse, deduplicated).
	E2EEventsPerS float64 `json:"e2e_events_per_s"`
	// Throughput holds the timings behind both rates.
	Throughput Phase `json:"throughput"`

	Latency Latency `json:"latency_ms"`
	RSSMB   RSS     `json:"rss_mb"`
	// LiveHeapMB is the children's largest go_gc_heap_live_bytes over the
	// same runs as RSSMB: their state, without the garbage awaiting the
	// next GC that their RSS also holds (before a child's first GC, its
	// allocated heap stands in: fleet.Proc.PeakLiveHeapMB).
	LiveHeapMB LiveHeap `json:"live_heap_mb"`
	Ceilings   Ceilings `json:"ceilings"`
	// Floor is the mandatory work per event, measured in the same run, and
	// the pipeline's CPU per event as a ratio to it (issue 41).
	Floor  *Floor             `json:"floor,omitempty"`
	Ratios map[string]float64 `json:"ratios"`
	Peer   Peer               `json:"peer"`
	Storm  Storm              `json:"storm"`
	Goals  []Goal             `json:"goals"`
	// Errors lists the assertions that failed (the run then exits 1).
	Errors    []string `json:"errors,omitempty"`
	DurationS float64  `json:"duration_s"`
}

// Phase is one produce-and-wait run.
type Phase struct {
	Events      int     `json:"events"`
	Chunks      int     `json:"chunks"`
	ProduceS    float64 `json:"produce_s"`
	ProcessedS  float64 `json:"processed_s"`
	RawVisibleS float64 `json:"raw_visible_s"`
	VisibleS    float64 `json:"visible_s"`
	// PacedPerS is the paced emit rate, 0 when unpaced.
	PacedPerS float64 `json:"paced_events_per_s,omitempty"`
	// PollMS is the period at which visibility was polled; Polls how many
	// polls ran until the rows were visible, and PollQueryS the wall time
	// of their queries in ClickHouse: the measurement's own load on the
	// server, inside the CPU budget.
	PollMS     float64 `json:"poll_ms"`
	Polls      int     `json:"polls"`
	PollQueryS float64 `json:"poll_query_s"`
	// ReachedS is, per table, the time from the first emit to the poll that
	// saw the table reach its expected rows (tables expected empty left
	// out): which table was last.
	ReachedS map[string]float64 `json:"reached_s,omitempty"`
	Expected Counts             `json:"expected_rows"`
	Got      Counts             `json:"rows"`
	// CPU is where the CPU went from the first emit until the rows were
	// visible (nil when the phase did not complete).
	CPU *CPU `json:"cpu,omitempty"`
}

// Latency is produce -> visible in ClickHouse at a fixed offered load.
type Latency struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
	// OfferedPerS is the paced load; AchievedPerS what was emitted.
	OfferedPerS  float64 `json:"offered_events_per_s"`
	AchievedPerS float64 `json:"achieved_events_per_s"`
	DurationS    float64 `json:"duration_s"`
	Samples      int     `json:"samples"`
	// PollMS is the configured poll period, MeanPollMS the period actually
	// achieved (query time included): the resolution of every figure.
	PollMS     float64 `json:"poll_ms"`
	MeanPollMS float64 `json:"mean_poll_ms"`
	What       string  `json:"what"`
	// CPU is the paced campaign's CPU budget, from its first emit until
	// all of it was visible.
	CPU *CPU `json:"cpu,omitempty"`
	// Incomplete: the phase failed (its figures are partial; the goal is
	// not met).
	Incomplete bool `json:"incomplete,omitempty"`
}

// RSS is the children's peak resident memory in MiB. The 1x and 10x
// figures come from the same paced load (RatePerS), 10x the events; the 10x
// figure is the peak since the children started (1x included). The backlog
// figures are the peak over the phases after a reset (latency at
// LatencyRate, then the unpaced throughput run), where the processors hold
// what the log-time windows cover at the producer's rate (see
// bench/README.md).
type RSS struct {
	Process1x  float64 `json:"process_1x"`
	Process10x float64 `json:"process_10x"`
	Sink1x     float64 `json:"sink_1x"`
	Sink10x    float64 `json:"sink_10x"`
	Train1x    float64 `json:"train_1x"`
	Train10x   float64 `json:"train_10x"`
	Events1x   int     `json:"events_1x"`
	Events10x  int     `json:"events_10x"`
	RatePerS   float64 `json:"rate_per_s"`
	Tolerance  float64 `json:"tolerance"`

	ProcessBacklog float64 `json:"process_backlog"`
	SinkBacklog    float64 `json:"sink_backlog"`
	TrainBacklog   float64 `json:"train_backlog"`
	BacklogNote    string  `json:"backlog_note,omitempty"`
}

// LiveHeap is the children's peak live heap in MiB per run (see RSS).
type LiveHeap struct {
	Process1x      float64 `json:"process_1x"`
	Process10x     float64 `json:"process_10x"`
	ProcessBacklog float64 `json:"process_backlog"`
	Sink1x         float64 `json:"sink_1x"`
	Sink10x        float64 `json:"sink_10x"`
	SinkBacklog    float64 `json:"sink_backlog"`
	Train1x        float64 `json:"train_1x"`
	Train10x       float64 `json:"train_10x"`
	TrainBacklog   float64 `json:"train_backlog"`
}

// Ceilings are measured in the same run, on the same broker and server.
type Ceilings struct {
	KafkaReadEventsPerS      float64 `json:"kafka_go_read_events_per_s"`
	KafkaReadEvents          int64   `json:"kafka_go_read_events"`
	ClickHouseClientRowsPerS float64 `json:"clickhouse_client_insert_rows_per_s"`
	ClickHouseClientRows     int     `json:"clickhouse_client_insert_rows"`
	ClickHouseClientS        float64 `json:"clickhouse_client_insert_s"`
	// The CPU the read and insert ceilings cost (Floor).
	readCPU float64
	insert  insertCPU
}

// Peer is ClickHouse's Kafka table engine on the same events.
type Peer struct {
	Engine      string  `json:"engine"`
	Status      string  `json:"status"`
	Reason      string  `json:"reason,omitempty"`
	Rows        int     `json:"rows"`
	RowsVisible int     `json:"rows_visible"`
	Seconds     float64 `json:"seconds,omitempty"`
	RowsPerS    float64 `json:"rows_per_s,omitempty"`
	Table       string  `json:"table"`
}

// Storm is the throughput load with malformed messages mixed in, measured
// in blocks that alternate with the same clean load (stormOrder).
type Storm struct {
	Skipped      bool    `json:"skipped,omitempty"`
	MalformedPct float64 `json:"malformed_pct"`
	// Events is the storm blocks' events (malformed messages not counted).
	Events        int `json:"events"`
	MalformedSent int `json:"malformed_sent"`
	DLQRows       int `json:"dlq_rows"`
	// DLQRows counts malformed messages found in rejected_events as
	// dead-lettered by the processors, DLQByReason by reason code.
	DLQByReason map[string]int `json:"dlq_by_reason"`
	// SinkDLQRows counts the sink's own decode-failure rows for the same
	// messages (it reads the raw topics too).
	SinkDLQRows  int            `json:"sink_dlq_rows"`
	SentByReason map[string]int `json:"sent_by_reason"`
	// E2EEventsPerS is the storm blocks' events over their summed time
	// to visibility; CleanPerS the same of the clean blocks between them.
	E2EEventsPerS float64 `json:"e2e_events_per_s"`
	CleanPerS     float64 `json:"clean_e2e_events_per_s"`
	// RateRatio is storm / clean (goal: > 0.9, a drop under 10 %).
	RateRatio float64 `json:"rate_ratio"`
	// GroupRatios is the same ratio within each group of four blocks
	// (S C C S), in order: the spread of the machine's noise around
	// RateRatio.
	GroupRatios []float64    `json:"group_ratios"`
	Blocks      []StormBlock `json:"blocks"`
}

// StormBlock is one phase of the storm, with or without malformed messages
// (its events are Phase.Events).
type StormBlock struct {
	Name          string  `json:"name"`
	Malformed     bool    `json:"malformed"`
	E2EEventsPerS float64 `json:"e2e_events_per_s"`
	Phase         Phase   `json:"phase"`
}

// Goal is one of issue 7's goals.
type Goal struct {
	Name   string  `json:"name"`
	Target string  `json:"target"`
	Value  float64 `json:"value"`
	Met    bool    `json:"met"`
}

// Machine describes where the run happened.
type Machine struct {
	Cores      int     `json:"cores"`
	MemoryGiB  float64 `json:"memory_gib"`
	CPU        string  `json:"cpu"`
	OS         string  `json:"os"`
	Kernel     string  `json:"kernel"`
	Go         string  `json:"go"`
	ClickHouse string  `json:"clickhouse"`
}

// Run performs the whole benchmark. It returns the result with an error
// when an assertion failed (rows missing, DLQ incomplete), so that the
// figures can still be written.
func Run(ctx context.Context, cfg Config, opts ...Option) (*Result, error) {
	o := newOptions(opts)
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bench e2e config: %w", err)
	}
	began := time.Now()
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "hf-bench-e2e-")
		if err != nil {
			return nil, err
		}
		cfg.Dir = d
	}
	if !cfg.Keep {
		defer os.RemoveAll(cfg.Dir)
	}
	pr := func(format string, a ...any) { fmt.Fprintf(cfg.Progress, format+"\n", a...) }
	pr("bench e2e: starting broker, clickhouse-server and the process, sink and train children in %s", cfg.Dir)
	cl, err := fleet.StartCluster(ctx, fleet.ClusterConfig{Dir: cfg.Dir, Bin: cfg.Bin,
		ProcessArgs: cfg.ProcessArgs, SinkArgs: cfg.SinkArgs, TrainArgs: cfg.TrainArgs,
		Env: []string{"HF_LOG_LEVEL=warn"}})
	if err != nil {
		return nil, fmt.Errorf("start cluster: %w", err)
	}
	defer func() {
		if err := cl.Close(); err != nil {
			o.log.Warn().Err(err).Msg("cluster close")
		}
	}()
	if err := cl.StartAll(); err != nil {
		return nil, err
	}
	if err := cl.WaitMetrics(ctx); err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, log: o.log, cl: cl, pr: pr, run: fmt.Sprintf("e2e%d", time.Now().Unix()%1000000), reqs: countRequests(cl.Broker().Cluster())}
	res := &Result{Date: time.Now().UTC().Format(time.RFC3339), Command: cfg.Command, Ratios: map[string]float64{}}
	res.Machine = machine(ctx, cl)
	pr("bench e2e: %d cores, %.1f GiB, %s, ClickHouse %s, logs in %s", res.Machine.Cores, res.Machine.MemoryGiB,
		res.Machine.CPU, res.Machine.ClickHouse, filepath.Join(cfg.Dir, "logs"))
	err = b.run1(ctx, res)
	res.DurationS = time.Since(began).Seconds()
	res.Goals = goals(res)
	for _, p := range cl.Children() {
		if !p.Running() {
			err = errors.Join(err, fmt.Errorf("%s exited during the run (%v); see %s", p.Name, p.ExitErr(), p.LogPath))
		}
	}
	return res, err
}

type bench struct {
	cfg Config
	log zerolog.Logger
	cl  *fleet.Cluster
	pr  func(string, ...any)
	run string // prefix of every campaign id of this run
	// reqs counts the embedded broker's requests (CPU budgets).
	reqs *reqCounter
}

func (b *bench) run1(ctx context.Context, res *Result) error {
	cfg := b.cfg
	chunk := cfg.Events / 10
	plan := planFor(chunk)

	// RSS at 1x and 10x: the same paced load of campaigns a quarter of the
	// 1x size, 4 of them and then 40, through fresh children. The pace keeps
	// the log-time windows of state (live cells, held finishes) the same in
	// both, so the stream length is the one difference.
	if cfg.LatencyOnly {
		lat, err := b.latency(ctx)
		if lat != nil {
			res.Latency = *lat
			res.Latency.Incomplete = err != nil
		}
		res.Storm = Storm{Skipped: true}
		res.Peer = Peer{Engine: "Kafka", Status: "skipped", Reason: "--latency-only"}
		if err != nil {
			return fmt.Errorf("latency phase: %w", err)
		}
		return nil
	}
	rp := planFor(chunk / 4)
	b.pr("rss 1x: %d events in 4 campaigns of %d (%d agents x %d cells x %d rounds x %d tasks), paced at %d events/s",
		4*rp.events, rp.events, rp.cfg.Agents, rp.cfg.Evolvers+1, rp.cfg.Rounds, rp.cfg.TasksPerRound, cfg.RSSRate)
	one, err := b.phase(ctx, "x1", rp, 4, nil, cfg.RSSRate)
	if err != nil {
		return fmt.Errorf("1x phase: %w", err)
	}
	res.RSSMB.RatePerS = float64(cfg.RSSRate)
	res.RSSMB.Events1x = one.Events
	res.RSSMB.Process1x, res.RSSMB.Sink1x, res.RSSMB.Train1x = b.cl.Processors.PeakRSSMB(), b.cl.Sink.PeakRSSMB(), b.cl.Trainer.PeakRSSMB()
	lh := &res.LiveHeapMB
	lh.Process1x, lh.Sink1x, lh.Train1x = b.cl.Processors.PeakLiveHeapMB(), b.cl.Sink.PeakLiveHeapMB(), b.cl.Trainer.PeakLiveHeapMB()
	b.pr("rss 1x: process %.0f MiB, sink %.0f MiB, train %.0f MiB (live heap %.0f, %.0f, %.0f MiB)", res.RSSMB.Process1x, res.RSSMB.Sink1x,
		res.RSSMB.Train1x, lh.Process1x, lh.Sink1x, lh.Train1x)
	b.pr("rss 10x: %d events in 40 campaigns of %d, paced at %d events/s", 40*rp.events, rp.events, cfg.RSSRate)
	ten, err := b.phase(ctx, "x10", rp, 40, nil, cfg.RSSRate)
	if err != nil {
		return fmt.Errorf("10x phase: %w", err)
	}
	res.RSSMB.Events10x = ten.Events
	res.RSSMB.Process10x, res.RSSMB.Sink10x, res.RSSMB.Train10x = b.cl.Processors.PeakRSSMB(), b.cl.Sink.PeakRSSMB(), b.cl.Trainer.PeakRSSMB()
	lh.Process10x, lh.Sink10x, lh.Train10x = b.cl.Processors.PeakLiveHeapMB(), b.cl.Sink.PeakLiveHeapMB(), b.cl.Trainer.PeakLiveHeapMB()
	b.pr("rss 10x: process %.0f MiB, sink %.0f MiB, train %.0f MiB (live heap %.0f, %.0f, %.0f MiB)", res.RSSMB.Process10x, res.RSSMB.Sink10x,
		res.RSSMB.Train10x, lh.Process10x, lh.Sink10x, lh.Train10x)
	res.RSSMB.Tolerance = cfg.RSSTolerance
	// The unpaced phases' peaks are measured apart.
	for _, p := range b.cl.Children() {
		if err := p.ResetPeak(); err != nil {
			res.RSSMB.BacklogNote = "peak since the children started (the kernel refused to reset VmHWM: " + err.Error() + ")"
		}
	}

	// Latency at a fixed offered load.
	lat, err := b.latency(ctx)
	if lat != nil {
		res.Latency = *lat
		res.Latency.Incomplete = err != nil
	}
	if err != nil {
		return fmt.Errorf("latency phase: %w", err)
	}

	// Throughput: 10 chunks of the 1x width.
	b.pr("throughput: %d events in 10 chunks of %d, through the Go SDK", 10*plan.events, plan.events)
	b.quiesce(ctx, "throughput", 2*time.Minute)
	if cfg.CPUProfile != nil {
		if err := pprof.StartCPUProfile(cfg.CPUProfile); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
	}
	th, tpErr := b.phase(ctx, "tp", plan, 10, nil, 0)
	if cfg.CPUProfile != nil {
		pprof.StopCPUProfile()
	}
	if th == nil {
		return fmt.Errorf("throughput phase: %w", tpErr)
	}
	if tpErr != nil {
		// Keep measuring: the ceilings, storm and peer still tell the
		// reader where the pipeline stands.
		tpErr = fmt.Errorf("throughput phase: %w", tpErr)
		res.Errors = append(res.Errors, tpErr.Error())
		b.pr("throughput: NOT COMPLETE: %v", tpErr)
	}
	res.Throughput = *th
	res.Events = th.Events
	res.ProduceEventsPerS = div(float64(th.Events), th.ProduceS)
	res.E2EEventsPerS = div(float64(th.Events), th.VisibleS)
	res.RSSMB.ProcessBacklog, res.RSSMB.SinkBacklog, res.RSSMB.TrainBacklog = b.cl.Processors.PeakRSSMB(), b.cl.Sink.PeakRSSMB(), b.cl.Trainer.PeakRSSMB()
	b.pr("throughput: produce %.0f events/s, end to end %.0f events/s (%d events, visible after %.1fs)",
		res.ProduceEventsPerS, res.E2EEventsPerS, th.Events, th.VisibleS)
	lh.ProcessBacklog, lh.SinkBacklog, lh.TrainBacklog = b.cl.Processors.PeakLiveHeapMB(), b.cl.Sink.PeakLiveHeapMB(), b.cl.Trainer.PeakLiveHeapMB()
	b.pr("rss backlog (latency and throughput phases): process %.0f MiB, sink %.0f MiB, train %.0f MiB (live heap %.0f, %.0f, %.0f MiB)",
		res.RSSMB.ProcessBacklog, res.RSSMB.SinkBacklog, res.RSSMB.TrainBacklog, lh.ProcessBacklog, lh.SinkBacklog, lh.TrainBacklog)

	// Ceilings, same broker, same server, same rows.
	ceil, err := b.ceilings(ctx, plan, th.Events)
	if err != nil {
		return fmt.Errorf("ceilings: %w", err)
	}
	res.Ceilings = *ceil
	e2e := res.E2EEventsPerS
	res.Ratios["produce_vs_kafka_go_read"] = div(res.ProduceEventsPerS, ceil.KafkaReadEventsPerS)
	res.Ratios["process_vs_kafka_go_read"] = div(div(float64(th.Events), th.ProcessedS), ceil.KafkaReadEventsPerS)
	res.Ratios["sink_vs_clickhouse_client"] = div(div(float64(th.Events), th.RawVisibleS), ceil.ClickHouseClientRowsPerS)
	res.Ratios["e2e_vs_kafka_go_read"] = div(e2e, ceil.KafkaReadEventsPerS)
	res.Ratios["e2e_vs_clickhouse_client"] = div(e2e, ceil.ClickHouseClientRowsPerS)
	if fl, err := b.floor(ctx, plan, ceil.KafkaReadEvents, ceil.readCPU, ceil.insert, th.CPU); err != nil {
		res.Errors = append(res.Errors, "floor: "+err.Error())
		b.pr("floor: NOT MEASURED: %v", err)
	} else {
		res.Floor = fl
	}

	// Storm.
	var stormErr error
	if cfg.MalformedPct < 0 {
		res.Storm = Storm{Skipped: true}
	} else {
		st, err := b.storm(ctx, plan)
		if st != nil {
			res.Storm = *st
		}
		if err != nil {
			stormErr = fmt.Errorf("storm: %w", err)
			res.Errors = append(res.Errors, stormErr.Error())
			b.pr("storm: NOT COMPLETE: %v", stormErr)
		}
	}

	// Peer.
	if cfg.SkipPeer {
		res.Peer = Peer{Engine: "Kafka", Status: "skipped", Reason: "--skip-peer"}
	} else {
		res.Peer = b.peer(ctx, plan)
		if res.Peer.RowsPerS > 0 {
			res.Ratios["sink_vs_kafka_engine_peer"] = div(div(float64(th.Events), th.RawVisibleS), res.Peer.RowsPerS)
		}
	}
	return errors.Join(tpErr, stormErr)
}

// div is a/b, 0 when b is 0 (JSON has no Inf).
func div(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func goals(r *Result) []Goal {
	var g []Goal
	g = append(g, Goal{Name: "e2e_events_per_s", Target: ">= 50000", Value: r.E2EEventsPerS, Met: r.E2EEventsPerS >= 50000})
	g = append(g, Goal{Name: "latency_p99_ms_at_10k_per_s", Target: "<= 2000", Value: r.Latency.P99,
		Met: r.Latency.Samples > 0 && !r.Latency.Incomplete && r.Latency.P99 <= 2000 && r.Latency.OfferedPerS >= 10000})
	// Issue 41's goals.
	if r.Floor != nil && r.Floor.Ratio > 0 {
		g = append(g, Goal{Name: "pipeline_cpu_over_floor", Target: "<= 1.5", Value: r.Floor.Ratio, Met: r.Floor.Ratio <= 1.5})
	}
	g = append(g, Goal{Name: "latency_p99_ms_at_10k_per_s_issue41", Target: "<= 500", Value: r.Latency.P99,
		Met: r.Latency.Samples > 0 && !r.Latency.Incomplete && r.Latency.P99 <= 500 && r.Latency.OfferedPerS >= 10000})
	if v, ok := r.Ratios["e2e_vs_clickhouse_client"]; ok {
		g = append(g, Goal{Name: "e2e_vs_clickhouse_client", Target: ">= 0.25", Value: v, Met: v >= 0.25})
	}
	tol := 1 + r.RSSMB.Tolerance
	grow := 0.0
	flat := r.RSSMB.Process1x > 0 && r.RSSMB.Process10x > 0
	for _, p := range [][2]float64{{r.RSSMB.Process1x, r.RSSMB.Process10x}, {r.RSSMB.Sink1x, r.RSSMB.Sink10x}, {r.RSSMB.Train1x, r.RSSMB.Train10x}} {
		if p[0] <= 0 {
			flat = false
			continue
		}
		grow = max(grow, p[1]/p[0])
		if p[1] > p[0]*tol {
			flat = false
		}
	}
	g = append(g, Goal{Name: "rss_10x_over_1x_max", Target: fmt.Sprintf("<= %.2f (flat within %.0f %%)", tol, r.RSSMB.Tolerance*100), Value: grow, Met: flat})
	if !r.Storm.Skipped {
		g = append(g, Goal{Name: "storm_rate_ratio", Target: "> 0.90", Value: r.Storm.RateRatio, Met: r.Storm.RateRatio > 0.9})
		g = append(g, Goal{Name: "storm_dlq_complete", Target: "dlq rows = malformed sent, reasons match",
			Value: float64(r.Storm.DLQRows), Met: r.Storm.MalformedSent > 0 && r.Storm.DLQRows == r.Storm.MalformedSent && sameCounts(r.Storm.DLQByReason, r.Storm.SentByReason)})
	}
	return g
}

func sameCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func machine(ctx context.Context, cl *fleet.Cluster) Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), OS: runtime.GOOS}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		if _, err := fmt.Sscanf(firstLineWith(string(b), "MemTotal:"), "MemTotal: %f kB", &kb); err == nil {
			m.MemoryGiB = kb / (1 << 20)
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		if l := firstLineWith(string(b), "model name"); l != "" {
			if i := indexByte(l, ':'); i >= 0 {
				m.CPU = trim(l[i+1:])
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = trim(string(b))
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		if l := firstLineWith(string(b), "PRETTY_NAME="); l != "" {
			m.OS = trim(l[len("PRETTY_NAME="):])
			m.OS = trimQuotes(m.OS)
		}
	}
	if v, err := chx.ServerVersion(ctx, cl.Conn()); err == nil {
		m.ClickHouse = v.String()
	}
	return m
}
