package main

import (
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/logx"
	"github.com/harnessflow/harnessflow/internal/prio"
	"github.com/harnessflow/harnessflow/trainer"
)

func init() { register(newTrainCmd) }

func newTrainCmd() *cobra.Command {
	var cfg trainer.Config
	var brokers string
	var lr float64
	var nice int
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Run the continuous trainer: consume hf.samples, train the reward model, serve /v1/score",
		Long: `train consumes labeled samples from hf.samples (consumer group hf-trainer) without
end, micro-batches them (--batch-size, or --batch-age for a partial batch) into AdamW
steps of the reward model (effect mean and variance, label), writes a trainer_steps
row per step to ClickHouse and an atomic checkpoint every --checkpoint-every steps or
--checkpoint-interval, holding the Kafka offsets of the trained frontier: after a crash
it resumes from the newest valid checkpoint, so no sample is lost or trained twice.
POST /v1/score on --listen scores a candidate update (reward = mean - lambda*std).`,
		Example: "  harnessflow train --brokers 127.0.0.1:9092 --clickhouse 127.0.0.1:9000 --checkpoint-dir ./.harnessflow/trainer",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Brokers = kafkax.ParseBrokers(brokers)
			cfg.Model.LR = float32(lr)
			log := logx.New("trainer")
			if err := prio.SetNice(nice); err != nil {
				return withCode(2, err)
			}
			t, err := trainer.New(cfg, trainer.WithLogger(log))
			if err != nil {
				return withCode(2, err)
			}
			log.Info().Str("device", t.Device()).Str("listen", cfg.Listen).Int("nice", nice).Msg("trainer starting")
			if err := t.Run(cmd.Context()); err != nil {
				if errors.Is(err, trainer.ErrConfig) {
					return withCode(2, err)
				}
				return withCode(1, err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&brokers, "brokers", "127.0.0.1:9092", "Kafka brokers, comma-separated")
	f.StringVar(&cfg.ClickHouse, "clickhouse", "127.0.0.1:9000", "ClickHouse native-protocol host:port (trainer_steps)")
	f.StringVar(&cfg.Database, "database", "harnessflow", "ClickHouse database")
	f.StringVar(&cfg.CheckpointDir, "checkpoint-dir", "", "directory for checkpoints (required)")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:8090", "HTTP address for /v1/score, /healthz, /metrics (off disables)")
	f.StringVar(&cfg.Device, "device", "auto", "compute backend: auto, cpu or cuda")
	f.StringVar(&cfg.Group, "group", "hf-trainer", "Kafka consumer group")
	f.IntVar(&cfg.BatchSize, "batch-size", 256, "samples per step")
	f.IntVar(&nice, "nice", 10, "CPU scheduling nice value, 0 to 19: the trainer runs behind the processors, the sink and ClickHouse when they share the CPUs (0 keeps the normal priority)")
	f.DurationVar(&cfg.BatchAge, "batch-age", 2*time.Second, "train a partial batch once its oldest sample waited this long")
	f.IntVar(&cfg.CheckpointEvery, "checkpoint-every", 100, "checkpoint every N steps")
	f.DurationVar(&cfg.CheckpointInterval, "checkpoint-interval", 30*time.Second, "checkpoint at least this often while consuming")
	f.IntVar(&cfg.CheckpointKeep, "checkpoint-keep", 3, "checkpoints kept on disk")
	f.Float64Var(&cfg.Lambda, "lambda", 1.0, "reward = mean - lambda*std")
	f.IntVar(&cfg.MaxStaleness, "max-staleness", 0, "drop samples staler than this many harness versions (0 = off)")
	f.IntVar(&cfg.Ensemble, "ensemble", 1, "train K models with different seeds; /v1/score answers their mean and majority vote")
	f.Uint64Var(&cfg.Seed, "seed", 0, "seed of model 0 (model i uses seed+i)")
	f.Float64Var(&lr, "lr", 0.003, "AdamW learning rate")
	f.IntVar(&cfg.Model.Buckets, "buckets", 1<<18, "hashed n-gram buckets")
	f.IntVar(&cfg.Model.Dim, "dim", 64, "embedding width")
	f.IntVar(&cfg.Model.Hidden, "hidden", 64, "hidden layer width")
	f.Float64Var(&cfg.HeldoutFraction, "heldout-fraction", 0.1, "share of sample ids held out for evaluation (negative disables)")
	return cmd
}
