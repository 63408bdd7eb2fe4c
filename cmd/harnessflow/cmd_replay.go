package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/processors"
)

func init() { register(newReplayCmd) }

func newReplayCmd() *cobra.Command {
	var cfg processors.Config
	var brokers string
	var generation int64
	var untilCaughtUp bool
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Rebuild the derived topics from offset 0 of the raw topics (a new output generation)",
		Long: `replay runs the processor under fresh consumer groups, <group>-gen<N> and
<group>-gen<N>-pair, so that it reads the raw topics from offset 0 and derives
everything again: a new output generation. N is --generation (default: the
current unix time); reusing an N resumes that generation.

Derived events have deterministic ids (the same raw log yields the same ids and
bytes), so the re-emitted samples, round metrics and dead letters carry the ids
they had before: idempotent sinks (ClickHouse ReplacingMergeTree, the trainer)
deduplicate them, and only what the processor's logic now derives differently
appears as new ids. Stop the regular 'process' instances first if the replay
should not run beside them (running both is safe, only wasteful).

With --until-caught-up, replay exits once both stages have committed
everything up to the raw topics' end offsets read at its start.`,
		Example: "  harnessflow replay --brokers 127.0.0.1:9092 --until-caught-up",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if generation == 0 {
				generation = time.Now().Unix()
			}
			cfg.Group = fmt.Sprintf("%s-gen%d", cfg.Group, generation)
			cfg.StopWhenCaughtUp = untilCaughtUp
			fmt.Fprintln(cmd.OutOrStdout(), cfg.Group)
			return runProcessor(cmd, cfg, brokers, "replay")
		},
	}
	processorFlags(cmd.Flags(), &cfg, &brokers)
	cmd.Flags().Int64Var(&generation, "generation", 0, "output generation N (groups <group>-gen<N>); 0: the current unix time")
	cmd.Flags().BoolVar(&untilCaughtUp, "until-caught-up", false, "exit once the raw topics' end offsets read at start are processed")
	return cmd
}
