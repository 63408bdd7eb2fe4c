package main

import (
	"fmt"

	"github.com/harnessflow/harnessflow/internal/broker"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
)

func init() { register(newBrokerCmd) }

func newBrokerCmd() *cobra.Command {
	var listen, dataDir string
	var syncWrites bool
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run the embedded Kafka-protocol broker (kfake) with a persistent data dir",
		Long: `broker runs an in-process Kafka-protocol broker (franz-go's kfake) on one port.
Any Kafka client can connect. With --data-dir, topics, offsets and consumer groups
survive a restart. Every harnessflow topic is created at start.`,
		Example: "  harnessflow broker --listen 127.0.0.1:9092 --data-dir ./.harnessflow/kafka",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := obs.NewLogger("broker")
			b, err := broker.Start(broker.Config{Listen: listen, DataDir: dataDir, SyncWrites: syncWrites})
			if err != nil {
				return withCode(2, err)
			}
			defer b.Close()
			if err := kafkax.EnsureAllTopics(cmd.Context(), []string{b.Addr()}); err != nil {
				return withCode(2, err)
			}
			log.Info().Str("addr", b.Addr()).Str("data_dir", dataDir).Msg("broker ready")
			fmt.Fprintln(cmd.OutOrStdout(), b.Addr())
			<-cmd.Context().Done()
			log.Info().Msg("broker stopping: flushing data dir")
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", kafkax.DefaultBrokers, "host:port to serve the Kafka protocol on")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "directory that persists topics, offsets and groups (empty: memory only)")
	cmd.Flags().BoolVar(&syncWrites, "sync-writes", false, "fsync every produced batch")
	return cmd
}
