package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/producers/sim"
)

func init() { register(newSimulateCmd) }

func newSimulateCmd() *cobra.Command {
	var brokers string
	var cfg sim.Config
	var quiet, textSignal bool
	var connectTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Stream a deterministic, calibrated cross-evaluation campaign to Kafka",
		Long: `simulate generates a full cross-evaluation campaign (agents × evolvers ×
benchmarks, each agent with a baseline cell) from a generative model calibrated
to the paper's findings: flat harness-updating across evolver tiers, non-monotonic
harness-benefit, weak agents' skill-activation and adherence failures, round-to-
round noise, negative updates and retries. Output is a pure function of the flags:
the same --seed gives the same events, ids and event times.

--scale is the number of tasks per cell; rounds = ceil(scale / batch size).
A progress bar is drawn on stderr.

Each harness update's effect comes from a latent quality of its content (the
rule it puts first, concrete steps, checks, benchmark-specific details, filler,
verbosity) in its context (benchmark, agent), plus round noise; the skill's
text shows that content in varied wording. --text-signal=false is the control:
the text shows an independent draw of content and explains nothing of the
effect, while effects, tasks and outcomes stay the same. --held-out-wording
renders the skills with phrasings never used otherwise.`,
		Example: "  harnessflow simulate --brokers 127.0.0.1:9092 --campaign demo --scale 20 --seed 1",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := obs.NewLogger("simulate")
			cfg.TextSignal = sim.Bool(textSignal)
			if err := cfg.Validate(); err != nil {
				return withCode(2, err)
			}
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
			p, err := producers.New(producers.Config{Brokers: bl, Project: cfg.Project, Source: sim.Source}, producers.WithLogger(log))
			if err != nil {
				return withCode(2, err)
			}
			progress := cmd.ErrOrStderr()
			if quiet {
				progress = nil
			}
			start := time.Now()
			st, runErr := sim.Run(ctx, cfg, p, progress)
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := p.Close(cctx); err != nil && runErr == nil {
				runErr = err
			}
			if runErr != nil {
				return withCode(2, runErr)
			}
			log.Info().Int("events", st.Events).Int("cells", st.Cells).Dur("took", time.Since(start)).Msg("campaign produced")
			fmt.Fprintf(cmd.OutOrStdout(), "produced %d events in %d cells\n", st.Events, st.Cells)
			return nil
		},
	}
	f := cmd.Flags()
	d := sim.DefaultConfig()
	f.StringVar(&brokers, "brokers", kafkax.DefaultBrokers, "Kafka brokers, host:port[,host:port]")
	f.StringVar(&cfg.Campaign, "campaign", d.Campaign, "campaign id")
	f.StringVar(&cfg.Project, "project", d.Project, "project (tenant) of the events")
	f.IntVar(&cfg.Scale, "scale", d.Scale, "tasks per cell")
	f.IntVar(&cfg.BatchSize, "batch-size", d.BatchSize, "tasks per round")
	f.Int64Var(&cfg.Seed, "seed", d.Seed, "seed of every random draw (and the cells' seed)")
	f.StringSliceVar(&cfg.Benchmarks, "benchmarks", d.Benchmarks, "benchmarks (swe, mcp, sb)")
	f.StringSliceVar(&cfg.Agents, "agents", d.Agents, "agent model nicknames")
	f.StringSliceVar(&cfg.Evolvers, "evolvers", d.Evolvers, "evolver model nicknames")
	f.StringSliceVar(&cfg.AnchorAgents, "anchor-agents", d.AnchorAgents, "anchor agents of the campaign (Δupdate's mean)")
	f.StringSliceVar(&cfg.AnchorEvolvers, "anchor-evolvers", d.AnchorEvolvers, "anchor evolvers of the campaign (Δbenefit's max)")
	f.BoolVar(&textSignal, "text-signal", *d.TextSignal, "skills' text shows the content that sets each update's effect (false: the control, text drawn independently)")
	f.BoolVar(&cfg.HeldOutWording, "held-out-wording", d.HeldOutWording, "render skills with the held-out phrasings only")
	f.BoolVar(&quiet, "quiet", false, "no progress bar")
	f.DurationVar(&connectTimeout, "connect-timeout", kafkax.DefaultConnectTimeout, "how long to wait for a reachable broker")
	return cmd
}
