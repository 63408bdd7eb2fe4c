package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
	"github.com/harnessflow/harnessflow/producers/sim"
	"github.com/harnessflow/harnessflow/stack"
)

func init() { register(newUpCmd) }

func newUpCmd() *cobra.Command {
	var cfg stack.Config
	var brokers string
	var demo, demoExit bool
	var demoCfg sim.Config
	var demoTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run everything in one process: broker, ClickHouse, processors, sink, trainer, ingest",
		Long: `up runs the whole pipeline on this machine: the embedded Kafka-protocol broker
(unless --brokers), a managed local clickhouse-server (unless --clickhouse),
migrations, processors, the ClickHouse sink, the trainer and the ingest gateway.
It prints every endpoint and writes them to DATA_DIR/endpoints.json. Ctrl-C or
SIGTERM drains and stops everything; a second up on the same --data-dir resumes
with all data intact.

With --demo it also sends a simulated cross-evaluation campaign and prints the
report once ClickHouse holds every figure.`,
		Example: `  harnessflow up --demo
  harnessflow up --data-dir /var/lib/harnessflow --clickhouse 127.0.0.1:9000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Brokers = kafkax.ParseBrokers(brokers)
			log := obs.NewLogger("up")
			st, err := stack.New(cfg, stack.WithLogger(log))
			if err != nil {
				return withCode(2, err)
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- st.Run(ctx) }()
			select {
			case <-st.Ready():
			case err := <-errc:
				if err == nil {
					return nil
				}
				return withCode(1, err)
			}
			stack.PrintEndpoints(cmd.OutOrStdout(), st.Endpoints())
			if demo {
				rep, err := st.RunDemo(ctx, demoCfg, cmd.ErrOrStderr(), demoTimeout)
				if err != nil && ctx.Err() == nil {
					cancel()
					<-errc
					return withCode(1, err)
				}
				if err == nil {
					fmt.Fprintln(cmd.OutOrStdout())
					if err := rep.WriteText(cmd.OutOrStdout()); err != nil {
						return withCode(1, err)
					}
					if demoExit {
						cancel()
					} else {
						fmt.Fprintln(cmd.OutOrStdout(), "\nthe stack keeps running: query ClickHouse, send events, Ctrl-C to stop")
					}
				}
			}
			if err := <-errc; err != nil {
				return withCode(1, err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	d, dd := stack.DefaultConfig(), sim.DefaultConfig()
	f.StringVar(&cfg.DataDir, "data-dir", d.DataDir, "where the broker log, ClickHouse data, checkpoints, tokens and endpoints.json live")
	f.StringVar(&brokers, "brokers", "", "external Kafka brokers host:port[,host:port] (default: run the embedded broker)")
	f.StringVar(&cfg.BrokerListen, "broker-listen", d.BrokerListen, "embedded broker address (a free port when taken)")
	f.StringVar(&cfg.ClickHouse, "clickhouse", "", "external ClickHouse native host:port (default: start a managed clickhouse-server)")
	f.StringVar(&cfg.Database, "database", d.Database, "ClickHouse database")
	f.StringVar(&cfg.IngestListen, "ingest-listen", d.IngestListen, "ingest gateway address (a free port when taken)")
	f.StringVar(&cfg.TrainerListen, "trainer-listen", d.TrainerListen, "trainer /v1/score address (a free port when taken)")
	f.StringVar(&cfg.MetricsListen, "metrics-listen", d.MetricsListen, "/metrics, /healthz and /readyz address (a free port when taken)")
	f.StringVar(&cfg.Device, "device", d.Device, "trainer compute device: auto, cpu or cuda")
	f.StringVar(&cfg.Project, "project", d.Project, "project of the generated ingest token and of the critic (the trainer trains on and serves this project alone)")
	f.StringVar(&cfg.SchemaRegistry, "schema-registry", "", schemaRegistryUsage)
	f.BoolVar(&demo, "demo", false, "also send a simulated campaign and print its report when processed")
	f.BoolVar(&demoExit, "demo-exit", false, "with --demo: stop everything after printing the report")
	f.StringVar(&demoCfg.Campaign, "campaign", dd.Campaign, "with --demo: campaign name")
	f.IntVar(&demoCfg.Scale, "scale", dd.Scale, "with --demo: tasks per cell")
	f.Int64Var(&demoCfg.Seed, "seed", dd.Seed, "with --demo: simulator seed")
	f.DurationVar(&demoTimeout, "demo-timeout", stack.DefaultDemoTimeout, "with --demo: how long to wait for the campaign to be processed")
	return cmd
}
