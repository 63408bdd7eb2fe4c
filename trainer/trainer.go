// Package trainer is harnessflow's continuous trainer (docs/design.md §6): a
// consumer of hf.samples that never stops, micro-batching samples into AdamW
// steps of a reward model (hashed n-grams + categorical embeddings → MLP →
// effect mean, log-variance and label logits) on a backend.Backend, with
// exactly-once checkpoints, per-step trainer_steps rows in ClickHouse,
// staleness accounting, POST /v1/score and dataset export (export.go).
//
// Exactly once. The checkpoint holds, per partition, the offset after the last
// consumed sample folded into its weights, and the dedup window; a restart
// restores the newest valid checkpoint and reads from those offsets, never from
// the group's committed offsets (which are committed after each checkpoint for
// lag monitoring only). Steps consume a per-partition prefix of what was read,
// so the frontier is exact. trainer_steps rows are flushed before every
// checkpoint; on restore from step S the trainer deletes this trainer's rows
// with step > S (they describe steps whose effect the crash discarded) before
// writing new ones, so the table ends up describing exactly the lineage of the
// live model: the union of its sample_ids is the set of samples trained, each
// once (count with FINAL; the delete is a ClickHouse mutation that applies to
// the rows present when it was issued, never to the re-run's newer rows).
package trainer

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/retry"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/trainer/backend"
)

// Trainer is the continuous trainer. Create it with New and call Run once.
type Trainer struct {
	cfg    Config
	log    zerolog.Logger
	ln     net.Listener
	be     backend.Backend
	device string
	wrapCH func(driver.Conn) driver.Conn

	// mu guards the models (and backend) between the training loop and
	// /v1/score, plus modelVersion.
	mu           sync.Mutex
	models       []*Model
	modelVersion string

	// serving is what /v1/score and /v1/rewards answer from: the
	// published checkpoint's weights (serving.go).
	serving servingState

	// Owned by the training loop.
	store        *CheckpointStore
	ch           driver.Conn
	writer       *kafka.Writer
	dlq          *kafka.Writer // hf.dlq: the samples the trainer cannot use
	index        int64
	step         int64
	trained      int64
	offsets      map[int32]int64
	dedup        *dedupWindow
	cells        map[string]int32 // harness version per projectKey(project, cell)
	heldout      []HeldoutRecord
	rows         []stepRow
	rowsSince    time.Time
	lastCkpt     time.Time
	stepsSinceCk int
	// pinnedAt is when each checkpoint was last marked pinned (notePin).
	pinMu    sync.Mutex
	pinnedAt map[int64]time.Time
	// ckOptSteps is the optimizer steps of the first member at the last
	// checkpoint (written or restored): equal now, the weights have not
	// moved and no new version is written (housekeeping).
	ckOptSteps int
	dirty      bool
	gen        *kafka.Generation
	genID      int
	// restored says the lineage comes from a checkpoint: a partition absent
	// from offsets then has nothing of it in the weights (see startGeneration).
	restored bool
	// foreignSeen: another project's sample was skipped (logged once).
	foreignSeen bool

	// heldSet is the held-out ring (the last HeldoutWindow samples of
	// held-out groups), evalSet the evaluation set frozen from it for the
	// current evaluation epoch (evalset.go), and trainWin the training
	// window the evaluation's baselines are fitted on (the last
	// EvalTrainWindow trained samples); evaluator and evalJobs run the
	// evaluation (evalhook.go), and reeval is the restored checkpoint to
	// evaluate again once they run (nil: none).
	heldSet, trainWin *ring[*schemas.LabeledSample]
	evalSet           evalSet
	reeval            *Checkpoint
	// firstGroup is the group trained on although it hashes into the
	// held-out fraction, because it came before any trained sample ("" if
	// none); trainedAny says a sample was admitted for training (holdOut).
	firstGroup string
	trainedAny bool
	evaluator  CheckpointEvaluator
	evalJobs   chan *CheckpointEval

	// Replays (replay.go): the window of recent admitted training
	// examples, the carried-over fraction of the replay budget, the draw's
	// random source and scratch batch, and the early-stopping state.
	window       *ring[Example]
	replayCredit float64
	replayRand   *rand.Rand
	replayBuf    []Example
	early        earlyStop

	// restoreDone: the checkpoint is restored (/healthz answers ok).
	restoreDone atomic.Bool
	// ready is closed once the trainer serves (Ready); addr is then set.
	ready     chan struct{}
	readyOnce sync.Once
	addr      atomic.Value // string
	metrics   *metrics
	// served is the registry /metrics serves (see WithRegisterer).
	served *prometheus.Registry
	// tlsCert (nil: plain HTTP) and scoreToken ("": /v1/score open) are
	// the HTTP API's security, loaded by New (http.go).
	tlsCert    *tls.Certificate
	scoreToken string
}

// New validates cfg and builds the trainer's models on its backend. It does
// no network I/O; Run connects.
func New(cfg Config, opts ...Option) (*Trainer, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := collect(opts)
	t := &Trainer{cfg: cfg, log: o.logger("trainer"), ln: o.ln, be: o.be, wrapCH: o.wrapCH,
		offsets: map[int32]int64{}, cells: map[string]int32{}, ready: make(chan struct{}),
		heldSet: newSampleRing(cfg.HeldoutWindow), trainWin: newSampleRing(cfg.EvalTrainWindow), evaluator: o.evaluator,
		window: newReplayWindow(cfg.ReplayWindow), replayRand: rand.New(rand.NewPCG(cfg.Seed, 0x7265706c6179)),
		early: newEarlyStop(cfg.EarlyStopPatience)}
	if err := t.loadHTTPSecurity(); err != nil {
		return nil, err
	}
	if t.be == nil {
		be, why, err := backend.Open(cfg.Device)
		if err != nil {
			return nil, fmt.Errorf("device %s: %w", cfg.Device, err)
		}
		t.be, t.device = be, why
	} else {
		t.device = t.be.Name() + " (given)"
	}
	t.log.Info().Str("device", t.device).Msg("compute backend chosen")
	if cfg.Project == AllProjects {
		t.log.Warn().Str("trainer", cfg.Name).
			Msg("no project (--project): one model is trained on every project's samples and serves them all, so one tenant's samples steer the critic that scores another's; run a trainer per project with --project P where tenants do not trust each other")
	} else {
		t.log.Info().Str("trainer", cfg.Name).Str("project", cfg.Project).Str("group", cfg.Group).
			Msg("per-project trainer: trains on and serves this project's samples alone")
	}
	for i := 0; i < cfg.Ensemble; i++ {
		mc := cfg.Model
		mc.Seed = cfg.Seed + uint64(i)
		m, err := NewModel(t.be, mc)
		if err != nil {
			return nil, err
		}
		m.SetSchedule(newLRSchedule(&cfg).at)
		t.models = append(t.models, m)
	}
	t.dedup = newDedup(cfg.DedupWindow, nil, false)
	t.modelVersion = fmt.Sprintf("%s-v0", cfg.Name)
	reg, served := registries(o.reg)
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	t.metrics, t.served = m, served
	m.learningRate.Set(float64(t.models[0].LR()))
	store, err := NewCheckpointStore(cfg.CheckpointDir, cfg.CheckpointKeep, WithLogger(t.log))
	if store != nil {
		store.PinRetention = cfg.PinRetention
	}
	if err != nil {
		return nil, err
	}
	t.store = store
	return t, nil
}

// HostTensorBytes is the memory the models' tensors take in this process: all
// of it on a backend with host memory (the CPU), 0 on a device.
func (t *Trainer) HostTensorBytes() int64 {
	if _, ok := t.be.(backend.HostView); !ok {
		return 0
	}
	var n int64
	for _, m := range t.models {
		n += m.TensorBytes()
	}
	return n
}

// Device says which backend the trainer uses and why.
func (t *Trainer) Device() string { return t.device }

// ModelVersion returns the version of the latest published checkpoint.
func (t *Trainer) ModelVersion() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.modelVersion
}

// Run consumes and trains until ctx ends; then it finishes the current step,
// flushes rows, writes a checkpoint and returns nil. It returns an error only
// for a fatal fault (a setting ClickHouse refuses, a device error, a
// checkpoint that cannot be written); a broker or ClickHouse that is down
// at start is waited for (connect).
func (t *Trainer) Run(ctx context.Context) error {
	// A stop asked for while starting (a SIGTERM while ClickHouse or the
	// broker is not reachable yet) is a clean stop: nothing was trained.
	startErr := func(err error) error {
		if ctx.Err() != nil {
			t.log.Info().Err(err).Msg("stopped during start-up")
			return nil
		}
		return err
	}
	if err := t.connect(ctx); err != nil {
		return startErr(err)
	}
	defer t.ch.Close()
	t.writer = kafkax.NewWriter(kafkax.WriterConfig{Brokers: t.cfg.Brokers, Topic: schemas.TopicCheckpoints, BatchSize: 1})
	defer t.writer.Close()
	t.dlq = kafkax.NewWriter(kafkax.WriterConfig{Brokers: t.cfg.Brokers, Topic: schemas.TopicDLQ, BatchSize: 1})
	defer t.dlq.Close()
	if err := t.restore(ctx); err != nil {
		return startErr(err)
	}
	cg, err := t.joinGroup()
	if err != nil {
		return err
	}
	gens := make(chan *kafka.Generation)
	msgs := make(chan sampleMsg, 4*t.cfg.BatchSize)
	g, gctx := errgroup.WithContext(ctx)
	if t.servesHTTP() {
		g.Go(func() error { return t.serveHTTP(gctx) })
	} else {
		t.markReady("")
	}
	g.Go(func() error { return t.generations(gctx, cg, gens) })
	g.Go(func() error { t.pollLag(gctx); return nil })
	stopEvals := t.startEvals(ctx)
	t.reevaluateRestored()
	g.Go(func() error {
		err := t.loop(gctx, gens, msgs)
		cg.Close()
		return err
	})
	err = g.Wait()
	stopEvals()
	return err
}

// connect waits for the broker, creates the topics, and opens ClickHouse
// (migrating it), starting again with a backoff while an outage is in the
// way: a broker not answering yet, ClickHouse restarting in the middle of a
// migration (chx.Transient). A setting ClickHouse refuses is returned.
func (t *Trainer) connect(ctx context.Context) error {
	restarts := retry.NewRestarts(retry.Policy{Initial: 200 * time.Millisecond, Max: 10 * time.Second})
	for {
		err := kafkax.WaitReachable(ctx, t.cfg.Brokers, 30*time.Second)
		if err == nil {
			err = kafkax.EnsureAllTopics(ctx, t.cfg.Brokers)
		}
		if err == nil {
			if err = t.openClickHouse(ctx); err != nil && !chx.Transient(err) {
				return err
			}
		}
		if err == nil || ctx.Err() != nil {
			return err
		}
		d := restarts.Next()
		t.log.Warn().Err(err).Dur("retry_in", d).Msg("broker or ClickHouse not ready at start; connecting again")
		if !retry.Sleep(ctx, d) {
			return ctx.Err()
		}
	}
}

// openClickHouse applies the ClickHouse migrations to the trainer's database
// (infra/chddl, which define trainer_steps; a no-op when the schema is up to
// date, as under `harnessflow up`, which migrates first) and opens the
// trainer's connection to it.
func (t *Trainer) openClickHouse(ctx context.Context) error {
	var opts []chx.OpenOption
	if t.cfg.Cluster != "" {
		opts = append(opts, chx.Cluster())
	}
	admin, err := chx.Open(ctx, t.cfg.ClickHouse, "", opts...)
	if err != nil {
		return err
	}
	var res chddl.Result
	if t.cfg.Cluster != "" {
		res, err = chddl.MigrateCluster(ctx, chx.Session(admin), t.cfg.Database, t.cfg.Cluster)
	} else {
		res, err = chddl.Migrate(ctx, chx.Session(admin), t.cfg.Database)
	}
	admin.Close()
	if err != nil {
		return fmt.Errorf("migrate %s: %w", t.cfg.Database, err)
	}
	res.Log(t.log, t.cfg.Database)
	t.ch, err = chx.Open(ctx, t.cfg.ClickHouse, t.cfg.Database, opts...)
	if err != nil {
		return err
	}
	if t.wrapCH != nil {
		t.ch = t.wrapCH(t.ch)
	}
	return nil
}
