package main

import (
	"errors"
	"os"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/bench/stages"
	"github.com/harnessflow/harnessflow/internal/kafkax"
)

func init() { registerBench(newBenchProduceCmd) }

func newBenchProduceCmd() *cobra.Command {
	var cfg stages.ProduceConfig
	var brokers, cpuprofile string
	cmd := &cobra.Command{
		Use:   "produce",
		Short: "Producer SDK throughput against a raw kafka-go Writer, same broker, same run",
		Long: `bench produce writes --events task_attempt events twice against the same broker:
first with a raw kafka-go Writer given pre-encoded payloads (one WriteMessages call
per batch of --batch-size, the same writer settings as the SDK's), then through the
producers SDK, which validates and Avro-encodes every event in Emit. It prints
events/s and MB/s (keys and values) of both and the ratio SDK/raw. Each timed run
starts after a garbage collection, so that neither pays for the other's garbage
(or for building the SDK's fresh events); --cpuprofile profiles the whole run.
Goals: SDK >= 0.8 x raw and >= 100k task_attempt events/s.`,
		Example: "  harnessflow bench produce --embedded --events 200000",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Events < 1 || cfg.Batch < 1 || cfg.Cells < 1 || cfg.Rounds < 1 {
				return withCode(2, errors.New("--events, --batch-size, --cells and --rounds must be positive"))
			}
			if !cfg.Embedded {
				cfg.Brokers = kafkax.ParseBrokers(brokers)
			}
			if cpuprofile != "" {
				f, err := os.Create(cpuprofile)
				if err != nil {
					return withCode(2, err)
				}
				defer f.Close()
				cfg.CPUProfile = f
			}
			return benchExit(stages.Produce(cmd.Context(), cfg, cmd.OutOrStdout()))
		},
	}
	f := cmd.Flags()
	f.StringVar(&brokers, "brokers", kafkax.DefaultBrokers, "Kafka brokers (ignored with --embedded)")
	f.BoolVar(&cfg.Embedded, "embedded", false, "start an in-memory embedded broker on a free port for the run")
	f.IntVar(&cfg.Events, "events", stages.DefaultProduceEvents, "events written by each of the two runs")
	f.IntVar(&cfg.Batch, "batch-size", stages.DefaultProduceBatch, "events per produce call (raw) and SDK BatchSize")
	f.IntVar(&cfg.Cells, "cells", stages.DefaultProduceCells, "distinct cell ids (partition keys)")
	f.IntVar(&cfg.Rounds, "rounds", stages.DefaultProduceRounds, "alternating raw/SDK rounds; the median is reported")
	f.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run (both writers) to this file")
	return cmd
}
