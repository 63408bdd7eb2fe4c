package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	chddl "github.com/harnessflow/harnessflow/infra/clickhouse"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/logx"
)

func init() { register(newMigrateCmd) }

func newMigrateCmd() *cobra.Command {
	var addr, database string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or update harnessflow's ClickHouse database, tables and analyst views",
		Long: `migrate applies the numbered migrations of infra/clickhouse (compiled into the
binary) to a ClickHouse server and records each in the database's
schema_migrations ledger. It is idempotent and safe to interrupt: run it again
and it finishes. The sink runs it at start too.

Exit status: 0 when the schema is up to date, 2 on connection or DDL errors.`,
		Example: "  harnessflow migrate --clickhouse 127.0.0.1:9000 --database harnessflow",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := logx.New("migrate")
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			conn, err := chx.Open(ctx, addr, "")
			if err != nil {
				return withCode(2, err)
			}
			defer conn.Close()
			if err := chddl.Migrate(ctx, conn, database); err != nil {
				return withCode(2, err)
			}
			recs, err := chddl.Applied(ctx, conn, database)
			if err != nil {
				return withCode(2, err)
			}
			for _, r := range recs {
				fmt.Fprintf(cmd.OutOrStdout(), "%04d %-24s %s %s\n", r.Version, r.Name, r.Checksum[:12], r.AppliedAt.UTC().Format(time.RFC3339))
			}
			log.Info().Str("clickhouse", addr).Str("database", database).Int("migrations", len(recs)).Msg("schema up to date")
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "clickhouse", "127.0.0.1:9000", "ClickHouse native-protocol host:port")
	cmd.Flags().StringVar(&database, "database", chddl.DefaultDatabase, "database to create or update")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "bound on connecting and migrating")
	return cmd
}
