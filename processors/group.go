package processors

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/retry"
	"github.com/harnessflow/harnessflow/schemas"
)

const (
	stageA = "validate"
	stageB = "pair"
)

// runGroup joins the stage's consumer group and runs every generation.
func (p *Processor) runGroup(ctx context.Context, stage string) error {
	cfg := &p.cfg
	group, topics := cfg.Group, CellTopics
	if stage == stageB {
		group, topics = PairGroup(cfg.Group), []string{schemas.TopicOutcomes}
	}
	cg, err := kafkax.NewConsumerGroup(kafkax.GroupConfig{
		ID: group, Brokers: cfg.Brokers, Topics: topics,
		Balancers:         []kafka.GroupBalancer{CoPartitionBalancer{}},
		HeartbeatInterval: cfg.HeartbeatInterval, SessionTimeout: cfg.SessionTimeout,
		RebalanceTimeout: cfg.RebalanceTimeout, JoinGroupBackoff: 200 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	defer cg.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		fatalOnce sync.Once
		fatalErr  error
		wg        sync.WaitGroup
	)
	fail := func(err error) {
		fatalOnce.Do(func() { fatalErr = err; cancel() })
	}
	for {
		gen, err := cg.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				wg.Wait()
				return fatalErr
			}
			p.log.Warn().Err(err).Str("group", group).Msg("join group failed; retrying")
			continue
		}
		p.startGeneration(ctx, gen, stage, group, topics, &wg, fail)
	}
}

// startGeneration starts the work of every partition number gen assigns,
// each in a function of the generation counted in wg, until the generation
// or the run (ctx) ends. fail receives a partition's fatal error.
func (p *Processor) startGeneration(ctx context.Context, gen *kafka.Generation, stage, group string, topics []string, wg *sync.WaitGroup, fail func(error)) {
	byPart, ids := assignedPartitions(gen)
	p.log.Info().Str("group", group).Int32("generation", gen.ID).Ints("partitions", ids).Msg("assigned")
	commits := newCommitter(gen.CommitOffsets)
	// kafka-go ends the generation as soon as any function it started
	// returns, and the end of the generation cancels the other
	// partitions' writes and commits. On a clean stop each partition
	// drains (writes and commits what it processed, admits what it
	// holds): one that finished its drain waits for the others'
	// before returning, or the first idle partition would cut the
	// others' drains short.
	var drains sync.WaitGroup
	drains.Add(len(ids))
	for _, id := range ids {
		newWork := func(offs map[string]int64) *partWork {
			w := &partWork{p: p, stage: stage, group: group, gen: gen, part: id, commits: commits}
			for i, t := range topics {
				off, ok := offs[t]
				if !ok {
					continue
				}
				w.streams = append(w.streams, &stream{topic: t, rank: i, committed: off, flushedTo: off, want: make(chan struct{}, 1),
					hwm: -1, next: -1, in: p.m.eventsIn.WithLabelValues(t)})
			}
			return w
		}
		w := newWork(byPart[id])
		wg.Add(1)
		gen.Start(func(gctx context.Context) {
			defer wg.Done()
			defer func() {
				drains.Done()
				if ctx.Err() != nil {
					drains.Wait() // bounded by the others' DrainTimeout
				}
			}()
			if err := p.runPartition(gctx, ctx, w, topics, newWork); err != nil {
				fail(err)
			}
		})
	}
}

// assignedPartitions returns the offsets gen assigns, by partition number
// and topic, and the partition numbers in order.
func assignedPartitions(gen *kafka.Generation) (map[int]map[string]int64, []int) {
	byPart := map[int]map[string]int64{}
	for topic, as := range gen.Assignments {
		for _, a := range as {
			if byPart[a.ID] == nil {
				byPart[a.ID] = map[string]int64{}
			}
			byPart[a.ID][topic] = a.Offset
		}
	}
	ids := make([]int, 0, len(byPart))
	for id := range byPart {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return byPart, ids
}

// runPartition runs the partition's work w until the generation (gctx) or
// the run (ctx) ends, and returns a fatal error, if any. Work that ends
// otherwise starts again after a backoff: from the offsets of topics
// committed for the partition (newWork), or, when they cannot be read, w
// itself runs again.
func (p *Processor) runPartition(gctx, ctx context.Context, w *partWork, topics []string, newWork func(map[string]int64) *partWork) error {
	stage, id := w.stage, w.part
	restarts := retry.NewRestarts(retry.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second})
	for {
		if err := w.run(gctx, ctx); err != nil {
			return err
		}
		if gctx.Err() != nil || ctx.Err() != nil {
			return nil
		}
		// The partition's work ended on a fetch or commit failure
		// (a broker restart) while this member still owns the
		// partition: rebuild it from the committed offsets, or it
		// would stay idle until the next rebalance.
		select {
		case <-gctx.Done():
			return nil
		case <-ctx.Done():
			return nil
		case <-time.After(restarts.Next()):
		}
		offs, err := p.committedOf(gctx, w.group, topics, id)
		if err != nil {
			p.log.Warn().Err(err).Str("stage", stage).Int("partition", id).Msg("read committed offsets; retrying")
			continue
		}
		p.log.Info().Str("stage", stage).Int("partition", id).Msg("partition work starts again from the committed offsets")
		w = newWork(offs)
	}
}
