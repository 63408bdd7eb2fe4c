package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
	"github.com/harnessflow/harnessflow/sinks/chsink"
)

func init() { register(newSinkCmd) }

func newSinkCmd() *cobra.Command {
	var brokers, addr, database, group, listen, cluster string
	var maxRows, maxBytes int
	var maxAge, minAge, recomputeEvery, verifyDelay time.Duration
	var recomputeWorkers int
	var schemaRegistry string
	cmd := &cobra.Command{
		Use:   "sink",
		Short: "Write every raw and derived topic to its ClickHouse table",
		Long: `sink is a Kafka consumer group over every harnessflow topic but hf.outcomes (the
DLQ included) that writes each event to its ClickHouse table in large
named-column native inserts, and commits offsets only after the insert
succeeded. Redelivered and replayed events change no figure: rows deduplicate
on event id and the analyst views read deduplicated data. When ClickHouse is
down it stops fetching, retries, and resumes with nothing lost. Undecodable
messages become rows of rejected_events (stage decode). Confluent-framed
messages (0x00, schema id, Avro) are decoded through --schema-registry; while
the registry cannot be reached the sink waits and rejects nothing.

It applies the schema migrations at start, serves /metrics, /healthz and /readyz
on --listen, and on SIGINT/SIGTERM flushes what it buffered and commits. /healthz
answers 200 while the process runs; /readyz answers 503 naming what is
unreachable while no Kafka broker or ClickHouse answers.

With --cluster NAME it writes to a ClickHouse cluster (NAME as in the
servers' remote_servers): migrations run ON CLUSTER and rows go through the
Distributed tables, sharded so that a cell's rows stay on one shard; each
insert returns once its rows are stored on their shards, and only then are
offsets committed. --clickhouse may list several nodes (host:port,host:port):
the sink uses the first that answers.`,
		Example: `  harnessflow sink --brokers 127.0.0.1:9092 --clickhouse 127.0.0.1:9000
  harnessflow sink --cluster hf --clickhouse ch-s1r1:9000,ch-s1r2:9000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := obs.NewLogger("sink")
			reg := obs.NewRegistry()
			s, err := chsink.New(chsink.Config{
				Brokers: kafkax.ParseBrokers(brokers), ClickHouse: addr, Database: database, Cluster: cluster, Group: group,
				MaxRows: maxRows, MaxBytes: maxBytes, MaxAge: maxAge, MinAge: minAge, RecomputeEvery: recomputeEvery,
				RecomputeWorkers: recomputeWorkers, VerifyDelay: verifyDelay, SchemaRegistry: schemaRegistry,
			}, chsink.WithLogger(log), chsink.WithRegisterer(reg))
			if err != nil {
				return withCode(2, err)
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			httpDone := make(chan error, 1)
			go func() {
				err := obs.Serve(ctx, listen, sinkMux(reg, s, kafkax.ParseBrokers(brokers), addr))
				if err != nil && !errors.Is(err, http.ErrServerClosed) {
					log.Error().Err(err).Str("listen", listen).Msg("metrics endpoint failed")
				}
				httpDone <- err
			}()
			err = s.Run(ctx)
			cancel()
			<-httpDone
			if err != nil {
				return withCode(1, err)
			}
			return nil
		},
	}
	d := chsink.DefaultConfig()
	cmd.Flags().StringVar(&brokers, "brokers", kafkax.DefaultBrokers, "Kafka brokers, host:port[,host:port]")
	cmd.Flags().StringVar(&addr, "clickhouse", chx.DefaultAddr, "ClickHouse native-protocol host:port")
	cmd.Flags().StringVar(&database, "database", d.Database, "ClickHouse database")
	cmd.Flags().StringVar(&cluster, "cluster", d.Cluster, "ClickHouse cluster name (remote_servers) to write to through its Distributed tables; empty for a single server")
	cmd.Flags().StringVar(&group, "group", d.Group, "Kafka consumer group")
	cmd.Flags().StringVar(&listen, "listen", obs.DefaultListen, "host:port for /metrics, /healthz and /readyz")
	cmd.Flags().IntVar(&maxRows, "max-rows", d.MaxRows, "rows per insert at most (per table)")
	cmd.Flags().IntVar(&maxBytes, "max-bytes", d.MaxBytes, "message bytes per insert at most (per table)")
	cmd.Flags().DurationVar(&maxAge, "max-age", d.MaxAge, "flush a table's rows when the oldest is this old (the backstop of a sink that never catches up)")
	cmd.Flags().DurationVar(&minAge, "min-age", d.MinAge, "once the sink has read everything there is (every partition at its high watermark), flush a table's rows when the oldest is this old; negative: off (--max-age alone)")
	cmd.Flags().DurationVar(&recomputeEvery, "recompute-every", d.RecomputeEvery, "least time between two recomputations of one project's cell_scores (the attempts inserted meanwhile are summarized together); negative: none")
	cmd.Flags().IntVar(&recomputeWorkers, "recompute-workers", d.RecomputeWorkers, "projects whose cell_scores are recomputed at once (one project per worker: a project with huge cells delays the others only while this many such projects recompute)")
	cmd.Flags().StringVar(&schemaRegistry, "schema-registry", "", schemaRegistryUsage)
	cmd.Flags().DurationVar(&verifyDelay, "verify-delay", d.VerifyDelay, "with --cluster: check recomputed cell_scores against their attempts this long after, and repair those a replica's lag left short (doubling waits up to 30s)")
	return cmd
}

// sinkMux is the sink's /metrics, /healthz and /readyz: ready once it
// consumes (Sink.Ready) and while a broker (check "kafka") and ClickHouse
// (check "clickhouse") answer.
func sinkMux(reg *prometheus.Registry, s *chsink.Sink, brokers []string, chAddr string) http.Handler {
	return obs.Mux(reg, nil, obs.WithReady("sink", s.Ready()),
		obs.WithCheck("kafka", func(ctx context.Context) error { return kafkax.Ping(ctx, brokers) }),
		obs.WithCheck("clickhouse", clickHouseCheck(chAddr)))
}

// clickHouseCheck is a readiness check of the ClickHouse server at addr: a
// ping on a connection of its own (with the process's ClickHouse
// credentials and TLS), opened by the first check that reaches the server
// and kept for the next ones.
func clickHouseCheck(addr string) func(context.Context) error {
	var mu sync.Mutex
	var conn driver.Conn
	return func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if conn == nil {
			// A server that refuses connections is said so at once
			// (chx.Open would retry it until ctx ends).
			var dialErr error
			for _, a := range strings.Split(addr, ",") {
				var d net.Dialer
				c, err := d.DialContext(ctx, "tcp", strings.TrimSpace(a))
				if err == nil {
					c.Close()
					dialErr = nil
					break
				}
				dialErr = err
			}
			if dialErr != nil {
				return dialErr
			}
			c, err := chx.Open(ctx, addr, "")
			if err != nil {
				return err
			}
			conn = c
		}
		return conn.Ping(ctx)
	}
}
