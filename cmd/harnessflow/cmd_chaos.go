package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/bench/chaos"
)

func init() { register(newChaosCmd) }

func newChaosCmd() *cobra.Command {
	var cfg chaos.Config
	var out string
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Run a generated campaign through a co-located harnessflow while injecting faults; assert nothing is lost or duplicated",
		Long: `chaos generates a deterministic campaign (--events, seeded by --seed) and
produces it at --rate through the Go SDK into a co-located harnessflow: an
embedded broker and a managed clickhouse-server in this process's tree, and
'harnessflow process', 'sink' and 'train' as child processes. While it runs it
injects, at seeded moments: SIGKILLs of each child (--kills each), broker
restarts on the data dir, ClickHouse outages (--clickhouse-outage long), bursts
of Kafka produce errors, fetch errors, NOT_LEADER_FOR_PARTITION and request
timeouts (kfake request interception), and --malformed-fraction malformed
events (garbage, truncated Avro, JSON, unknown fingerprints) on the raw topics.

It then stops the faults, waits until every consumer group has committed
everything and ClickHouse holds the expected rows, and checks: every event in
its table once (FINAL), exactly the malformed events in the DLQ with their
reason codes, labeled samples equal to an uninterrupted in-process run of the
same campaign, every sample trained exactly once. It prints a table, writes
--out, and exits 1 when an assertion failed (the run dir with the children's
logs is kept and named), 2 on bad flags. Replay a failure with its --seed.`,
		Example: "  harnessflow chaos\n  harnessflow chaos --events 20000 --rate 1000 --seed 7 --out /tmp/chaos.json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Bin == "" {
				bin, err := os.Executable()
				if err != nil {
					return withCode(2, fmt.Errorf("find this executable for the children: %w (pass --bin)", err))
				}
				cfg.Bin = bin
			}
			cfg.Progress = cmd.ErrOrStderr()
			rep, err := chaos.Run(cmd.Context(), cfg)
			if err != nil {
				if errors.Is(err, chaos.ErrConfig) {
					return withCode(2, err)
				}
				return withCode(1, err)
			}
			rep.Command = "harnessflow " + strings.Join(os.Args[1:], " ")
			rep.WriteTable(cmd.OutOrStdout())
			if out != "" {
				if err := rep.WriteJSON(out); err != nil {
					return withCode(1, fmt.Errorf("write %s: %w", out, err))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", out)
			}
			if err := rep.Err(); err != nil {
				return withCode(1, err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	d := chaos.DefaultConfig()
	f.Int64Var(&cfg.Seed, "seed", 0, "seed of the campaign, malformed events and fault plan (0: from the clock; printed)")
	f.IntVar(&cfg.Events, "events", d.Events, "approximate number of good events")
	f.IntVar(&cfg.Evolvers, "evolvers", d.Evolvers, "evolved cells per agent")
	f.IntVar(&cfg.Rounds, "rounds", d.Rounds, "rounds per cell")
	f.IntVar(&cfg.Tasks, "tasks", d.Tasks, "tasks per round")
	f.Float64Var(&cfg.Rate, "rate", d.Rate, "events produced per second")
	f.Float64Var(&cfg.MalformedFraction, "malformed-fraction", d.MalformedFraction, "share of malformed events (negative: none)")
	f.IntVar(&cfg.Kills, "kills", d.Kills, "SIGKILLs of each child: processors, sink, trainer (negative: none)")
	f.StringSliceVar(&cfg.Skip, "skip", nil, "fault kinds to leave out, comma-separated (kill_processors, kill_sink, kill_trainer, broker_restart, clickhouse_outage, kafka_produce_error, kafka_fetch_error, kafka_not_leader, kafka_request_timeout)")
	f.DurationVar(&cfg.MaxDowntime, "max-downtime", d.MaxDowntime, "longest pause between a SIGKILL and the restart")
	f.IntVar(&cfg.BrokerRestarts, "broker-restarts", d.BrokerRestarts, "restarts of the embedded broker (negative: none)")
	f.IntVar(&cfg.ClickHouseOutages, "clickhouse-outages", d.ClickHouseOutages, "ClickHouse stops (negative: none)")
	f.DurationVar(&cfg.ClickHouseOutage, "clickhouse-outage", d.ClickHouseOutage, "how long ClickHouse stays stopped")
	f.IntVar(&cfg.KafkaBursts, "kafka-bursts", d.KafkaBursts, "bursts of each Kafka fault kind (negative: none)")
	f.DurationVar(&cfg.KafkaBurst, "kafka-burst", d.KafkaBurst, "length of one burst of Kafka faults")
	f.DurationVar(&cfg.KafkaDelay, "kafka-delay", d.KafkaDelay, "how long a timed-out fetch is held")
	f.DurationVar(&cfg.SettleTimeout, "settle-timeout", d.SettleTimeout, "how long the pipeline may take to catch up after the last event")
	f.StringVar(&cfg.Dir, "dir", "", "run directory (default: a new temporary directory; kept on failure)")
	f.BoolVar(&cfg.KeepDir, "keep-dir", false, "keep the run directory even when the campaign passes")
	f.StringVar(&cfg.Bin, "bin", "", "harnessflow executable for the children (default: this one)")
	f.StringVar(&out, "out", "bench/results/chaos.json", "write the report as JSON here (empty: none)")
	return cmd
}
