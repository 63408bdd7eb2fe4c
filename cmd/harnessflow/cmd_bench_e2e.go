package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/bench/e2e"
	"github.com/harnessflow/harnessflow/internal/obs"
)

func init() { registerBench(newBenchE2ECmd) }

func newBenchE2ECmd() *cobra.Command {
	var cfg e2e.Config
	var out, cpuprofile string
	cmd := &cobra.Command{
		Use:   "e2e",
		Short: "Whole pipeline, co-located: SDK produce rate, end-to-end events/s, latency, peak RSS, ceilings, peer, bad-input storm",
		Long: `bench e2e starts an embedded broker, a managed clickhouse-server and the real
process, sink and train components (child processes of this binary), then, in one
run:

  rss 1x/10x  --events/10 generated events, then 10x as many, as campaigns of
              --events/40 paced at --rss-rate events/s (the same load, 10x
              the stream length); the children's peak RSS after each;
  latency     a campaign paced at --latency-rate events/s for --latency-duration;
              produce -> row visible in task_attempts for one attempt in
              --latency-sample, ClickHouse polled every --poll (the resolution);
  throughput  --events generated events (10 chunks of the 1x width) through the
              Go SDK: produce events/s, and end to end events/s = events / (first
              produce until every raw row, labeled sample and round metric is
              visible, deduplicated); the peak RSS over the latency and
              throughput phases (backlog: the processors hold what their
              log-time windows cover at the producer's rate);
  ceilings    a plain kafka-go group reader over the raw cell topics, and
              clickhouse-client inserting the same rows from TSV, same run;
  storm       --storm-blocks blocks of 3 chunks, the load with --malformed-pct
              malformed messages mixed in and the same clean load alternating
              in groups S C C S (so that the machine's drift weighs on both
              alike): the storm blocks' rate beside the clean blocks', the same
              ratio per group (the noise), every malformed message checked in
              rejected_events with its reason code;
  peer        ClickHouse's Kafka table engine reading the same attempts as
              JSONEachRow from the same broker (recorded either way).

It prints a table and writes --out (JSON). It exits 1 when an assertion failed
(rows missing, dead letters missing); goals not met are reported, not errors.`,
		Example: "  harnessflow bench e2e\n  harnessflow bench e2e --events 200000 --latency-duration 10s --skip-peer --out /tmp/e2e.json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return withCode(2, fmt.Errorf("find this executable for the children: %w", err))
			}
			cfg.Bin = bin
			cfg.Progress = cmd.OutOrStdout()
			cfg.Command = "harnessflow " + strings.Join(os.Args[1:], " ")
			if cpuprofile != "" {
				f, err := os.Create(cpuprofile)
				if err != nil {
					return withCode(2, fmt.Errorf("cpu profile: %w", err))
				}
				defer f.Close()
				cfg.CPUProfile = f
			}
			res, runErr := e2e.Run(cmd.Context(), cfg, e2e.WithLogger(obs.NewLogger("bench-e2e")))
			if res == nil {
				return withCode(2, runErr)
			}
			printE2E(cmd.OutOrStdout(), res)
			if err := writeE2E(cmd.Context(), cmd.OutOrStdout(), out, res); err != nil {
				return withCode(2, err)
			}
			if runErr != nil {
				return withCode(1, runErr)
			}
			return nil
		},
	}
	f := cmd.Flags()
	d := e2e.DefaultConfig()
	f.IntVar(&cfg.Events, "events", d.Events, "events of the throughput run, of the storm and of the 10x RSS run (the 1x RSS run is a tenth)")
	f.IntVar(&cfg.RSSRate, "rss-rate", d.RSSRate, "paced load of the 1x and 10x RSS runs, events/s")
	f.IntVar(&cfg.LatencyRate, "latency-rate", d.LatencyRate, "offered load of the latency phase, events/s")
	f.DurationVar(&cfg.LatencyDuration, "latency-duration", d.LatencyDuration, "how long the latency phase produces")
	f.IntVar(&cfg.LatencySample, "latency-sample", d.LatencySample, "time one task attempt in this many")
	f.DurationVar(&cfg.PollEvery, "poll", d.PollEvery, "latency poll period of ClickHouse (the latency figures' resolution)")
	f.Float64Var(&cfg.MalformedPct, "malformed-pct", d.MalformedPct, "malformed messages in the storm, percent of events (negative: skip the storm)")
	f.IntVar(&cfg.StormBlocks, "storm-blocks", d.StormBlocks, "blocks of the storm, a multiple of 4 (groups storm, clean, clean, storm); more blocks, a tighter ratio")
	f.BoolVar(&cfg.SkipPeer, "skip-peer", false, "skip the ClickHouse Kafka engine peer")
	f.DurationVar(&cfg.PeerTimeout, "peer-timeout", d.PeerTimeout, "bound of the peer phase")
	f.Float64Var(&cfg.RSSTolerance, "rss-tolerance", d.RSSTolerance, "peak RSS at 10x may exceed 1x by this fraction and still count as flat")
	f.StringVar(&cfg.Client, "client", "", "clickhouse-client binary for the insert ceiling (default: on PATH)")
	f.StringVar(&cfg.Dir, "dir", "", "directory for the cluster's data and logs (default: a temporary one)")
	f.BoolVar(&cfg.Keep, "keep", false, "keep --dir (data and the children's logs) after the run")
	f.DurationVar(&cfg.PhaseTimeout, "phase-timeout", d.PhaseTimeout, "give up when a phase's rows are not all visible after this long (also: no progress for 1 min with the processors caught up, or 3 min)")
	f.StringVar(&cpuprofile, "cpuprofile", "", "write a pprof CPU profile of this process (SDK producer, embedded broker) over the throughput phase to this file (go tool pprof); the children serve theirs with HF_PPROF=1")
	f.BoolVar(&cfg.LatencyOnly, "latency-only", false, "run the latency phase alone (no RSS, throughput, ceilings, storm or peer), with its CPU budget: for A B A B runs of a latency change")
	f.StringArrayVar(&cfg.ProcessArgs, "process-arg", nil, "an argument appended to the processors child's command line (repeat the flag for more)")
	f.StringArrayVar(&cfg.SinkArgs, "sink-arg", nil, "an argument appended to the sink child's command line, e.g. --sink-arg=--max-age=1s (repeat the flag for more)")
	f.StringArrayVar(&cfg.TrainArgs, "train-arg", nil, "an argument appended to the trainer child's command line (repeat the flag for more)")
	f.StringVar(&out, "out", "bench/results/e2e.json", "write the results as JSON here (empty: do not write)")
	return cmd
}

func printE2E(w io.Writer, r *e2e.Result) {
	fmt.Fprintf(w, "\n%-44s %s\n", "bench e2e", r.Date)
	fmt.Fprintf(w, "%-44s %d cores, %.1f GiB, %s, %s, %s, ClickHouse %s\n", "machine", r.Machine.Cores, r.Machine.MemoryGiB,
		r.Machine.CPU, r.Machine.OS, r.Machine.Go, r.Machine.ClickHouse)
	row := func(name, format string, a ...any) {
		fmt.Fprintf(w, "%-44s "+format+"\n", append([]any{name}, a...)...)
	}
	row("events (throughput run)", "%d", r.Events)
	row("produce (Go SDK)", "%10.0f events/s", r.ProduceEventsPerS)
	row("end to end (produce -> all rows visible)", "%10.0f events/s  (processed after %.1fs, raw rows %.1fs, all %.1fs)",
		r.E2EEventsPerS, r.Throughput.ProcessedS, r.Throughput.RawVisibleS, r.Throughput.VisibleS)
	row("latency p50 / p95 / p99 / max", "%.0f / %.0f / %.0f / %.0f ms  (%d samples at %.0f events/s, poll %.0f ms)",
		r.Latency.P50, r.Latency.P95, r.Latency.P99, r.Latency.Max, r.Latency.Samples, r.Latency.AchievedPerS, r.Latency.MeanPollMS)
	if c := r.Latency.CPU; c != nil {
		row("cpu of the latency run", "%s", c)
	}
	if c := r.Throughput.CPU; c != nil {
		row("cpu of the throughput run", "%s", c)
	}
	paced := fmt.Sprintf("(%d / %d events at %.0f events/s)", r.RSSMB.Events1x, r.RSSMB.Events10x, r.RSSMB.RatePerS)
	row("peak RSS process 1x / 10x / backlog", "%.0f / %.0f / %.0f MiB  %s", r.RSSMB.Process1x, r.RSSMB.Process10x, r.RSSMB.ProcessBacklog, paced)
	row("peak RSS sink 1x / 10x / backlog", "%.0f / %.0f / %.0f MiB", r.RSSMB.Sink1x, r.RSSMB.Sink10x, r.RSSMB.SinkBacklog)
	row("peak RSS train 1x / 10x / backlog", "%.0f / %.0f / %.0f MiB", r.RSSMB.Train1x, r.RSSMB.Train10x, r.RSSMB.TrainBacklog)
	lh := r.LiveHeapMB
	row("peak live heap process 1x / 10x / backlog", "%.0f / %.0f / %.0f MiB  (go_gc_heap_live_bytes, sampled every second)", lh.Process1x, lh.Process10x, lh.ProcessBacklog)
	row("peak live heap sink 1x / 10x / backlog", "%.0f / %.0f / %.0f MiB", lh.Sink1x, lh.Sink10x, lh.SinkBacklog)
	row("peak live heap train 1x / 10x / backlog", "%.0f / %.0f / %.0f MiB", lh.Train1x, lh.Train10x, lh.TrainBacklog)
	if r.RSSMB.BacklogNote != "" {
		row("peak RSS backlog", "%s", r.RSSMB.BacklogNote)
	}
	row("ceiling kafka-go read", "%10.0f events/s", r.Ceilings.KafkaReadEventsPerS)
	if f := r.Floor; f != nil {
		row("floor (mandatory work, us/event)", "produce %.2f + raw read %.2f + relay %.2f + decode/validate %.2f + insert %.2f client + %.2f server = %.2f",
			f.ProduceUS, f.RawReadUS, f.RelayUS, f.DecodeUS, f.InsertClientUS, f.InsertServerUS, f.SumUS)
		row("pipeline / floor", "%.2f x  (%.2f us/event without the trainer; driver %.2f x, processors %.2f x, sink + clickhouse %.2f x)",
			f.Ratio, f.PipelineUS, f.DriverRatio, f.ProcessRatio, f.SinkServerRatio)
	}
	row("ceiling clickhouse-client insert", "%10.0f rows/s", r.Ceilings.ClickHouseClientRowsPerS)
	for _, k := range []string{"produce_vs_kafka_go_read", "process_vs_kafka_go_read", "sink_vs_clickhouse_client", "e2e_vs_kafka_go_read", "e2e_vs_clickhouse_client", "sink_vs_kafka_engine_peer"} {
		if v, ok := r.Ratios[k]; ok {
			row("ratio "+k, "%10.3f", v)
		}
	}
	row("peer: "+r.Peer.Engine, "%s %s", r.Peer.Status, peerFigure(r.Peer))
	if r.Storm.Skipped {
		row("storm", "skipped")
	} else {
		row(fmt.Sprintf("storm (%.2g %% malformed)", r.Storm.MalformedPct), "%10.0f events/s vs clean %.0f: ratio %.3f; dlq %d/%d %v",
			r.Storm.E2EEventsPerS, r.Storm.CleanPerS, r.Storm.RateRatio, r.Storm.DLQRows, r.Storm.MalformedSent, r.Storm.DLQByReason)
		var blocks []string
		for _, b := range r.Storm.Blocks {
			blocks = append(blocks, fmt.Sprintf("%s %.0f", b.Name, b.E2EEventsPerS))
		}
		row("storm: blocks (events/s)", "%s", strings.Join(blocks, ", "))
		var groups []string
		for _, g := range r.Storm.GroupRatios {
			groups = append(groups, fmt.Sprintf("%.3f", g))
		}
		row("storm: ratio per group of 4", "%s", strings.Join(groups, ", "))
	}
	for _, g := range r.Goals {
		met := "NOT MET"
		if g.Met {
			met = "met"
		}
		row("goal "+g.Name, "%-7s %.3f (target %s)", met, g.Value, g.Target)
	}
}

func peerFigure(p e2e.Peer) string {
	if p.Status == "ok" {
		return fmt.Sprintf("%.0f rows/s (%d rows in %.1fs)", p.RowsPerS, p.RowsVisible, p.Seconds)
	}
	return p.Reason
}

// writeE2E writes the result as JSON to out (nothing when out is empty). An
// interrupted run (ctx ended) is not written: its zeros would replace the
// last complete run's figures.
func writeE2E(ctx context.Context, w io.Writer, out string, res *e2e.Result) error {
	if out == "" {
		return nil
	}
	if ctx.Err() != nil {
		fmt.Fprintf(w, "interrupted: %s not written (it keeps the last complete run)\n", out)
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote %s\n", out)
	return nil
}
