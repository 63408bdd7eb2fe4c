package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/bench/stages"
)

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

// benchExit maps a stage bench's error to the exit status: 1 when the
// measured run failed (stages.ErrFailed), 2 for the bench's own setup.
func benchExit(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, stages.ErrFailed) {
		return withCode(1, err)
	}
	return withCode(2, err)
}
