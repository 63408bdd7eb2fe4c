package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/bench/stages"
	"github.com/harnessflow/harnessflow/trainer"
)

func init() { registerBench(newBenchTrainCmd) }

func newBenchTrainCmd() *cobra.Command {
	var cfg stages.TrainConfig
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Trainer throughput (samples/s) and /v1/score latency (p50/p99) on one device",
		Long: `bench train runs --steps optimizer steps of the reward model (default sizes) at
--batch-size on synthetic samples and prints samples/s, then serves /v1/score on a
loopback port and sends --requests sequential requests, printing p50 and p99 latency.
Goal: samples/s above the processors' sample rate at the default batch size.`,
		Example: "  harnessflow bench train --device cpu --steps 20",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.BatchSize < 1 || cfg.Steps < 1 || cfg.Requests < 1 {
				return withCode(2, errors.New("--batch-size, --steps and --requests must be positive"))
			}
			return benchExit(stages.Train(cmd.Context(), cfg, cmd.OutOrStdout()))
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Device, "device", stages.DefaultTrainDevice, "compute backend: auto, cpu or cuda")
	f.IntVar(&cfg.BatchSize, "batch-size", stages.DefaultTrainBatchSize, "samples per step")
	f.IntVar(&cfg.Steps, "steps", stages.DefaultTrainSteps, "timed optimizer steps (after 2 warm-up steps)")
	f.IntVar(&cfg.Requests, "requests", stages.DefaultTrainRequests, "/v1/score requests")
	dm := trainer.DefaultConfig().Model
	f.IntVar(&cfg.Model.Buckets, "buckets", dm.Buckets, "hashed n-gram buckets")
	f.IntVar(&cfg.Model.Dim, "dim", dm.Dim, "embedding width")
	f.IntVar(&cfg.Model.Hidden, "hidden", dm.Hidden, "hidden layer width")
	return cmd
}
