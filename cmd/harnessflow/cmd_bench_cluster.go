package main

import (
	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/bench/stages"
	"github.com/harnessflow/harnessflow/internal/obs"
)

func init() { registerBench(newBenchClusterCmd) }

func newBenchClusterCmd() *cobra.Command {
	var cfg stages.ClusterConfig
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Sink rows/s into a 2-shard × 2-replica ClickHouse cluster against one server, side by side on this machine",
		Long: `bench cluster starts an embedded broker, a clickhouse-server and a local cluster
(ZooKeeper and 2 shards × 2 replicas, as clickhouse-cluster does), produces
--rows task_attempt events once, and then alternates --pairs times:

  single server   one sink into a fresh database on the server;
  2x2 cluster     two sinks of one consumer group, each writing through a node
                  of its own shard (sink --cluster: synchronous Distributed
                  inserts, replicated local tables), into a fresh database.

Each run reads every row with a new consumer group and ends when every offset
is committed. It prints each run's rows/s and the median ratio cluster /
single. Every process shares this machine, so the figure says what the
cluster path costs here (sharding, replication, ZooKeeper), not what a
cluster of machines gains. Needs ZooKeeper (Debian's zookeeper package).`,
		Example: "  harnessflow bench cluster --rows 200000 --pairs 2",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return benchExit(stages.Cluster(cmd.Context(), cfg, cmd.OutOrStdout(), stages.WithLogger(obs.NewLogger("bench-cluster"))))
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Rows, "rows", stages.DefaultClusterRows, "task_attempt rows each run moves")
	f.IntVar(&cfg.Pairs, "pairs", stages.DefaultClusterPairs, "how many times the single-server and the cluster runs alternate")
	f.IntVar(&cfg.MaxRows, "max-rows", stages.DefaultSinkMaxRows, "each sink's rows per insert")
	return cmd
}
