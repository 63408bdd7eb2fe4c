package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/bench/stages"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
)

func init() { registerBench(newBenchSinkCmd) }

func newBenchSinkCmd() *cobra.Command {
	var cfg stages.SinkConfig
	var brokers, cpuprofile string
	cmd := &cobra.Command{
		Use:   "sink",
		Short: "Sink rows/s into ClickHouse against clickhouse-client from a file (the ceiling), same rows, same server",
		Long: `bench sink produces --rows task_attempt events to hf.attempts, then measures, in
one run against the same ClickHouse server:

  sink            the sink consuming them from the broker into task_attempts
                  (decode, batch, native insert, commit); rows/s counts
                  inserted rows, and a second line the time until every
                  offset is committed (after the cell_scores recomputation);
  ceiling         clickhouse-client inserting the same rows from a TSV file
                  into a twin table (same engine);
  client -> Null  the sink's insert path alone (clickhouse-go, same batches)
                  and clickhouse-client, into an ENGINE = Null twin: what the
                  clients cost without the server's merge work.

It prints rows/s for each and the ratio sink / ceiling (goals: >= 200k rows/s
and >= 0.5). With --view-rows N it also fills a separate database with N
generated attempts (INSERT ... SELECT FROM numbers), times each
cross-evaluation view over them live (no cell_scores summaries yet; skip with
--view-live=false), recomputes every cell's summary as the sink does, and
times the views again, checking that they return the live rows. With --embedded it starts its own broker and
clickhouse-server and needs neither address.`,
		Example: "  harnessflow bench sink --embedded --rows 500000\n  harnessflow bench sink --brokers 127.0.0.1:9092 --clickhouse 127.0.0.1:9000 --view-rows 10000000",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Brokers = kafkax.ParseBrokers(brokers)
			if cpuprofile != "" {
				f, err := os.Create(cpuprofile)
				if err != nil {
					return withCode(2, err)
				}
				defer f.Close()
				cfg.CPUProfile = f
			}
			return benchExit(stages.Sink(cmd.Context(), cfg, cmd.OutOrStdout(), stages.WithLogger(obs.NewLogger("bench-sink"))))
		},
	}
	f := cmd.Flags()
	f.StringVar(&brokers, "brokers", kafkax.DefaultBrokers, "Kafka brokers (ignored with --embedded)")
	f.StringVar(&cfg.ClickHouse, "clickhouse", chx.DefaultAddr, "ClickHouse native host:port (ignored with --embedded)")
	f.BoolVar(&cfg.Embedded, "embedded", false, "start an embedded broker and a managed clickhouse-server")
	f.StringVar(&cfg.Database, "database", stages.DefaultSinkDatabase, "scratch database (dropped and re-created)")
	f.StringVar(&cfg.Client, "client", "", "clickhouse-client binary for the ceiling (default: clickhouse-client, or clickhouse client, on PATH)")
	f.IntVar(&cfg.Rows, "rows", stages.DefaultSinkRows, "task_attempt rows to move")
	f.IntVar(&cfg.MaxRows, "max-rows", stages.DefaultSinkMaxRows, "the sink's rows per insert")
	f.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of this process during the sink phase to this file")
	f.IntVar(&cfg.ViewRows, "view-rows", 0, "also time the cross-evaluation views over this many generated attempts (0: skip)")
	f.BoolVar(&cfg.ViewLive, "view-live", true, "with --view-rows, also time the views before cell_scores is filled (the live deduplication; slow)")
	return cmd
}
