package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
	"github.com/harnessflow/harnessflow/internal/proc"
	"github.com/harnessflow/harnessflow/trainer"
	"github.com/harnessflow/harnessflow/trainer/eval"
)

func init() { register(newTrainCmd) }

func newTrainCmd() *cobra.Command {
	var cfg trainer.Config
	var brokers string
	var lr float64
	var nice int
	var memLimit string
	evalCfg := eval.Config{Level: 0.95} // Key: the trainer's --heldout-group-key
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Run the continuous trainer: consume hf.samples, train the reward model, serve /v1/score",
		Long: `train consumes labeled samples from hf.samples (consumer group hf-trainer) without
end, micro-batches them (--batch-size, or --batch-age for a partial batch) into AdamW
steps of the reward model (effect mean and variance, label), writes a trainer_steps
row per step to ClickHouse (with --cluster NAME through a ClickHouse cluster's
Distributed tables) and an atomic checkpoint every --checkpoint-every steps or
--checkpoint-interval, holding the Kafka offsets of the trained frontier: after a crash
it resumes from the newest valid checkpoint, so no sample is lost or trained twice.
POST /v1/score on --listen scores a candidate update (reward = effect - lambda*model_std),
and POST /v1/rewards scores a batch as a remote reward model (OpenRLHF's and
LightRFT's protocol; trainer/README.md); with --score-token-file both require
"Authorization: Bearer TOKEN", and with
--tls-cert and --tls-key the API is served over HTTPS only. /healthz answers 200
while the process runs; /readyz answers 503 naming what is unreachable while no
Kafka broker or ClickHouse answers.

Tenants: without --project one model is trained on every project's samples and serves
them all (a warning says so at start). With --project P the trainer trains on project
P's samples alone (consumer group and name hf-trainer-P unless --group is given; its
checkpoint directory must be its own), its critic_evals rows carry P, and /v1/score and
/v1/rewards answer 403 to a request naming another project (body field "project" or
?project=): its score token is project P's. Run one trainer per project.

Held-out evaluation: every sample of a held-out group (--heldout-group-key, default
campaign+seed, so the sibling samples of a round stay together; --heldout-fraction of
the groups, by hash) is never trained on. At each checkpoint the checkpoint's model is
scored on the evaluation set of its evaluation epoch, the last --heldout-window held-out
samples as they were when the epoch began (an epoch ends once --eval-epoch-samples
held-out samples have arrived since, or as many as the set holds while it is smaller
than the window; critic_evals names the set by a sha256 of its sample ids and the
epoch), beside five trivial baselines
(median effect, majority label, per-(evolver, agent, benchmark) mean, evidence-score
regression, and the last two together: the context regression) fitted on the last --eval-train-window trained samples, with intervals from
--eval-resamples bootstrap resamples of the held-out groups; the rows go to ClickHouse's
critic_evals table with the verdict ("beats baselines", or "no signal yet", always with
fewer than --eval-min-groups held-out groups), which also ends /v1/score's "warming", and
the paired differences model − best baseline with their intervals, which the verdict
rests on, to critic_eval_diffs. Checkpoints hold the evaluation set, the training
window and the early-stopping state: a restarted trainer evaluates on the same rows,
and evaluates the checkpoint it restored again (the same verdict, served again).

Training regime: after each step on new samples the trainer replays --replay-ratio
examples per new one, drawn from the last --replay-window admitted (training passes,
never re-admissions: samples_trained, offsets and trainer_steps rows count each sample
once; skipped while a full batch of new samples waits), at a learning rate that warms up
and decays by optimizer step (--lr-schedule; the step is in checkpoints). Replays pause
when the loss on the newest samples of the evaluation set has not improved for
--early-stop-patience evaluations, and resume when new samples improve it, refill the
window or a new evaluation epoch begins.`,
		Example: "  harnessflow train --brokers 127.0.0.1:9092 --clickhouse 127.0.0.1:9000 --checkpoint-dir ./.harnessflow/trainer",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Brokers = kafkax.ParseBrokers(brokers)
			cfg.Model.LR = float32(lr)
			explicitZeros(&cfg, cmd.Flags().Changed)
			log := obs.NewLogger("trainer")
			if err := proc.SetNice(nice); err != nil {
				return withCode(2, err)
			}
			if err := evalCfg.Validate(); err != nil {
				return withCode(2, fmt.Errorf("--eval-resamples, --eval-min-groups: %w", err))
			}
			t, err := trainer.New(cfg, trainer.WithLogger(log), trainer.WithCheckpointEvaluator(eval.CheckpointEvaluator(evalCfg)))
			if err != nil {
				return withCode(2, err)
			}
			limit, why, err := trainMemoryLimit(memLimit, t.HostTensorBytes(), os.Getenv("GOMEMLIMIT"))
			if err != nil {
				return withCode(2, err)
			}
			if limit > 0 {
				debug.SetMemoryLimit(limit)
			}
			// The limit in force (a negative input only reads it): GOMEMLIMIT's
			// when it set one, math.MaxInt64 when none is set.
			inForce := debug.SetMemoryLimit(-1)
			log.Info().Str("device", t.Device()).Str("listen", cfg.Listen).Int("nice", nice).
				Int64("memory_limit", inForce).Str("memory_limit_from", why).Msg("trainer starting")
			if cfg.Listen != "" && cfg.Listen != "off" {
				obs.WarnUnauthenticated(log, "trainer", cfg.Listen, cfg.ScoreTokenFile != "" || cfg.ScoreToken != "",
					"anyone who reaches it scores candidates and rewards with the critic (POST /v1/score, /v1/rewards); "+
						"give --score-token-file or --listen 127.0.0.1:PORT")
			}
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
	d := trainer.DefaultConfig()
	f.StringVar(&brokers, "brokers", kafkax.DefaultBrokers, "Kafka brokers, comma-separated")
	f.StringVar(&cfg.ClickHouse, "clickhouse", chx.DefaultAddr, "ClickHouse native-protocol host:port (trainer_steps)")
	f.StringVar(&cfg.Database, "database", d.Database, "ClickHouse database")
	f.StringVar(&cfg.Cluster, "cluster", d.Cluster, "ClickHouse cluster name (remote_servers) whose Distributed trainer_steps to write; empty for a single server")
	f.StringVar(&cfg.CheckpointDir, "checkpoint-dir", "", "directory for checkpoints (required)")
	f.StringVar(&cfg.Listen, "listen", d.Listen, "HTTP address for /v1/score, /healthz, /readyz, /metrics (off disables)")
	f.StringVar(&cfg.TLSCert, "tls-cert", "", "PEM certificate file: with --tls-key, the HTTP API serves HTTPS only")
	f.StringVar(&cfg.TLSKey, "tls-key", "", "PEM key file of --tls-cert")
	f.StringVar(&cfg.ScoreTokenFile, "score-token-file", "", "file whose first line is the bearer token POST /v1/score and /v1/rewards require (mode 600; /metrics, /healthz and /readyz stay open; empty: both are open)")
	f.StringVar(&cfg.Device, "device", d.Device, "compute backend: auto, cpu or cuda")
	f.StringVar(&cfg.Project, "project", "", "train on and serve this project's samples alone (samples of others are skipped and counted in hf_trainer_foreign_samples_total; /v1/score and /v1/rewards answer 403 to a request naming another project; the score token is this project's); empty: one model of every project's samples, shared by all")
	f.StringVar(&cfg.Group, "group", "", "Kafka consumer group, also the trainer's name in trainer_steps, critic_evals and model versions (empty: "+d.Group+", or "+d.Group+"-PROJECT with --project)")
	f.IntVar(&cfg.BatchSize, "batch-size", d.BatchSize, "samples per step")
	f.StringVar(&memLimit, "memory-limit", "auto", "soft memory limit of the Go runtime (debug.SetMemoryLimit): auto (on the CPU backend the model's tensors + 128MiB, so that the GC's heap target does not double the tensors; none on a device or when GOMEMLIMIT is set), off, or a size such as 1GiB or 512MiB")
	f.IntVar(&nice, "nice", trainer.DefaultNice, "CPU scheduling nice value, 0 to 19: the trainer runs behind the processors, the sink and ClickHouse when they share the CPUs (0 keeps the normal priority)")
	f.DurationVar(&cfg.BatchAge, "batch-age", d.BatchAge, "train a partial batch once its oldest sample waited this long")
	f.IntVar(&cfg.CheckpointEvery, "checkpoint-every", d.CheckpointEvery, "checkpoint every N steps")
	f.DurationVar(&cfg.CheckpointInterval, "checkpoint-interval", d.CheckpointInterval, "checkpoint at least this often while consuming")
	f.IntVar(&cfg.CheckpointKeep, "checkpoint-keep", d.CheckpointKeep, "checkpoints kept on disk")
	f.DurationVar(&cfg.PinRetention, "pin-retention", d.PinRetention, "keep a checkpoint beyond --checkpoint-keep for this long after the last request that pinned its version (?model_version=; at most the 8 newest pinned)")
	f.Float64Var(&cfg.Lambda, "lambda", d.Lambda, "reward = effect - lambda*model_std, model_std the ensemble members' disagreement (0 with --ensemble 1): 0 rewards the predicted effect itself")
	f.IntVar(&cfg.MaxStaleness, "max-staleness", 0, "drop samples staler than this many harness versions (0 = off)")
	f.IntVar(&cfg.Ensemble, "ensemble", d.Ensemble, "train K models with different seeds; /v1/score answers their mean and majority vote")
	f.Uint64Var(&cfg.Seed, "seed", 0, "seed of model 0 (model i uses seed+i)")
	f.Float64Var(&lr, "lr", trainer.DefaultLR, "AdamW peak learning rate (--lr-schedule scales it by optimizer step)")
	f.StringVar(&cfg.LRSchedule, "lr-schedule", d.LRSchedule, "learning-rate schedule over optimizer steps (new and replayed; the step is in checkpoints, so a restart continues it), each after a linear warm-up: inverse-sqrt (--lr/sqrt(1+t/--lr-decay-steps), no horizon), cosine (down to the floor over --lr-decay-steps, then flat) or constant")
	f.IntVar(&cfg.LRWarmup, "lr-warmup", d.LRWarmup, "optimizer steps of the linear learning-rate warm-up (0: none)")
	f.IntVar(&cfg.LRDecaySteps, "lr-decay-steps", d.LRDecaySteps, "time scale of the learning-rate decay in optimizer steps after the warm-up")
	f.Float64Var(&cfg.LRMinRatio, "lr-min-ratio", d.LRMinRatio, "floor of the learning-rate decay, a fraction of --lr (0: none)")
	f.IntVar(&cfg.ReplayWindow, "replay-window", d.ReplayWindow, "most recent admitted training samples kept in memory to replay (about 112 bytes each beside their text, which they share with --eval-train-window's; not in checkpoints as such: a restart refills it from the checkpoint's --eval-train-window samples)")
	f.Float64Var(&cfg.ReplayRatio, "replay-ratio", d.ReplayRatio, "replayed examples per new training sample, drawn from --replay-window after each step on new samples: extra passes, never re-admissions (samples_trained counts each sample once); skipped while a full batch of new samples waits; 0 turns replays off")
	f.IntVar(&cfg.ReplayBatchSize, "replay-batch-size", d.ReplayBatchSize, "most examples per replayed step (steps are the size of the new step up to this): smaller steps move the model more per replayed example and cost more CPU per example")
	f.IntVar(&cfg.EarlyStopPatience, "early-stop-patience", d.EarlyStopPatience, "pause replays when the held-out loss (after each replay round, on the newest --early-stop-rows samples of the evaluation set) has not improved for this many evaluations; new samples always train, and replays resume when they improve it, have refilled --replay-window, or a new evaluation epoch begins (0: never pause; the state is in checkpoints)")
	f.IntVar(&cfg.EarlyStopRows, "early-stop-rows", d.EarlyStopRows, "newest samples of the evaluation set the early-stopping evaluation scores")
	f.IntVar(&cfg.Model.Buckets, "buckets", d.Model.Buckets, "hashed n-gram buckets")
	f.IntVar(&cfg.Model.Dim, "dim", 0, "embedding width of the network (0: 16 with --structure additive, where it gives only the log-variance and the labels; 64 with mlp)")
	f.IntVar(&cfg.Model.Hidden, "hidden", 0, "hidden layer width of the network (0: as --dim's default)")
	f.StringVar(&cfg.Model.Structure, "structure", trainer.StructureAdditive, "model structure: additive (the context regression fitted in closed form as the base, plus a bilinear text part on what it leaves) or mlp (one network for everything, the structure before 2026-12; a checkpoint restores only into its structure)")
	f.IntVar(&cfg.Model.Rank, "rank", trainer.DefaultRank, "factors of the additive structure's text part (scale(context) · text(update) summed over them)")
	f.Float64Var(&cfg.Model.RoundWeight, "round-weight", trainer.DefaultRoundWeight, "weight of the loss's within-round term (the candidates of one round against each other, free of their shared noise) beside the pooled NLL; negative turns it off")
	f.Float32Var(&cfg.Model.TextLRScale, "text-lr-scale", trainer.DefaultTextLRScale, "learning-rate multiplier of the additive structure's text and scale tables")
	f.Float32Var(&cfg.Model.WeightDecay, "weight-decay", 0, fmt.Sprintf("AdamW decoupled weight decay (0: %g with --structure additive, %g with mlp)", trainer.DefaultAdditiveWeightDecay, trainer.DefaultWeightDecay))
	f.Float64Var(&cfg.Model.AverageDecay, "average-decay", trainer.DefaultAverageDecay, "the additive structure predicts with a moving average of its text and scale tables with this decay per optimizer step (Polyak averaging); negative turns it off (the last iterate)")
	f.BoolVar(&cfg.Model.Crosses, "crosses", d.Model.Crosses, "add update-word × benchmark/agent/kind features (a checkpoint restores only with the setting it was trained with)")
	f.BoolVar(&cfg.Model.Context, "context-features", d.Model.Context, "add the cell and the evidence pass rate parsed from the query as features (a checkpoint restores only with the setting it was trained with)")
	f.Float64Var(&cfg.HeldoutFraction, "heldout-fraction", d.HeldoutFraction, "share of groups (--heldout-group-key) whose samples are held out of training for evaluation (negative disables)")
	f.StringVar(&cfg.EffectWeighting, "effect-weighting", d.EffectWeighting, "weight of each sample's effect in the loss: precision (its paired tasks, relative to the batch) or none")
	f.StringVar(&cfg.HeldoutGroupKey, "heldout-group-key", d.HeldoutGroupKey, "group of the held-out split: campaign, campaign+seed or cell (a group's samples are all on one side)")
	f.IntVar(&cfg.HeldoutWindow, "heldout-window", d.HeldoutWindow, "held-out samples kept in memory (the most recent): each evaluation epoch's set is frozen from them, and it and the samples since are in checkpoints (up to twice this many rows)")
	f.IntVar(&cfg.EvalEpochSamples, "eval-epoch-samples", 0, "held-out samples that end an evaluation epoch: once this many have arrived since the set was frozen (or as many as it holds, while it is smaller than --heldout-window), the next set is frozen from the newest --heldout-window; checkpoints of one epoch are evaluated on the same rows (0: --heldout-window)")
	f.IntVar(&cfg.EvalTrainWindow, "eval-train-window", d.EvalTrainWindow, "recent trained samples kept in memory and in checkpoints to fit the evaluation's baselines on")
	f.IntVar(&evalCfg.Resamples, "eval-resamples", eval.DefaultConfig().Resamples, "bootstrap resamples of the held-out groups per checkpoint evaluation")
	f.IntVar(&evalCfg.MinGroups, "eval-min-groups", eval.DefaultConfig().MinGroups, "fewest held-out groups a checkpoint's verdict may rest on")
	return cmd
}

// explicitZeros gives an explicit 0 (flag or environment) its meaning where
// a zero Config field would take the default instead: --replay-ratio,
// --early-stop-patience, --lr-warmup and --lr-min-ratio 0 turn the feature
// off (negative in the Config), and --replay-window 0 is refused by
// validation (which says how to turn replays off).
func explicitZeros(cfg *trainer.Config, changed func(flag string) bool) {
	if changed("replay-window") && cfg.ReplayWindow == 0 {
		cfg.ReplayWindow = -1
	}
	if changed("replay-ratio") && cfg.ReplayRatio == 0 {
		cfg.ReplayRatio = -1
	}
	if changed("early-stop-patience") && cfg.EarlyStopPatience == 0 {
		cfg.EarlyStopPatience = -1
	}
	if changed("lr-warmup") && cfg.LRWarmup == 0 {
		cfg.LRWarmup = -1
	}
	if changed("lr-min-ratio") && cfg.LRMinRatio == 0 {
		cfg.LRMinRatio = -1
	}
}

// autoMemoryHeadroom is what auto's limit allows above the model's tensors:
// about four times the rest of the trainer's live heap (batches, the dedup
// and held-out windows, fetch buffers: 30 to 35 MiB at the defaults).
const autoMemoryHeadroom = 128 << 20

// trainMemoryLimit resolves --memory-limit: the soft limit in bytes (0: set
// none) and where it came from. Auto matters on the CPU backend: the tensors
// (weights, gradients, AdamW moments) are live on the Go heap, and with the
// default GOGC the GC lets garbage grow to their size before it collects, so
// the process held about twice the model.
func trainMemoryLimit(flag string, tensorBytes int64, gomemlimit string) (int64, string, error) {
	switch v := strings.TrimSpace(flag); v {
	case "off":
		return 0, "off", nil
	case "auto", "":
		if gomemlimit != "" {
			return 0, "GOMEMLIMIT", nil
		}
		if tensorBytes == 0 {
			return 0, "auto: the tensors are on the device", nil
		}
		return tensorBytes + autoMemoryHeadroom, "auto: tensors + 128MiB", nil
	default:
		n, err := parseBytes(v)
		if err != nil {
			return 0, "", fmt.Errorf("--memory-limit %q: %w (want auto, off or a size such as 1GiB)", flag, err)
		}
		if n < tensorBytes {
			return 0, "", fmt.Errorf("--memory-limit %s is below the model's tensors (%d MiB): the GC would run without pause; raise it, or use auto", v, tensorBytes>>20)
		}
		return n, "flag", nil
	}
}

// parseBytes reads a size: an integer with an optional KiB, MiB, GiB or TiB
// suffix (or B).
func parseBytes(s string) (int64, error) {
	mult := int64(1)
	for i, suf := range []string{"KiB", "MiB", "GiB", "TiB"} {
		if strings.HasSuffix(s, suf) {
			s, mult = strings.TrimSuffix(s, suf), int64(1)<<(10*(i+1))
			break
		}
	}
	s = strings.TrimSuffix(s, "B")
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 {
		return 0, errors.New("not a positive size")
	}
	if n > (1<<62)/mult {
		return 0, errors.New("size too large")
	}
	return n * mult, nil
}
