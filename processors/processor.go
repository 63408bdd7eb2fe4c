package processors

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
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
	p := &Processor{cfg: cfg, log: o.log, m: newMetrics(), prog: o.progress, camps: newCampaignTable(), cache: newEvCache(), sizes: map[string]partSize{}}
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
	p.client = &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Timeout: 10 * time.Second}
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
			err := obs.Serve(gctx, cfg.Listen, obs.Mux(p.reg, nil), nil)
			if err != nil && gctx.Err() == nil {
				return fmt.Errorf("serve %s: %w", cfg.Listen, err)
			}
			return nil
		})
	}
	g.Go(func() error {
		return p.camps.follow(gctx, p.client, cfg, p.m, p.log, parts[schemas.TopicCampaigns])
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
		g.Go(func() error {
			// The end offsets to catch up with, read once; a broker that
			// does not answer yet is waited for, like the stages wait.
			var ends map[string]map[int]int64
			bo := backoff.NewExponentialBackOff()
			bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = 100*time.Millisecond, 5*time.Second, 0
			if err := backoff.RetryNotify(func() error {
				var err error
				ends, err = kafkax.EndOffsets(gctx, p.client, CellTopics...)
				if gctx.Err() != nil {
					return backoff.Permanent(gctx.Err())
				}
				return err
			}, backoff.WithContext(bo, gctx), func(err error, d time.Duration) {
				p.log.Warn().Err(err).Dur("retry_in", d).Msg("read the raw topics' end offsets to catch up with; retrying")
			}); err != nil {
				return nil // the run ended
			}
			t := time.NewTicker(50 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-gctx.Done():
					return nil
				case <-t.C:
				}
				lag, err := lag(gctx, p.client, cfg.Group, ends)
				if err == nil && lag == 0 {
					p.log.Info().Str("group", cfg.Group).Msg("caught up with the raw topics' end offsets read at start")
					cancel()
					return nil
				}
			}
		})
	}
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

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
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID: group, Brokers: cfg.Brokers, Topics: topics,
		GroupBalancers:    []kafka.GroupBalancer{CoPartitionBalancer{}},
		HeartbeatInterval: cfg.HeartbeatInterval, SessionTimeout: cfg.SessionTimeout,
		RebalanceTimeout: cfg.RebalanceTimeout, JoinGroupBackoff: 200 * time.Millisecond,
		RetentionTime: 30 * 24 * time.Hour, StartOffset: kafka.FirstOffset, Timeout: 10 * time.Second,
		PartitionWatchInterval: 5 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("consumer group %s: %w", group, err)
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
				bo := backoff.NewExponentialBackOff()
				bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = 100*time.Millisecond, 5*time.Second, 0
				for {
					if err := w.run(gctx, ctx); err != nil {
						fail(err)
						return
					}
					if gctx.Err() != nil || ctx.Err() != nil {
						return
					}
					// The partition's work ended on a fetch or commit failure
					// (a broker restart) while this member still owns the
					// partition: rebuild it from the committed offsets, or it
					// would stay idle until the next rebalance.
					select {
					case <-gctx.Done():
						return
					case <-ctx.Done():
						return
					case <-time.After(bo.NextBackOff()):
					}
					offs, err := p.committedOf(gctx, group, topics, id)
					if err != nil {
						p.log.Warn().Err(err).Str("stage", stage).Int("partition", id).Msg("read committed offsets; retrying")
						continue
					}
					p.log.Info().Str("stage", stage).Int("partition", id).Msg("partition work starts again from the committed offsets")
					w = newWork(offs)
				}
			})
		}
	}
}

// partWork is one assigned partition number of one stage in one generation.
type partWork struct {
	// commitCap (stage A) returns the offset each topic's commit stops at
	// (topics absent: no limit).
	commitCap func() map[string]int64
	p         *Processor
	stage     string
	group     string
	gen       *kafka.Generation
	part      int
	streams   []*stream
	commits   *committer // the generation's, shared by its partitions
	// flushDone receives the result of the flush in flight (nil: none).
	flushDone chan error
}

// run rebuilds the partition's state from the log start, then processes and
// emits from the committed offsets on, until the generation or the run ends.
// It returns an error only for a fatal problem (outputs not writable).
func (w *partWork) run(gctx, runCtx context.Context) error {
	p, cfg := w.p, &w.p.cfg
	// ctx stops the fetchers: generation or run over. fctx bounds writes and
	// commits: it ends with the generation, and DrainTimeout after the run
	// (at once when DrainTimeout < 0: a crash).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fparent := context.Background()
	if cfg.DrainTimeout < 0 {
		// A crash: writes and commits end the moment the run does, not
		// when the goroutine below gets to run.
		fparent = runCtx
	}
	fctx, fcancel := context.WithCancel(fparent)
	defer func() {
		// Never leave a flush running behind the generation.
		fcancel()
		_ = w.waitFlush()
	}()
	go func() {
		select {
		case <-gctx.Done():
			fcancel()
		case <-runCtx.Done():
			if cfg.DrainTimeout < 0 {
				fcancel()
			}
		case <-fctx.Done():
		}
		cancel()
		if cfg.DrainTimeout > 0 {
			t := time.NewTimer(cfg.DrainTimeout)
			defer t.Stop()
			select {
			case <-t.C:
			case <-gctx.Done():
			case <-fctx.Done():
			}
		}
		fcancel()
	}()
	var process func(*inMsg, bool, *sink, time.Time)
	var tick func(*sink, time.Time)
	var size func() partSize
	var release, idle func(*sink, time.Time) // stage A: admit held finishes
	if w.stage == stageA {
		c := newCells(cfg, p.m)
		c.log = p.log
		process, tick = c.process, c.tick
		size = func() partSize { return partSize{cells: len(c.byID), pending: c.pending.live} }
		w.commitCap = c.commitFrom
		release = c.drain
		if cfg.StopWhenCaughtUp {
			// Until caught up, the log as it stands is the whole input:
			// a finish held at its end has nothing left to wait for.
			idle = c.drain
		}
	} else {
		s := newPairs(cfg, p.m, p.camps)
		s.log = p.log
		process = s.process
		tick = func(_ *sink, now time.Time) { s.sweep(now) }
		size = func() partSize { return partSize{pairers: s.size()} }
	}
	sizeKey := w.stage + "/" + strconv.Itoa(w.part)
	defer p.setSize(sizeKey, partSize{})
	p.m.rebuilds.WithLabelValues(w.stage).Inc()

	ch := make(chan fetched, len(w.streams))
	for i, s := range w.streams {
		f := &fetcher{client: p.client, cfg: cfg, topic: s.topic, part: w.part, idx: i, decode: true, m: p.m}
		if w.stage == stageB {
			f.cache, f.split = p.cache, true
		}
		go f.run(ctx, -1, s.want, ch)
		s.want <- struct{}{}
		s.inflight = true
	}
	out, spare := &sink{}, &sink{}
	processed, since := 0, time.Now()
	rebuilt := false
	// idled: idle ran since the last processed message (it runs again only
	// after new input, not on every empty fetch).
	idled := false
	ticker := time.NewTicker(cfg.FetchWait)
	defer ticker.Stop()
	attach := func(f fetched) error {
		if f.err != nil {
			return f.err
		}
		s := w.streams[f.stream]
		s.inflight = false
		s.hwm, s.next = f.hwm, f.next
		if f.next >= f.hwm {
			s.endSeen = f.asked
		}
		if len(f.msgs) > 0 {
			if s.head() == nil && len(s.queued) == 0 {
				s.buf, s.pos = f.msgs, 0
			} else {
				s.queued = append(s.queued, f)
			}
		}
		if len(s.queued) == 0 {
			s.want <- struct{}{}
			s.inflight = true
		}
		return nil
	}
	for {
		// Take what the fetchers delivered.
		for more := true; more; {
			select {
			case f := <-ch:
				if err := attach(f); err != nil {
					p.log.Error().Err(err).Str("stage", w.stage).Int("partition", w.part).Msg("fetch failed; the partition's work stops and starts again from the committed offsets")
					return nil
				}
			default:
				more = false
			}
		}
		// Merge: process the smallest head while every stream has a head or
		// is known to be at its end.
		blocked := false
		now := time.Now()
		for processed < cfg.BatchSize {
			var best *stream
			ready := true
			for _, s := range w.streams {
				h := s.head()
				if h == nil {
					if !s.atEndKnown() {
						ready = false
						break
					}
					continue
				}
				if best == nil || before(h, s.rank, best.head(), best.rank) {
					best = s
				}
			}
			if ready && best != nil && len(w.streams) > 1 {
				// Merge past a stream at its end only when what is merged
				// is not newer than what that stream last had, or that
				// stream was seen at its end by a fetch sent MergeIdle
				// after the message arrived: a producer writing one topic
				// after another has had that long to write the sibling
				// topic. The end must be seen again after that time, not
				// merely known: under a backlog a message waits in the
				// buffer long after the sibling's last look, and what the
				// sibling received since is not known yet.
				h := best.head()
				for _, s := range w.streams {
					if s.head() == nil && h.ts.After(s.lastTS) && s.endSeen.Before(h.arrived.Add(cfg.MergeIdle)) {
						ready = false
						break
					}
				}
			}
			if !ready || best == nil {
				blocked = true
				break
			}
			m := best.head()
			best.lastTS = m.ts
			best.pos++
			if best.consumed = m.offset + 1; m.more {
				// A batched hf.outcomes record is consumed with its last
				// event: a commit between its events re-reads it whole.
				best.consumed = m.offset
			}
			if best.pos == len(best.buf) {
				best.buf, best.pos = nil, 0
				if len(best.queued) > 0 {
					best.buf = best.queued[0].msgs
					best.queued = best.queued[1:]
					if len(best.queued) == 0 && !best.inflight {
						best.want <- struct{}{}
						best.inflight = true
					}
				}
			}
			emit := best.committed < 0 || m.offset >= best.committed
			m.emit = emit
			best.in.Inc()
			process(m, emit, out, now)
			processed++
			idled = false
		}
		if blocked && idle != nil && !idled && w.allAtEnd() {
			// Every stream is at its end: run idle now rather than at the
			// next tick, so a run that stops when caught up does not wait a
			// FetchWait for its last held finishes.
			idle(out, now)
			idled = true
		}
		if !rebuilt && w.rebuildDone() {
			rebuilt = true
			p.log.Info().Str("stage", w.stage).Int("partition", w.part).Dur("took", time.Since(since)).Msg("state rebuilt from the log")
		}
		if processed >= cfg.BatchSize || (blocked && (processed > 0 || len(out.msgs) > 0)) {
			// Write and commit this batch in the background while the next
			// one is processed; flushes stay in order (one in flight).
			if err := w.waitFlush(); err != nil {
				return flushExit(err)
			}
			w.startFlush(fctx, out, processed)
			out, spare = spare, out
			processed = 0
			p.setSize(sizeKey, size())
			continue
		}
		if !blocked {
			continue
		}
		select {
		case f := <-ch:
			if err := attach(f); err != nil {
				p.log.Error().Err(err).Str("stage", w.stage).Int("partition", w.part).Msg("fetch failed; the partition's work stops and starts again from the committed offsets")
				return nil
			}
		case <-ticker.C:
			if w.allAtEnd() {
				tick(out, time.Now())
				if idle != nil {
					idle(out, time.Now())
					idled = true
				}
			}
		case err := <-w.flushDone:
			w.flushDone = nil
			if err != nil {
				return flushExit(err)
			}
		case <-gctx.Done():
			return nil
		case <-runCtx.Done():
			if release != nil && cfg.DrainTimeout >= 0 {
				release(out, time.Now())
			}
			return w.drain(fctx, out, processed)
		}
	}
}

// flushExit maps a flush error to run's result: ErrWrite is fatal, anything
// else (a failed commit, the generation ending) ends the partition's work,
// which runGroup starts again from the committed offsets while the
// generation lasts.
func flushExit(err error) error {
	if errors.Is(err, ErrWrite) {
		return err
	}
	return nil
}

// atEndKnown: no buffered message, and the last fetch answered that the
// stream had reached its high watermark.
func (s *stream) atEndKnown() bool {
	return s.head() == nil && len(s.queued) == 0 && s.hwm >= 0 && s.next >= s.hwm
}

func (w *partWork) allAtEnd() bool {
	for _, s := range w.streams {
		if !s.atEndKnown() {
			return false
		}
	}
	return true
}

func (w *partWork) rebuildDone() bool {
	for _, s := range w.streams {
		if s.committed >= 0 && s.consumed < s.committed && s.hwm >= 0 {
			return false
		}
		if s.hwm < 0 {
			return false
		}
	}
	return true
}

// drain finishes the in-flight flush and writes and commits the batch being
// processed when the run ends, within Config.DrainTimeout (fctx); with a
// negative DrainTimeout fctx is already over and nothing more is written.
func (w *partWork) drain(fctx context.Context, out *sink, processed int) error {
	if w.p.cfg.DrainTimeout < 0 {
		return nil // a crash: whatever is in flight is cancelled
	}
	if err := w.waitFlush(); err != nil || fctx.Err() != nil {
		return flushExit(err)
	}
	w.startFlush(fctx, out, processed)
	if err := w.waitFlush(); err != nil {
		w.p.log.Warn().Err(err).Str("stage", w.stage).Int("partition", w.part).Msg("drain: batch not written or not committed")
	}
	return nil
}

// waitFlush waits for the flush in flight, if any, and returns its error.
func (w *partWork) waitFlush() error {
	if w.flushDone == nil {
		return nil
	}
	err := <-w.flushDone
	w.flushDone = nil
	return err
}

// startFlush hands the batch's outputs and the offsets consumed so far to a
// goroutine that writes the outputs, waits for their acknowledgement, then
// commits the offsets. out belongs to that goroutine until waitFlush. A write
// that fails past the retry budget is ErrWrite (fatal); a failed commit ends
// the generation.
func (w *partWork) startFlush(fctx context.Context, out *sink, processed int) {
	commit := map[string]map[int]int64{}
	var caps map[string]int64
	if w.commitCap != nil {
		caps = w.commitCap()
	}
	for _, s := range w.streams {
		to := s.consumed
		// Never commit past a message that still waits in memory (a
		// pending event, a held cell_finished): until it is processed,
		// what it derives is not written (and Lag says so).
		if held, ok := caps[s.topic]; ok && held < to {
			to = held
		}
		if to > s.flushedTo && to > s.committed {
			commit[s.topic] = map[int]int64{w.part: to}
			s.flushedTo = to
		}
	}
	hwm := map[string]int64{}
	for _, s := range w.streams {
		hwm[s.topic] = s.hwm
	}
	done := make(chan error, 1)
	w.flushDone = done
	go func() {
		w.p.cache.put(out.admitted)
		err := w.flush(fctx, out, processed, commit, hwm)
		if err == nil {
			out.reset()
		}
		// After a failed flush a produce request abandoned on ctx may still
		// be encoding out.msgs (outWriter does not copy them): out is left
		// as it is, and never used again, since any flush error ends the
		// partition's work (run, drain).
		done <- err
	}()
}

func (w *partWork) flush(ctx context.Context, out *sink, processed int, commit map[string]map[int]int64, hwm map[string]int64) error {
	p, cfg := w.p, &w.p.cfg
	start := time.Now()
	if len(out.msgs) > 0 {
		bo := backoff.NewExponentialBackOff()
		bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = 100*time.Millisecond, 2*time.Second, cfg.RetryMaxElapsed
		err := backoff.Retry(func() error {
			err := p.out.write(ctx, out.msgs)
			if err != nil && ctx.Err() != nil {
				return backoff.Permanent(ctx.Err())
			}
			if err != nil {
				p.m.writeRetries.Inc()
				p.log.Warn().Err(err).Int("messages", len(out.msgs)).Msg("write outputs failed; retrying")
			}
			return err
		}, backoff.WithContext(bo, ctx))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w: %d messages of %s partition %d: %v", ErrWrite, len(out.msgs), w.stage, w.part, err)
		}
	}
	if len(commit) > 0 {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := w.commits.commit(commit); err != nil {
			p.log.Warn().Err(err).Str("group", w.group).Int("partition", w.part).Msg("commit failed; the partition's work stops and starts again from the committed offsets")
			return err
		}
		for topic, po := range commit {
			off := po[w.part]
			p.m.commitLag.WithLabelValues(w.group, topic, strconv.Itoa(w.part)).Set(float64(max(hwm[topic]-off, 0)))
			if p.prog != nil {
				p.prog(Progress{Group: w.group, Topic: topic, Partition: w.part, Offset: off})
			}
		}
	}
	if processed > 0 || len(out.msgs) > 0 {
		p.log.Debug().Str("stage", w.stage).Int("partition", w.part).Int("in", processed).
			Int("outcomes", out.outcomes).Int("rejected", out.rejected).Int("samples", out.samples).
			Int("round_metrics", out.rounds).Dur("took", time.Since(start)).Msg("batch")
	}
	return nil
}

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

// committedOf returns group's committed offset of partition id of each
// topic (negative: none).
func (p *Processor) committedOf(ctx context.Context, group string, topics []string, id int) (map[string]int64, error) {
	ends := map[string]map[int]int64{}
	for _, t := range topics {
		ends[t] = map[int]int64{id: 0}
	}
	c, err := kafkax.Committed(ctx, p.client, group, ends)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, t := range topics {
		off, ok := c[t][id]
		if !ok {
			off = -1
		}
		out[t] = off
	}
	return out, nil
}

// lag is the number of messages the group's two stages have left: stage A's
// up to rawEnds, then, once stage A has none left, stage B's up to the
// current end of hf.outcomes (stage A commits only after its outputs are
// acknowledged, so that end is final for everything stage A committed).
func lag(ctx context.Context, client *kafka.Client, group string, rawEnds map[string]map[int]int64) (int64, error) {
	if n, err := kafkax.CommittedLag(ctx, client, group, rawEnds); err != nil || n > 0 {
		return n, err
	}
	oEnds, err := kafkax.EndOffsets(ctx, client, schemas.TopicOutcomes)
	if err != nil {
		return 0, err
	}
	return kafkax.CommittedLag(ctx, client, PairGroup(group), oEnds)
}

// Lag returns how many input messages the processors of group have not yet
// committed: stage A's over the raw cell topics' current end offsets, and
// when that is 0, stage B's over hf.outcomes. 0 means every raw event written
// so far is processed and its derived events are acknowledged. Wall-clock
// timeouts of pending events may still add dead letters later.
func Lag(ctx context.Context, brokers []string, group string) (int64, error) {
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	ends, err := kafkax.EndOffsets(ctx, client, CellTopics...)
	if err != nil {
		return 0, err
	}
	return lag(ctx, client, group, ends)
}
