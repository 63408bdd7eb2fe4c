package main

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
	"github.com/harnessflow/harnessflow/sinks/chsink"
)

func init() { register(newSinkCmd) }

func newSinkCmd() *cobra.Command {
	var brokers, addr, database, group, listen string
	var maxRows, maxBytes int
	var maxAge time.Duration
	cmd := &cobra.Command{
		Use:   "sink",
		Short: "Write every raw and derived topic to its ClickHouse table",
		Long: `sink is a Kafka consumer group over every harnessflow topic but hf.outcomes (the
DLQ included) that writes each event to its ClickHouse table in large
named-column native inserts, and commits offsets only after the insert
succeeded. Redelivered and replayed events change no figure: rows deduplicate
on event id and the analyst views read deduplicated data. When ClickHouse is
down it stops fetching, retries, and resumes with nothing lost. Undecodable
messages become rows of rejected_events (stage decode).

It applies the schema migrations at start, serves /metrics, /healthz and /readyz
on --listen, and on SIGINT/SIGTERM flushes what it buffered and commits.`,
		Example: "  harnessflow sink --brokers 127.0.0.1:9092 --clickhouse 127.0.0.1:9000",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := obs.NewLogger("sink")
			reg := obs.NewRegistry()
			s, err := chsink.New(chsink.Config{
				Brokers: kafkax.ParseBrokers(brokers), ClickHouse: addr, Database: database, Group: group,
				MaxRows: maxRows, MaxBytes: maxBytes, MaxAge: maxAge,
			}, chsink.WithLogger(log), chsink.WithRegisterer(reg))
			if err != nil {
				return withCode(2, err)
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			httpDone := make(chan error, 1)
			go func() {
				err := obs.Serve(ctx, listen, obs.Mux(reg, nil, obs.WithReady("sink", s.Ready())))
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
	cmd.Flags().StringVar(&group, "group", d.Group, "Kafka consumer group")
	cmd.Flags().StringVar(&listen, "listen", obs.DefaultListen, "host:port for /metrics, /healthz and /readyz")
	cmd.Flags().IntVar(&maxRows, "max-rows", d.MaxRows, "rows per insert at most (per table)")
	cmd.Flags().IntVar(&maxBytes, "max-bytes", d.MaxBytes, "message bytes per insert at most (per table)")
	cmd.Flags().DurationVar(&maxAge, "max-age", d.MaxAge, "flush a table's rows when the oldest is this old")
	return cmd
}
