package main

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/harnessflow/harnessflow/internal/broker"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
)

func init() { register(newBrokerCmd) }

func newBrokerCmd() *cobra.Command {
	var listen, dataDir, usersFile, certFile, keyFile string
	var syncWrites bool
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run the embedded Kafka-protocol broker (kfake) with a persistent data dir",
		Long: `broker runs an in-process Kafka-protocol broker (franz-go's kfake) on one port.
Any Kafka client can connect. With --data-dir, topics, offsets and consumer groups
survive a restart. Every harnessflow topic is created at start.

With --sasl-users every client must authenticate (SASL PLAIN, SCRAM-SHA-256 or
SCRAM-SHA-512) as a user of that file; with --tls-cert and --tls-key the broker
accepts TLS connections only. Clients then need --kafka-sasl, --kafka-user,
--kafka-password-file and --kafka-tls/--kafka-ca.`,
		Example: "  harnessflow broker --listen 127.0.0.1:9092 --data-dir ./.harnessflow/kafka\n" +
			"  harnessflow broker --sasl-users users.txt --tls-cert broker.pem --tls-key broker-key.pem",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := obs.NewLogger("broker")
			cfg := broker.Config{Listen: listen, DataDir: dataDir, SyncWrites: syncWrites}
			if err := brokerSecurity(&cfg, usersFile, certFile, keyFile); err != nil {
				return withCode(2, err)
			}
			b, err := broker.Start(cfg)
			if err != nil {
				return withCode(2, err)
			}
			defer b.Close()
			if err := b.EnsureAllTopics(cmd.Context()); err != nil {
				return withCode(2, err)
			}
			log.Info().Str("addr", b.Addr()).Str("data_dir", dataDir).Int("sasl_users", len(cfg.SASLUsers)).
				Bool("tls", cfg.TLS != nil).Msg("broker ready")
			obs.WarnUnauthenticated(log, "broker", b.Addr(), len(cfg.SASLUsers) > 0,
				"any client that reaches it reads and writes every topic of every project, past every project check of the gateway; "+
					"give --sasl-users (with --tls-cert and --tls-key) or --listen 127.0.0.1:PORT")
			fmt.Fprintln(cmd.OutOrStdout(), b.Addr())
			<-cmd.Context().Done()
			log.Info().Msg("broker stopping: flushing data dir")
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", kafkax.DefaultBrokers, "host:port to serve the Kafka protocol on")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "directory that persists topics, offsets and groups (empty: memory only)")
	cmd.Flags().BoolVar(&syncWrites, "sync-writes", false, "fsync every produced batch")
	cmd.Flags().StringVar(&usersFile, "sasl-users", "", `file of "USER PASSWORD" lines (mode 600): clients must authenticate with SASL as one of them (empty: no SASL)`)
	cmd.Flags().StringVar(&certFile, "tls-cert", "", "PEM certificate (chain) of the broker: serve TLS only (needs --tls-key)")
	cmd.Flags().StringVar(&keyFile, "tls-key", "", "PEM private key of --tls-cert (mode 600)")
	return cmd
}

// brokerSecurity fills cfg's SASL users and TLS from the broker's flags.
func brokerSecurity(cfg *broker.Config, usersFile, certFile, keyFile string) error {
	if usersFile != "" {
		users, err := broker.ReadUsersFile(usersFile)
		if err != nil {
			return err
		}
		cfg.SASLUsers = users
	}
	if (certFile == "") != (keyFile == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return fmt.Errorf("broker TLS: %w", err)
		}
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	return nil
}
