package stages

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/rs/zerolog"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/broker"
	"github.com/harnessflow/harnessflow/internal/chcluster"
	"github.com/harnessflow/harnessflow/internal/chserver"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/sinks/chsink"
)

// Defaults of ClusterConfig (and of `harnessflow bench cluster`'s flags).
const (
	// DefaultClusterRows is the task_attempt rows each run moves.
	DefaultClusterRows = 200000
	// DefaultClusterPairs is the number of (single, cluster) pairs.
	DefaultClusterPairs = 2
)

// ClusterConfig sizes `harnessflow bench cluster`.
type ClusterConfig struct {
	// Rows is the task_attempt rows each run moves. Default:
	// DefaultClusterRows.
	Rows int
	// Pairs is how many times the two runs alternate (single server, then
	// cluster). Default: DefaultClusterPairs.
	Pairs int
	// MaxRows is each sink's rows per insert. Default: DefaultSinkMaxRows.
	MaxRows int
}

// Cluster measures sink rows/s into one clickhouse-server and into a
// 2-shard × 2-replica cluster (chcluster) on the same machine, side by
// side: it starts an embedded broker, the server and the cluster, produces
// cfg.Rows task_attempt events once, then alternates cfg.Pairs times a run
// of one sink into a fresh database on the server and a run of two sinks
// (one consumer group, each writing through a node of its own shard, with
// synchronous Distributed inserts as `sink --cluster` does) into a fresh
// database on the cluster. A run ends when every offset is committed. It
// prints each run's rows/s and the median ratio cluster / single.
func Cluster(ctx context.Context, cfg ClusterConfig, out io.Writer, opts ...Option) error {
	o := newOptions(opts)
	if cfg.Rows == 0 {
		cfg.Rows = DefaultClusterRows
	}
	if cfg.Pairs == 0 {
		cfg.Pairs = DefaultClusterPairs
	}
	if cfg.MaxRows == 0 {
		cfg.MaxRows = DefaultSinkMaxRows
	}
	dir, err := os.MkdirTemp("", "hf-bench-cluster-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0"})
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.EnsureAllTopics(ctx); err != nil {
		return err
	}
	srv, err := chserver.Start(ctx, chserver.Config{DataDir: filepath.Join(dir, "single")})
	if err != nil {
		return err
	}
	defer srv.Stop()
	cl, err := chcluster.Start(ctx, chcluster.Config{Dir: filepath.Join(dir, "cluster")})
	if err != nil {
		return err
	}
	defer cl.Close()
	brokers := []string{b.Addr()}
	fmt.Fprintf(out, "clickhouse-server %s at %s; cluster %s (2 shards × 2 replicas, ZooKeeper %s); broker %s\n",
		srv.Version(), srv.Addr(), cl.Name(), cl.ZooKeeperAddr(), b.Addr())
	evs := benchAttempts(cfg.Rows)
	t0 := time.Now()
	if err := produceAll(ctx, brokers, evs); err != nil {
		return err
	}
	fmt.Fprintf(out, "%d task_attempt rows produced in %.2fs; each run reads them all with a new consumer group\n", len(evs), time.Since(t0).Seconds())

	var ratios []float64
	for i := 1; i <= cfg.Pairs; i++ {
		db := fmt.Sprintf("hf_bench_single_%d", i)
		if err := migrateFresh(ctx, srv.Addr(), db, ""); err != nil {
			return err
		}
		single, err := timeSinks(ctx, brokers, []string{srv.Addr()}, db, "", cfg, o.log)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "pair %d  single server  1 sink   %10.0f rows/s  (%.2fs until every offset is committed)\n", i, float64(cfg.Rows)/single, single)
		db = fmt.Sprintf("hf_bench_cluster_%d", i)
		if err := migrateFresh(ctx, cl.Node(1, 1).Addr(), db, cl.Name()); err != nil {
			return err
		}
		addrs := []string{cl.Node(1, 1).Addr() + "," + cl.Node(1, 2).Addr(), cl.Node(2, 1).Addr() + "," + cl.Node(2, 2).Addr()}
		clustered, err := timeSinks(ctx, brokers, addrs, db, cl.Name(), cfg, o.log)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "pair %d  2x2 cluster    2 sinks  %10.0f rows/s  (%.2fs)\n", i, float64(cfg.Rows)/clustered, clustered)
		ratios = append(ratios, single/clustered)
	}
	sort.Float64s(ratios)
	fmt.Fprintf(out, "cluster / single rows/s: median %.2f over %d pairs (min %.2f, max %.2f); every process on this one machine\n",
		median(ratios), len(ratios), ratios[0], ratios[len(ratios)-1])
	return nil
}

// migrateFresh creates database through addr with every migration, on
// cluster when it is set.
func migrateFresh(ctx context.Context, addr, database, cluster string) error {
	var opts []chx.OpenOption
	if cluster != "" {
		opts = append(opts, chx.Cluster())
	}
	conn, err := chx.Open(ctx, addr, "", opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	if cluster != "" {
		_, err = chddl.MigrateCluster(ctx, chx.Session(conn), database, cluster)
	} else {
		_, err = chddl.Migrate(ctx, chx.Session(conn), database)
	}
	return err
}

// timeSinks runs one sink per address of addrs, in one new consumer
// group, over hf.attempts into database until they have committed
// cfg.Rows rows together, and returns the seconds from their start.
func timeSinks(ctx context.Context, brokers, addrs []string, database, cluster string, cfg ClusterConfig, log zerolog.Logger) (float64, error) {
	group := fmt.Sprintf("hf-bench-cluster-%d", time.Now().UnixNano())
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var sinks []*chsink.Sink
	done := make(chan error, len(addrs))
	start := time.Now()
	for _, a := range addrs {
		s, err := chsink.New(chsink.Config{Brokers: brokers, ClickHouse: a, Database: database, Cluster: cluster, Group: group,
			Topics: []string{schemas.TopicAttempts}, MaxRows: cfg.MaxRows, SkipMigrate: true}, chsink.WithLogger(log))
		if err != nil {
			return 0, err
		}
		sinks = append(sinks, s)
		go func() { done <- s.Run(sctx) }()
	}
	for {
		var committed int64
		for _, s := range sinks {
			committed += s.Stats().Committed
		}
		if committed >= int64(cfg.Rows) {
			break
		}
		select {
		case err := <-done:
			return 0, failed(fmt.Errorf("a sink stopped early: %w", err))
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond): // polling interval
		}
	}
	elapsed := time.Since(start).Seconds()
	stop()
	for range sinks {
		if err := <-done; err != nil {
			return 0, failed(err)
		}
	}
	return elapsed, nil
}
