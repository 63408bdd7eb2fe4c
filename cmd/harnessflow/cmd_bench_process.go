package main

import (
	"fmt"
	"os"

	"github.com/harnessflow/harnessflow/internal/broker"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
	"github.com/harnessflow/harnessflow/processors"
)

func init() { registerBench(newBenchProcessCmd) }

func newBenchProcessCmd() *cobra.Command {
	var bc processors.BenchConfig
	var brokers, cpuprofile, memprofile string
	cmd := &cobra.Command{
		Use:   "process",
		Short: "Feed a generated campaign through a broker; print processor events/s beside the raw kafka-go read rate",
		Long: `bench process writes a generated campaign to the raw topics, then, on the same
broker and in the same run, reads the raw cell topics from offset 0 with a plain
kafka-go group reader (the ceiling) and runs a fresh processor group over them
until both stages have committed everything. It prints both rates and their
ratio (goal: >= 0.5). Without --brokers an embedded broker is started.

--relay also measures the floor under both stages, in the same run: a plain
kafka-go reader over the raw cell topics feeding an asynchronous kafka-go
Writer into a scratch topic shaped like hf.outcomes (hf.bench-relay), read
back partition by partition (read, write, read, no processing: the Kafka work
the two stages do). Its ratio to the raw read is the most the processors'
ratio can reach on this broker and machine. --relay-batch K packs K raw
messages per relayed record, to see what batching hf.outcomes would buy.`,
		Example: "  harnessflow bench process --agents 8 --rounds 10 --tasks 100",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bc.Log = obs.NewLogger("bench-process")
			bc.Brokers = kafkax.ParseBrokers(brokers)
			if len(bc.Brokers) == 0 {
				b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0"})
				if err != nil {
					return withCode(2, err)
				}
				defer b.Close()
				bc.Brokers = []string{b.Addr()}
			}
			if cpuprofile != "" {
				f, err := os.Create(cpuprofile)
				if err != nil {
					return withCode(2, fmt.Errorf("cpu profile: %w", err))
				}
				defer f.Close()
				bc.CPUProfile = f
			}
			if memprofile != "" {
				f, err := os.Create(memprofile)
				if err != nil {
					return withCode(2, fmt.Errorf("heap profile: %w", err))
				}
				defer f.Close()
				bc.MemProfile = f
			}
			res, err := processors.Bench(cmd.Context(), bc)
			if err != nil {
				return withCode(1, err)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "events (raw cell topics): %d (%d task_attempt this run)\n", res.Events, res.Attempts)
			fmt.Fprintf(out, "raw kafka-go read:        %10.0f events/s (%v)\n", res.RawRate(), res.Raw)
			fmt.Fprintf(out, "process, end to end:      %10.0f events/s (%v, group join and both stages included)\n", res.ProcessRate(), res.Process)
			fmt.Fprintf(out, "ratio process/raw:        %10.2f (goal >= 0.50)\n", res.Ratio())
			if res.Relay > 0 {
				fmt.Fprintf(out, "relay floor (read, write, read back): %10.0f events/s (%v)\n", res.RelayRate(), res.Relay)
				fmt.Fprintf(out, "ratio relay/raw:          %10.2f (the most process/raw can reach here)\n", res.RelayRate()/res.RawRate())
				fmt.Fprintf(out, "ratio process/relay:      %10.2f\n", res.ProcessRate()/res.RelayRate())
			}
			if res.PeakHeap > 0 {
				fmt.Fprintf(out, "peak heap in use:         %10.0f MiB (heap profile: %s)\n", float64(res.PeakHeap)/(1<<20), memprofile)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&brokers, "brokers", "", "Kafka brokers (empty: start an embedded broker)")
	cmd.Flags().IntVar(&bc.Agents, "agents", 8, "agent models (one pairing key each)")
	cmd.Flags().IntVar(&bc.Evolvers, "evolvers", 3, "evolved cells per agent")
	cmd.Flags().IntVar(&bc.Rounds, "rounds", 10, "rounds per cell")
	cmd.Flags().IntVar(&bc.Tasks, "tasks", 100, "tasks per round")
	cmd.Flags().Int64Var(&bc.Seed, "seed", 1, "campaign seed")
	cmd.Flags().StringVar(&cpuprofile, "cpuprofile", "", "write a pprof CPU profile of the process phase to this file (go tool pprof)")
	cmd.Flags().IntVar(&bc.FetchMaxBytes, "fetch-max-bytes", 0, "the processor's --fetch-max-bytes (0: its default)")
	cmd.Flags().DurationVar(&bc.FetchWait, "fetch-wait", processors.DefaultBenchFetchWait, "the processor's --fetch-wait (its merge past an empty sibling waits for a fetch that comes back after this)")
	cmd.Flags().IntVar(&bc.OutcomeBatch, "outcome-batch", 0, "the processor's --outcome-batch (0: its default; 1: one hf.outcomes record per event)")
	cmd.Flags().BoolVar(&bc.Relay, "relay", false, "also measure the read -> write -> read relay floor under both stages")
	cmd.Flags().IntVar(&bc.RelayBatch, "relay-batch", 1, "raw messages packed into one relayed record (what batching hf.outcomes records would buy); packing restarts at each write of 2000 messages, so K above 2000 acts as 2000")
	cmd.Flags().StringVar(&memprofile, "memprofile", "", "write a pprof heap profile taken near the process phase's peak heap to this file, and print the peak")
	return cmd
}
