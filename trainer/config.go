package trainer

import (
	"errors"
	"fmt"
	"math"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/schemas"
)

// Config configures a Trainer. Zero fields take the documented defaults.
type Config struct {
	// Brokers are the Kafka bootstrap addresses. Required.
	Brokers []string
	// ClickHouse is the native-protocol host:port for trainer_steps rows. Required.
	ClickHouse string
	// Database holds trainer_steps. Default: harnessflow.
	Database string
	// Cluster names the ClickHouse cluster (remote_servers) whose
	// Distributed trainer_steps table receives the rows: migrations run ON
	// CLUSTER, inserts return once stored on their shard, and the rows of
	// steps after a restored checkpoint are deleted from the replicated
	// local table on every node. Default: "" (a single server).
	Cluster string
	// Project is the one project (tenant) whose labeled samples this
	// trainer trains on and whose clients it serves: samples of other
	// projects are skipped before they touch any state (counted in
	// hf_trainer_foreign_samples_total), the held-out evaluation and its
	// critic_evals rows are the project's, checkpoints record it (one of
	// another project, or of all, is refused on restore), and /v1/score
	// and /v1/rewards answer 403 to a request naming another project.
	// Samples without a project are schemas.DefaultProject's. Default: ""
	// (AllProjects: one model trained on every project's samples and
	// served to all, with a warning at start).
	Project string
	// AdoptSharedCheckpoint lets a trainer with a Project restore a
	// checkpoint of all projects (every checkpoint written before
	// per-project trainers): it goes on from that model, with a warning
	// that other projects' samples may have shaped it, and its next
	// checkpoint records Project. For up's single-project stack, whose
	// earlier critic was shared in name only. Default: false (refused).
	AdoptSharedCheckpoint bool
	// Group is the Kafka consumer group. Default: hf-trainer, or
	// hf-trainer-<Project> when Project is set (two trainers in one group
	// would split the partitions between them).
	Group string
	// Name identifies this trainer in trainer_steps rows, critic_evals
	// rows, checkpoint sources and model versions ("<Name>-v<N>"); two
	// trainers writing to one ClickHouse need different names. Default:
	// Group (so hf-trainer-<Project> for a per-project trainer).
	Name string
	// Topic is the sample topic. Default: hf.samples.
	Topic string
	// CheckpointDir holds the checkpoints. Required.
	CheckpointDir string
	// CheckpointEvery writes a checkpoint after this many steps. Default: 100.
	CheckpointEvery int
	// CheckpointInterval writes a checkpoint when this much time has passed
	// since the last one and something was consumed. Default: 30s.
	CheckpointInterval time.Duration
	// CheckpointKeep is how many checkpoints are kept. Default: 3.
	CheckpointKeep int
	// PinRetention keeps a checkpoint, beyond the newest CheckpointKeep,
	// for this long after the last request that pinned its version
	// (?model_version=), so a client that pins a version can rely on it
	// for that long (a version must be pinned while it is still kept).
	// Default: 24h.
	PinRetention time.Duration
	// BatchSize is the micro-batch size (samples consumed per step). Default: 256.
	BatchSize int
	// BatchAge flushes a smaller batch when its oldest sample has waited this
	// long. Default: 2s.
	BatchAge time.Duration
	// Device is auto, cpu or cuda. Default: auto.
	Device string
	// Listen is the HTTP address for /v1/score, /v1/rewards, /healthz,
	// /metrics; "off" disables it. Default: 127.0.0.1:8090.
	Listen string
	// TLSCert and TLSKey are PEM files of a certificate (chain) and its
	// key: with both, the HTTP API serves HTTPS only. Default: "" (plain
	// HTTP).
	TLSCert, TLSKey string
	// ScoreTokenFile holds the bearer token POST /v1/score and POST
	// /v1/rewards require (its first line; a file readable by group or
	// others is refused). /metrics, /healthz and /readyz stay open.
	// Default: "" (no token unless ScoreToken is set).
	ScoreTokenFile string
	// ScoreToken is the bearer token /v1/score and /v1/rewards require,
	// given directly; ScoreTokenFile's takes precedence. Default: "" (open).
	ScoreToken string
	// Lambda weighs the ensemble's disagreement in reward = mean −
	// λ·model_std (Score.ModelStd: the std of the members' means, 0 with
	// one member). Default: 0, the reward is the predicted effect: with one
	// member the predicted std is the label's noise, and penalising it cut
	// the gain of ranking candidates by half (bench/README.md).
	Lambda float64
	// MaxStaleness drops samples whose staleness in harness versions exceeds
	// it (counted in dropped_stale). Default: 0 (off).
	MaxStaleness int
	// Ensemble is the number of models trained with different seeds. Default: 1.
	Ensemble int
	// Seed seeds model i with Seed+i. Default: 0.
	Seed uint64
	// Model sizes and optimizes each model (Seed is overridden per member).
	Model ModelConfig
	// HeldoutFraction is the share of groups (HeldoutGroupKey, by hash;
	// heldout.go) whose samples are kept out of training for evaluation:
	// every sample of a held-out group is held out, never trained on.
	// Default: 0.1; negative disables.
	HeldoutFraction float64
	// HeldoutGroupKey is the group of the held-out split: campaign,
	// campaign+seed or cell (trainer/eval's keys). Default: campaign+seed,
	// which keeps the sibling samples of one round (same tasks and
	// baseline) on one side.
	HeldoutGroupKey string
	// HeldoutWindow bounds, by count, both the held-out records the
	// trainer_steps metrics cover and the held-out ring the evaluation set
	// of each evaluation epoch is frozen from (the most recent held-out
	// samples, kept in memory and in checkpoints; evalset.go). Default:
	// 2000.
	HeldoutWindow int
	// EvalEpochSamples ends an evaluation epoch (evalset.go): once this
	// many held-out samples have been admitted since the epoch's set was
	// frozen (or as many as it holds, while it is smaller than
	// HeldoutWindow), the next set is frozen from the held-out ring.
	// Checkpoints of one epoch are evaluated on the same rows. Default:
	// HeldoutWindow (each full set is entirely new rows).
	EvalEpochSamples int
	// EvalTrainWindow is how many recent trained samples are kept in
	// memory (and in checkpoints) to fit the checkpoint evaluation's
	// baselines on. Default: 5000.
	EvalTrainWindow int
	// ReplayWindow is how many of the most recent admitted training
	// examples are kept in memory to replay (replay.go). Not in
	// checkpoints as such: a restart refills it from the checkpoint's
	// EvalTrainWindow samples (all of it while ReplayWindow ≤
	// EvalTrainWindow), then from new samples. Memory:
	// about 112 bytes per example beside its update and query text, which
	// it shares with the evaluation's training window while it is no
	// larger than EvalTrainWindow (trainer/README.md). Default: 5000.
	ReplayWindow int
	// ReplayRatio is the replayed examples per newly admitted training
	// example: after each step on new samples the trainer takes steps
	// on examples drawn from the replay window, until it
	// has replayed this many per new sample. Replays are training passes,
	// never admissions (samples_trained, offsets and trainer_steps rows
	// count each sample once). Steps hold at most ReplayBatchSize
	// examples. Default: 4; negative turns replays off (the
	// command's --replay-ratio 0 does that).
	ReplayRatio float64
	// ReplayBatchSize is the most examples of one replayed step. Small
	// steps move the model more per replayed example (AdamW moves each
	// weight by about the learning rate per step, whatever the batch), at
	// a higher CPU cost per example (the dense update of the embedding
	// table is paid per step). Default: 32.
	ReplayBatchSize int
	// EarlyStopPatience pauses replays when the held-out loss (after each
	// replay round, on the newest EarlyStopRows held-out samples) has not
	// improved for this many evaluations; new samples still train, and
	// replays resume when they improve it or have refilled the replay
	// window. Default: 5; negative never pauses (--early-stop-patience 0).
	EarlyStopPatience int
	// EarlyStopRows is how many of the newest held-out samples the
	// early-stopping evaluation scores. Default: 256.
	EarlyStopRows int
	// EffectWeighting weighs each sample's effect term in the loss:
	// "precision" (the number of paired tasks behind the effect, relative to
	// its batch: Example.Precision) or "none". Labels are mostly neutral
	// when rounds are small, so the effect carries the signal, and an
	// effect measured on more tasks should count more. Default: precision.
	EffectWeighting string
	// LRSchedule is the learning-rate schedule over optimizer steps (new
	// and replayed; schedule.go): inverse-sqrt, cosine or constant, each
	// after a linear warm-up of LRWarmup steps, peaking at Model.LR.
	// Default: inverse-sqrt.
	LRSchedule string
	// LRWarmup is the warm-up's length in optimizer steps. Default: 20;
	// negative: none (--lr-warmup 0).
	LRWarmup int
	// LRDecaySteps is the decay's time scale in optimizer steps after the
	// warm-up: inverse-sqrt is at 1/sqrt(2) of the peak after this many,
	// cosine reaches its floor. Default: 1000.
	LRDecaySteps int
	// LRMinRatio is the floor of the decay, a fraction of Model.LR.
	// Default: 0.1; negative: 0 (no floor, --lr-min-ratio 0).
	LRMinRatio float64
	// DedupWindow is how many recent sample ids are remembered to train each
	// sample id once; a duplicate arriving more than this many samples after
	// its first copy is trained again. Persisted in checkpoints. Each entry
	// is a 16-byte digest of the key: about 55 B of live heap when the
	// window is full (11 MB at the default), 16 B in a checkpoint.
	// Default: 200000.
	DedupWindow int
	// MaxCells bounds the per-cell harness-version map (staleness); when full
	// it is reset. Default: 100000.
	MaxCells int
	// RowFlushInterval buffers trainer_steps rows for at most this long (they
	// are always flushed before a checkpoint). Default: 1s.
	RowFlushInterval time.Duration
	// SessionTimeout is the consumer group session timeout. Default: 10s.
	SessionTimeout time.Duration
	// LagInterval is how often the lag behind the topic's end
	// (hf_trainer_commit_lag) is polled from the brokers. Default: 5s.
	LagInterval time.Duration
}

// DefaultNice is the CPU scheduling nice value `harnessflow train` runs at by
// default: behind the processors, the sink and ClickHouse when they share
// the CPUs.
const DefaultNice = 10

// DefaultConfig returns the Config that New uses for zero fields: the one
// copy of every default, which the command's flags show.
func DefaultConfig() Config {
	var c Config
	c.setDefaults()
	return c
}

func (c *Config) setDefaults() {
	def := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	defi := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	if c.Database == "" {
		c.Database = chddl.DefaultDatabase
	}
	if c.Group == "" {
		c.Group = "hf-trainer"
		if c.Project != "" {
			c.Group = "hf-trainer-" + c.Project
		}
	}
	if c.Name == "" {
		c.Name = c.Group
	}
	if c.Topic == "" {
		c.Topic = schemas.TopicSamples
	}
	if c.Device == "" {
		c.Device = "auto"
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8090"
	}
	if c.HeldoutFraction == 0 {
		c.HeldoutFraction = 0.1
	}
	if c.HeldoutGroupKey == "" {
		c.HeldoutGroupKey = GroupByCampaignSeed
	}
	if c.ReplayRatio == 0 {
		c.ReplayRatio = 4
	}
	if c.LRSchedule == "" {
		c.LRSchedule = ScheduleInverseSqrt
	}
	if c.EffectWeighting == "" {
		c.EffectWeighting = WeightPrecision
	}
	if c.LRMinRatio == 0 {
		c.LRMinRatio = 0.1
	}
	defi(&c.ReplayWindow, 5000)
	defi(&c.ReplayBatchSize, 32)
	defi(&c.EarlyStopPatience, 5)
	defi(&c.EarlyStopRows, 256)
	defi(&c.LRWarmup, 20)
	defi(&c.LRDecaySteps, 1000)
	defi(&c.EvalTrainWindow, 5000)
	defi(&c.CheckpointEvery, 100)
	defi(&c.CheckpointKeep, 3)
	defi(&c.BatchSize, 256)
	defi(&c.Ensemble, 1)
	defi(&c.HeldoutWindow, 2000)
	defi(&c.EvalEpochSamples, c.HeldoutWindow)
	defi(&c.DedupWindow, 200000)
	defi(&c.MaxCells, 100000)
	def(&c.CheckpointInterval, 30*time.Second)
	def(&c.PinRetention, 24*time.Hour)
	def(&c.BatchAge, 2*time.Second)
	def(&c.RowFlushInterval, time.Second)
	def(&c.SessionTimeout, 10*time.Second)
	def(&c.LagInterval, 5*time.Second)
	c.Model.setDefaults()
}

// Validate reports every problem with c (after defaults).
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...))
	}
	if len(c.Brokers) == 0 {
		bad("no Kafka brokers (--brokers)")
	}
	if c.ClickHouse == "" {
		bad("no ClickHouse address (--clickhouse)")
	}
	if c.CheckpointDir == "" {
		bad("no checkpoint directory (--checkpoint-dir)")
	}
	if !validProject(c.Project) {
		bad("project %q: want a project name as in the gateway's tokens file (no spaces or control characters, at most %d bytes), or empty for all projects (--project)", c.Project, maxProjectLen)
	}
	if c.BatchSize < 1 || c.CheckpointEvery < 1 || c.Ensemble < 1 || c.DedupWindow < 1 || c.HeldoutWindow < 1 || c.EvalTrainWindow < 1 {
		bad("batch size, checkpoint-every, ensemble, dedup, held-out and eval training windows must be ≥ 1")
	}
	if c.EvalEpochSamples < 1 {
		bad("eval epoch samples %d: want ≥ 1 held-out samples (--eval-epoch-samples; 0: --heldout-window)", c.EvalEpochSamples)
	}
	if c.ReplayWindow < 1 {
		bad("replay window %d: want ≥ 1 examples (--replay-window; to turn replays off, use --replay-ratio 0)", c.ReplayWindow)
	}
	if math.IsNaN(c.ReplayRatio) || math.IsInf(c.ReplayRatio, 0) || c.ReplayRatio > 1000 {
		bad("replay ratio %v: want replayed examples per new example, from 0 (off) to 1000 (--replay-ratio)", c.ReplayRatio)
	}
	if c.ReplayBatchSize < 1 {
		bad("replay batch size %d: want ≥ 1 examples per replayed step (--replay-batch-size)", c.ReplayBatchSize)
	}
	if c.EarlyStopRows < 1 {
		bad("early-stop rows %d: want ≥ 1 held-out samples (--early-stop-rows)", c.EarlyStopRows)
	}
	for _, msg := range checkSchedule(c) {
		bad("%s", msg)
	}
	if c.EffectWeighting != WeightPrecision && c.EffectWeighting != WeightNone {
		bad("effect weighting %q: want precision or none (--effect-weighting)", c.EffectWeighting)
	}
	if err := checkGroupKey(c.HeldoutGroupKey); err != nil {
		bad("%v (--heldout-group-key)", err)
	}
	if c.Ensemble > 32 {
		bad("ensemble %d too large (max 32)", c.Ensemble)
	}
	if c.Lambda < 0 {
		bad("lambda must be ≥ 0")
	}
	if c.MaxStaleness < 0 {
		bad("max staleness must be ≥ 0")
	}
	if c.LagInterval < 0 {
		bad("lag interval must be ≥ 0")
	}
	if c.HeldoutFraction >= 1 {
		bad("held-out fraction must be < 1")
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		bad("TLS needs both a certificate and its key (--tls-cert and --tls-key), or neither")
	}
	switch c.Device {
	case "auto", "cpu", "cuda":
	default:
		bad("device %q: want auto, cpu or cuda", c.Device)
	}
	if err := c.Model.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// maxProjectLen bounds Config.Project (it becomes part of the consumer
// group and the trainer's name).
const maxProjectLen = 200

// validProject says whether p may be Config.Project: empty, or a name
// without spaces or control characters (a tokens file's project field).
func validProject(p string) bool {
	if len(p) > maxProjectLen || !utf8.ValidString(p) {
		return false
	}
	for _, r := range p {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return false
		}
	}
	return true
}
