package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/bench/stages"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
)

func init() { registerBench(newBenchProcessCmd) }

func newBenchProcessCmd() *cobra.Command {
	var cfg stages.ProcessConfig
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
			cfg.Brokers = kafkax.ParseBrokers(brokers)
			if cpuprofile != "" {
				f, err := os.Create(cpuprofile)
				if err != nil {
					return withCode(2, fmt.Errorf("cpu profile: %w", err))
				}
				defer f.Close()
				cfg.CPUProfile = f
			}
			if memprofile != "" {
				f, err := os.Create(memprofile)
				if err != nil {
					return withCode(2, fmt.Errorf("heap profile: %w", err))
				}
				defer f.Close()
				cfg.MemProfile = f
			}
			res, err := stages.Process(cmd.Context(), cfg, stages.WithLogger(obs.NewLogger("bench-process")))
			if err != nil {
				return benchExit(err)
			}
			res.Print(cmd.OutOrStdout(), memprofile)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&brokers, "brokers", "", "Kafka brokers (empty: start an embedded broker)")
	f.IntVar(&cfg.Agents, "agents", stages.DefaultProcessAgents, "agent models (one pairing key each)")
	f.IntVar(&cfg.Evolvers, "evolvers", stages.DefaultProcessEvolvers, "evolved cells per agent")
	f.IntVar(&cfg.Rounds, "rounds", stages.DefaultProcessRounds, "rounds per cell")
	f.IntVar(&cfg.Tasks, "tasks", stages.DefaultProcessTasks, "tasks per round")
	f.Int64Var(&cfg.Seed, "seed", stages.DefaultProcessSeed, "campaign seed")
	f.StringVar(&cpuprofile, "cpuprofile", "", "write a pprof CPU profile of the process phase to this file (go tool pprof)")
	f.IntVar(&cfg.FetchMaxBytes, "fetch-max-bytes", 0, "the processor's --fetch-max-bytes (0: its default)")
	f.DurationVar(&cfg.FetchWait, "fetch-wait", stages.DefaultProcessFetchWait, "the processor's --fetch-wait (its merge past an empty sibling waits for a fetch that comes back after this)")
	f.IntVar(&cfg.OutcomeBatch, "outcome-batch", 0, "the processor's --outcome-batch (0: its default; 1: one hf.outcomes record per event)")
	f.BoolVar(&cfg.Relay, "relay", false, "also measure the read -> write -> read relay floor under both stages")
	f.IntVar(&cfg.RelayBatch, "relay-batch", stages.DefaultProcessRelayBatch, "raw messages packed into one relayed record (what batching hf.outcomes records would buy); packing restarts at each write of 2000 messages, so K above 2000 acts as 2000")
	f.StringVar(&memprofile, "memprofile", "", "write a pprof heap profile taken near the process phase's peak heap to this file, and print the peak")
	return cmd
}
