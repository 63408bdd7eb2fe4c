package main

import (
	"context"
	"encoding/json"
	"time"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/internal/chcluster"
	"github.com/harnessflow/harnessflow/internal/obs"
)

func init() { register(newClickHouseClusterCmd) }

func newClickHouseClusterCmd() *cobra.Command {
	var dir, name string
	var shards, replicas int
	var restart time.Duration
	cmd := &cobra.Command{
		Use:   "clickhouse-cluster",
		Short: "Run a local ClickHouse cluster (ZooKeeper + shards × replicas servers) to try --cluster on one machine",
		Long: `clickhouse-cluster starts, on loopback, a ZooKeeper (Debian's zookeeper package,
run with java) and --shards × --replicas clickhouse-server processes configured
as one cluster named --name: remote_servers with internal replication, the
macros {shard} and {replica}, a distributed DDL queue. It prints one JSON line
per node (shard, replica, native and HTTP addresses, pid) and runs until
SIGINT/SIGTERM, then stops every process.

A node whose server exits (kill -9 PID, to see a replica fail) is started
again on its ports and data after --restart-after, as a supervisor would; it
then catches up from its shard's other replicas. Point migrate, sink and
train at any node with --cluster NAME (see the README's production section).

It is for trying the cluster path and for tests, not for production: one
ZooKeeper, every node on one machine, new ports at each start. Without
ZooKeeper it fails and says what to install.`,
		Example: `  harnessflow clickhouse-cluster --dir .harnessflow/cluster
  harnessflow migrate --cluster hf --clickhouse 127.0.0.1:PORT_OF_A_NODE
  harnessflow sink --cluster hf --clickhouse S1R1,S1R2 --group hf-sink`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := obs.NewLogger("clickhouse-cluster")
			if err := chcluster.Available(); err != nil {
				return withCode(2, err)
			}
			ctx := cmd.Context()
			sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			log.Info().Str("dir", dir).Int("shards", shards).Int("replicas", replicas).Msg("starting ZooKeeper and the ClickHouse nodes")
			c, err := chcluster.Start(sctx, chcluster.Config{Dir: dir, Name: name, Shards: shards, Replicas: replicas})
			if err != nil {
				return withCode(2, err)
			}
			defer c.Close()
			enc := json.NewEncoder(cmd.OutOrStdout())
			var addrs []string
			for _, n := range c.Nodes() {
				_ = enc.Encode(map[string]any{"cluster": c.Name(), "shard": n.Shard, "replica": n.Replica, "clickhouse": n.Addr(),
					"http": n.HTTPAddr(), "pid": n.Pid(), "data_dir": n.DataDir()})
				addrs = append(addrs, n.Addr())
			}
			log.Info().Str("cluster", c.Name()).Str("zookeeper", c.ZooKeeperAddr()).Strs("nodes", addrs).
				Msg("cluster ready: harnessflow migrate --cluster " + c.Name() + " --clickhouse " + addrs[0])
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			down := map[*chcluster.Node]time.Time{}
			for {
				select {
				case <-ctx.Done():
					log.Info().Msg("stopping the cluster")
					return nil
				case <-tick.C:
				}
				for _, n := range c.Nodes() {
					if n.Running() {
						continue
					}
					since, seen := down[n]
					if !seen {
						down[n] = time.Now()
						log.Warn().Str("node", n.Name()).Dur("restart_after", restart).Msg("node exited; starting it again")
						continue
					}
					if time.Since(since) < restart {
						continue
					}
					rctx, rcancel := context.WithTimeout(ctx, 2*time.Minute)
					err := c.StartNode(rctx, n)
					rcancel()
					if err != nil {
						log.Error().Err(err).Str("node", n.Name()).Msg("restart failed; trying again")
						down[n] = time.Now()
						continue
					}
					delete(down, n)
					log.Info().Str("node", n.Name()).Str("clickhouse", n.Addr()).Int("pid", n.Pid()).Msg("node running again")
				}
			}
		},
	}
	cmd.Flags().StringVar(&dir, "dir", ".harnessflow/cluster", "directory for ZooKeeper's and every node's data")
	cmd.Flags().StringVar(&name, "name", chcluster.DefaultName, "the cluster's name (remote_servers; give it to --cluster)")
	cmd.Flags().IntVar(&shards, "shards", 2, "number of shards")
	cmd.Flags().IntVar(&replicas, "replicas", 2, "replicas per shard")
	cmd.Flags().DurationVar(&restart, "restart-after", 3*time.Second, "how long a node that exited stays down before it is started again")
	return cmd
}
