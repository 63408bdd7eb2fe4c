package main

import "github.com/spf13/cobra"

func init() { register(newBenchCmd) }

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure a stage against its ceiling, side by side in one run",
		Long: `bench runs load tools that measure one stage of harnessflow and, in the same
run and against the same servers, the ceiling it is compared with; figures are
reported as ratios because shared machines are noisy.`,
		Args: cobra.NoArgs,
	}
	for _, f := range benchSubcommands {
		cmd.AddCommand(f())
	}
	return cmd
}
