package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/producers/aevolve"
)

func init() { register(newImportCmd) }

func newImportCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import",
		Short: "Import runs of other tools as harnessflow events",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newImportAEvolveCmd())
	return cmd
}

func newImportAEvolveCmd() *cobra.Command {
	var brokers string
	var cfg aevolve.Config
	var connectTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "a-evolve DIR",
		Short: "Stream A-Evolve cell directories (one, or a tree of them) as events",
		Long: `a-evolve reads A-Evolve run directories (<solver>_x_<evolver>_<bm>_s<seed>/)
and produces their events: cell_started (+ cell_finished when the done marker
exists), one task_attempt per result row, skill_event from SkillsBench
trajectories, and one harness_update per workspace tag evo-N whose diff changes a
harness file (read with the git command-line tool). The campaign defaults to the
base name of DIR; cell ids are the cell directories' names.

Importing the same directory again produces the same event ids and changes no
figure. For each file read, a line "path: read N rows, skipped M (reason: k)"
goes to stderr, names escaped (strconv.Quote) when they hold characters that are
not printable, such as terminal escape codes. A cell directory or a file that is a
symbolic link, or a file with more than one hard link, is refused: the report names
it and none of its tasks is imported.`,
		Example: "  harnessflow import a-evolve ./runs/paper --brokers 127.0.0.1:9092",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			log := obs.NewLogger("import")
			cfg.Dir = args[0]
			bl := kafkax.ParseBrokers(brokers)
			if len(bl) == 0 {
				return withCode(2, kafkax.ErrNoBrokers)
			}
			ctx := cmd.Context()
			if err := kafkax.WaitReachable(ctx, bl, connectTimeout); err != nil {
				return withCode(2, err)
			}
			if err := kafkax.EnsureAllTopics(ctx, bl); err != nil {
				return withCode(2, err)
			}
			p, err := producers.New(producers.Config{Brokers: bl, Project: cfg.Project, Source: aevolve.Source}, producers.WithLogger(log))
			if err != nil {
				return withCode(2, err)
			}
			sum, runErr := aevolve.Run(ctx, cfg, p, cmd.ErrOrStderr())
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := p.Close(cctx); err != nil && runErr == nil {
				runErr = err
			}
			if runErr != nil {
				return withCode(2, runErr)
			}
			// Names escaped: cell ids are directory names of the run.
			return sum.WriteText(cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	d := aevolve.DefaultConfig()
	f.StringVar(&brokers, "brokers", kafkax.DefaultBrokers, "Kafka brokers, host:port[,host:port]")
	f.StringVar(&cfg.Campaign, "campaign", "", "campaign id (default: the base name of DIR)")
	f.StringVar(&cfg.Project, "project", d.Project, "project (tenant) of the events")
	f.StringSliceVar(&cfg.AnchorAgents, "anchor-agents", d.AnchorAgents, "anchor agents declared with the campaign")
	f.StringSliceVar(&cfg.AnchorEvolvers, "anchor-evolvers", d.AnchorEvolvers, "anchor evolvers declared with the campaign")
	f.StringVar(&cfg.Git, "git", d.Git, "git executable used to read workspace tags")
	f.DurationVar(&connectTimeout, "connect-timeout", kafkax.DefaultConnectTimeout, "how long to wait for a reachable broker")
	return cmd
}
