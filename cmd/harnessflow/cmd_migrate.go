package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/obs"
)

func init() { register(newMigrateCmd) }

func newMigrateCmd() *cobra.Command {
	var addr, database, serverVersion, cluster string
	var timeout time.Duration
	var print bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or update harnessflow's ClickHouse database, tables and analyst views",
		Long: `migrate applies the numbered migrations of infra/chddl (compiled into the
binary) to a ClickHouse server and records each in the database's
schema_migrations ledger. It is idempotent and safe to interrupt: run it again
and it finishes. The sink runs it at start too.

The DDL takes the form the server's version needs (SELECT version()): from
ClickHouse 21.8 on, views are replaced atomically with CREATE OR REPLACE VIEW
(dialect "current"); older servers such as 18.16 get DROP TABLE + CREATE VIEW
(dialect "legacy"). The log names the dialect applied. When the ledger holds
migrations newer than this binary's (a newer harnessflow migrated the
database), migrate logs them and leaves the schema alone.

--print writes the statements, each ending with ';' at the end of a line, to
standard output without connecting, for review or for other tooling: for
--server-version (default: the newest version the migrations are tested on).
Applied in order to a fresh database they leave it as migrate would.

--cluster NAME migrates a ClickHouse cluster (NAME as in the servers'
remote_servers) through any one of its nodes: ON CLUSTER DDL; each table as
a replicated local table named with the suffix _local on every node and a
Distributed table with the contract's name over it, sharded so that a
cell's rows (and their redeliveries) stay on one shard; the analyst views on
every node over the Distributed tables; the ledger replicated to every node.
Run again from any node, it finds nothing to do. --print --cluster prints
that form.

Exit status: 0 when the schema is up to date (or left alone for a newer
binary) or the statements were printed, 2 on connection or DDL errors or a bad
--server-version.`,
		Example: `  harnessflow migrate --clickhouse 127.0.0.1:9000 --database harnessflow
  harnessflow migrate --print --server-version 26.7 > schema.sql
  harnessflow migrate --print --server-version 18.16 --database analytics
  harnessflow migrate --cluster hf --clickhouse ch-s1r1:9000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := obs.NewLogger("migrate")
			if print {
				d, err := chddl.DialectForVersion(serverVersion)
				if err != nil {
					return withCode(2, err)
				}
				if cluster != "" {
					err = chddl.PrintCluster(cmd.OutOrStdout(), database, cluster, d)
				} else {
					err = chddl.Print(cmd.OutOrStdout(), database, d)
				}
				if err != nil {
					return withCode(2, err)
				}
				return nil
			}
			if cmd.Flags().Changed("server-version") {
				return withCode(2, fmt.Errorf("--server-version goes with --print: when connected, migrate asks the server for its version"))
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			var opts []chx.OpenOption
			if cluster != "" {
				opts = append(opts, chx.Cluster())
			}
			conn, err := chx.Open(ctx, addr, "", opts...)
			if err != nil {
				return withCode(2, err)
			}
			defer conn.Close()
			s := chx.Session(conn)
			var res chddl.Result
			if cluster != "" {
				res, err = chddl.MigrateCluster(ctx, s, database, cluster)
			} else {
				res, err = chddl.Migrate(ctx, s, database)
			}
			if err != nil {
				return withCode(2, err)
			}
			res.Log(log.With().Str("clickhouse", addr).Logger(), database)
			recs, err := chddl.Applied(ctx, s, database)
			if err != nil {
				return withCode(2, err)
			}
			for _, r := range recs {
				fmt.Fprintf(cmd.OutOrStdout(), "%04d %-24s %s %s\n", r.Version, r.Name, r.Checksum[:min(12, len(r.Checksum))], r.AppliedAt.UTC().Format(time.RFC3339))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "clickhouse", chx.DefaultAddr, "ClickHouse native-protocol host:port")
	cmd.Flags().StringVar(&database, "database", chddl.DefaultDatabase, "database to create or update")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "bound on connecting and migrating")
	cmd.Flags().StringVar(&cluster, "cluster", "", "ClickHouse cluster name (remote_servers): migrate every node through this one; empty for a single server")
	cmd.Flags().BoolVar(&print, "print", false, "print the statements instead of applying them (no connection)")
	cmd.Flags().StringVar(&serverVersion, "server-version", chddl.NewestTested, "with --print: the ClickHouse version to write the DDL for (e.g. 18.16)")
	return cmd
}
