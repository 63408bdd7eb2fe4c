package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/sinks/report"
)

func init() { register(newReportCmd) }

func newReportCmd() *cobra.Command {
	var addr, database, project, campaign, htmlPath string
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Print a campaign's report from ClickHouse (and write it as HTML)",
		Long: `report reads the analyst views and prints the campaign's figures: the pass-rate
matrix per benchmark (baseline and post-evolution), Δupdate per evolver, Δbenefit
per agent with the cells below their baseline, SLR / LPR / HFR, adherence by
phase with drift and decay, the ten least stable pairs by round stddev, the
minimum detectable effect of each round's paired test at its n (worst-case sd 1),
label counts with the effective-update rate, and the critic's learning curve per
trainer from critic_evals (the model beside its best baseline per checkpoint, the
difference with its paired interval from critic_eval_diffs, and "no signal yet"
with the baselines it does not beat until the newest checkpoint beats them).
--html also writes one self-contained HTML file with charts (no scripts, fonts or
network references).

Without --campaign, the most recently declared campaign is reported (of --project,
when given). A report is one project's: without --project it is the campaign's
project, and an error names them when several projects use that campaign id.`,
		Example: "  harnessflow report --clickhouse 127.0.0.1:9000 --campaign demo --html report.html",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			conn, err := chx.Open(ctx, addr, database)
			if err != nil {
				return withCode(2, err)
			}
			defer conn.Close()
			r, err := report.Build(ctx, conn, project, campaign)
			if err != nil {
				return withCode(1, err)
			}
			if err := r.WriteText(cmd.OutOrStdout()); err != nil {
				return withCode(2, err)
			}
			if htmlPath == "" {
				return nil
			}
			tmp, err := os.CreateTemp(filepath.Dir(htmlPath), ".report-*.html")
			if err != nil {
				return withCode(2, err)
			}
			defer os.Remove(tmp.Name())
			if err := r.WriteHTML(tmp); err != nil {
				tmp.Close()
				return withCode(2, err)
			}
			if err := tmp.Close(); err != nil {
				return withCode(2, err)
			}
			if err := os.Rename(tmp.Name(), htmlPath); err != nil {
				return withCode(2, err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", htmlPath)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "clickhouse", chx.DefaultAddr, "ClickHouse native-protocol address host:port")
	f.StringVar(&database, "database", chddl.DefaultDatabase, "ClickHouse database holding the views")
	f.StringVar(&project, "project", "", "project of the campaign (default: the campaign's one project)")
	f.StringVar(&campaign, "campaign", "", "campaign id (default: the most recently declared)")
	f.StringVar(&htmlPath, "html", "", "also write the report as one self-contained HTML file")
	return cmd
}
