package processors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
	"github.com/harnessflow/harnessflow/internal/retry"
	"github.com/harnessflow/harnessflow/schemas"
)

// CellTopics are stage A's inputs: the raw topics keyed by cell_id, which
// must keep equal partition counts (co-partitioning, see doc.go). Their order
// is the merge's tie-break rank.
var CellTopics = []string{schemas.TopicCells, schemas.TopicUpdates, schemas.TopicAttempts, schemas.TopicSkillEvents, schemas.TopicJudgments}

// Processor runs stage A (validate, re-key) and stage B (pair, score, label,
// round metrics) over Kafka. Create it with New and call Run once.
type Processor struct {
	cfg    Config
	log    zerolog.Logger
	m      *metrics
	reg    *prometheus.Registry // nil when WithRegisterer was given
	prog   func(Progress)
	client *kafka.Client
	out    *outWriter
	camps  *campaignTable
	cache  *evCache // stage A's admitted events, for stage B's fetchers
	dec    *schemas.Decoder
	ran    atomic.Bool

	// live state sizes per stage and partition, for gauges and tests.
	sizeMu sync.Mutex
	sizes  map[string]partSize
}

type partSize struct{ cells, pending, pairers int }

// New checks cfg and returns a Processor.
func New(cfg Config, opts ...Option) (*Processor, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	if !o.logSet {
		o.log = obs.NewLogger("process")
	}
	p := &Processor{cfg: cfg, log: o.log, m: newMetrics(), prog: o.progress, camps: newCampaignTable(), cache: newEvCache(), sizes: map[string]partSize{},
		dec: &schemas.Decoder{}}
	if cfg.SchemaRegistry != "" {
		p.dec.Registry = schemas.NewRegistry(cfg.SchemaRegistry, nil)
	}
	r := o.reg
	if r == nil {
		p.reg = obs.NewRegistry()
		r = p.reg
	}
	if err := p.m.register(r); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	return p, nil
}

// Registry returns the Processor's own metrics registry (nil when
// WithRegisterer was given).
func (p *Processor) Registry() *prometheus.Registry { return p.reg }

// Ready is closed once the processor has read hf.campaigns up to the end
// offsets seen at start: both stages run and every declared campaign is
// known (/readyz answers 200 from then on).
func (p *Processor) Ready() <-chan struct{} { return p.camps.ready }

// Run processes until ctx ends, then drains (the in-flight batches are
// written and committed within Config.DrainTimeout) and returns nil; or
// until a fatal error (outputs that cannot be written), which it returns.
// With Config.StopWhenCaughtUp it returns nil once caught up.
func (p *Processor) Run(ctx context.Context) error {
	if p.ran.Swap(true) {
		return ErrAlreadyRun
	}
	cfg := &p.cfg
	if err := kafkax.WaitReachable(ctx, cfg.Brokers, 30*time.Second); err != nil {
		return err
	}
	if err := kafkax.EnsureAllTopics(ctx, cfg.Brokers); err != nil {
		return err
	}
	p.client = kafkax.NewClient(cfg.Brokers)
	parts, err := kafkax.Partitions(ctx, p.client, append(append([]string{}, CellTopics...), schemas.TopicCampaigns, schemas.TopicOutcomes)...)
	if err != nil {
		return err
	}
	n := len(parts[CellTopics[0]])
	for _, t := range CellTopics {
		if len(parts[t]) != n {
			return fmt.Errorf("%w: %s has %d, %s has %d", ErrTopicLayout, CellTopics[0], n, t, len(parts[t]))
		}
	}
	// Outputs go out per flush, one Produce request per topic partition
	// (produce.go), not through a kafka.Writer.
	p.out = newOutWriter(p.client)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(runCtx)
	if cfg.Listen != "" && p.reg != nil {
		g.Go(func() error {
			err := obs.Serve(gctx, cfg.Listen, obs.Mux(p.reg, nil, obs.WithReady("processors", p.Ready())))
			if err != nil && gctx.Err() == nil {
				return fmt.Errorf("serve %s: %w", cfg.Listen, err)
			}
			return nil
		})
	}
	g.Go(func() error {
		return p.camps.follow(gctx, p.client, cfg, p.dec, p.m, p.log, parts[schemas.TopicCampaigns])
	})
	g.Go(func() error { return p.runGroup(gctx, stageA) })
	g.Go(func() error {
		select {
		case <-p.camps.ready:
		case <-gctx.Done():
			return nil
		}
		return p.runGroup(gctx, stageB)
	})
	if cfg.StopWhenCaughtUp {
		g.Go(func() error { return p.stopWhenCaughtUp(gctx, cancel) })
	}
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// stopWhenCaughtUp calls stop once the group's two stages have committed
// everything up to the raw topics' end offsets read when it starts
// (Config.StopWhenCaughtUp), looking every 50ms. It returns nil, also when
// ctx ends first.
func (p *Processor) stopWhenCaughtUp(ctx context.Context, stop context.CancelFunc) error {
	cfg := &p.cfg
	// The end offsets to catch up with, read once; a broker that
	// does not answer yet is waited for, like the stages wait.
	var ends map[string]map[int]int64
	if err := retry.Do(ctx, retry.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second}, func() error {
		var err error
		ends, err = kafkax.EndOffsets(ctx, p.client, CellTopics...)
		if ctx.Err() != nil {
			return retry.Permanent(ctx.Err())
		}
		return err
	}, func(err error, d time.Duration) {
		p.log.Warn().Err(err).Dur("retry_in", d).Msg("read the raw topics' end offsets to catch up with; retrying")
	}); err != nil {
		return nil // the run ended
	}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		behind, err := lag(ctx, p.client, cfg.Group, ends)
		switch {
		case err != nil && ctx.Err() == nil:
			// Logged once per distinct error: the check runs every 50 ms.
			if err.Error() != lastErr {
				lastErr = err.Error()
				p.log.Warn().Err(err).Str("group", cfg.Group).Msg("read the group's committed offsets to see whether it caught up; retrying")
			}
		case err == nil && behind == 0:
			p.log.Info().Str("group", cfg.Group).Msg("caught up with the raw topics' end offsets read at start")
			stop()
			return nil
		}
	}
}

// setSize records the state sizes of one stage partition (key: zero sizes
// remove it) and sets the gauges to the totals.
func (p *Processor) setSize(key string, s partSize) {
	p.sizeMu.Lock()
	defer p.sizeMu.Unlock()
	if s == (partSize{}) {
		delete(p.sizes, key)
	} else {
		p.sizes[key] = s
	}
	var t partSize
	for _, v := range p.sizes {
		t.cells += v.cells
		t.pending += v.pending
		t.pairers += v.pairers
	}
	p.m.stateCells.Set(float64(t.cells))
	p.m.pending.Set(float64(t.pending))
	p.m.statePairers.Set(float64(t.pairers))
}
