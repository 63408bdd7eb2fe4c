package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/bench/critic"
)

func init() { registerBench(newBenchCriticCmd) }

func newBenchCriticCmd() *cobra.Command {
	var cfg critic.Config
	var seeds, benchmarks, agents, evolvers string
	cmd := &cobra.Command{
		Use:   "critic-offline",
		Short: "Does the critic learn from update content? A fresh model vs the baselines, text signal on and off",
		Long: `bench critic-offline runs two arms, the simulator's text signal on and off (the
control: the same effects, the skills' text drawn independently of them). For each it
simulates one campaign per --seeds seed, derives labeled samples through an embedded
broker and an in-process processor, splits them by (campaign, seed) group with
--group-heldout-fraction, trains a fresh CPU reward model on the training side for
--epochs shuffled epochs, and scores it on the held-out groups against the four
baselines (median, majority label, cell mean, evidence regression) with bootstrap
intervals over the held-out groups, as critic-eval does. It prints each arm's table, a
summary line (model RMSE / best baseline RMSE, the rho difference with its interval, the
verdict) and the issue's goal: with the text on, RMSE <= 0.95 x the best baseline's and
rho >= the best's + 0.10, the intervals excluding 0; with it off, no claimed gain. The
goals are reported, never enforced: exit 0 whatever the verdict.`,
		Example: "  harnessflow bench critic-offline\n  harnessflow bench critic-offline --seeds 1..12 --scale 10 --epochs 3",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Seeds, err = parseSeeds(seeds); err != nil {
				return withCode(2, err)
			}
			cfg.Benchmarks, cfg.Agents, cfg.Evolvers = splitList(benchmarks), splitList(agents), splitList(evolvers)
			if err := cfg.Validate(); err != nil {
				return withCode(2, err)
			}
			_, err = critic.Run(cmd.Context(), cfg, cmd.OutOrStdout())
			if errors.Is(err, critic.ErrConfig) {
				return withCode(2, err)
			}
			if err != nil {
				return withCode(1, err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Campaign, "campaign", "critic", "simulated campaign id")
	f.StringVar(&seeds, "seeds", "1..48", "seeds of the simulated campaigns: a range a..b or a comma list; one group each")
	f.IntVar(&cfg.Scale, "scale", 20, "tasks per cell")
	f.IntVar(&cfg.SimBatchSize, "sim-batch-size", 5, "tasks per round")
	f.StringVar(&benchmarks, "benchmarks", "", "comma-separated benchmarks (default: the simulator's)")
	f.StringVar(&agents, "agents", "", "comma-separated agents (default: the simulator's)")
	f.StringVar(&evolvers, "evolvers", "", "comma-separated evolvers (default: the simulator's)")
	f.Float64Var(&cfg.HeldoutFraction, "group-heldout-fraction", 0.25, "fraction of (campaign, seed) groups held out")
	f.Uint64Var(&cfg.SplitSeed, "split-seed", 0, "seed of the group split")
	f.IntVar(&cfg.Epochs, "epochs", 5, "shuffled epochs over the training side")
	f.IntVar(&cfg.BatchSize, "batch-size", 256, "training batch")
	f.IntVar(&cfg.Model.Buckets, "buckets", 1<<18, "hashed n-gram buckets")
	f.Uint64Var(&cfg.Model.Seed, "model-seed", 0, "model initialisation and shuffle seed")
	f.IntVar(&cfg.Eval.Resamples, "resamples", 1000, "bootstrap resamples of the held-out groups")
	f.IntVar(&cfg.Eval.MinGroups, "min-groups", 10, "fewest held-out groups a verdict may rest on")
	return cmd
}

// parseSeeds parses "a..b" (inclusive) or "a,b,c".
func parseSeeds(s string) ([]int64, error) {
	if lo, hi, ok := strings.Cut(s, ".."); ok {
		a, err1 := strconv.ParseInt(strings.TrimSpace(lo), 10, 64)
		b, err2 := strconv.ParseInt(strings.TrimSpace(hi), 10, 64)
		if err1 != nil || err2 != nil || a < 1 || b < a || b-a > 100000 {
			return nil, fmt.Errorf("--seeds %q: want a..b with 1 <= a <= b", s)
		}
		var out []int64
		for v := a; v <= b; v++ {
			out = append(out, v)
		}
		return out, nil
	}
	var out []int64
	for _, p := range splitList(s) {
		v, err := strconv.ParseInt(p, 10, 64)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("--seeds %q: %q is no positive seed", s, p)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--seeds %q: no seed", s)
	}
	return out, nil
}

// splitList splits a comma-separated list, dropping empty items; "" is nil.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
