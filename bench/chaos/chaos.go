package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/bench/fleet"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/processors"
	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/producers/gen"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/sinks/chsink"
)

// Consumer groups of the children (their defaults).
const (
	groupProcessors = "hf-processors"
	groupSink       = "hf-sink"
	groupTrainer    = "hf-trainer"
)

// Run runs one chaos campaign and returns its report. An error means the
// campaign could not run (a part did not start, ctx ended); assertions that
// failed are in the report (Report.Pass, Report.Err).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, start: time.Now(), faults: map[string]int{}}
	return r.run(ctx)
}

// runner holds one campaign's state.
type runner struct {
	cfg   Config
	start time.Time

	camp *gen.Campaign
	bad  []malformed
	plan []fault
	ref  *reference

	cl       *fleet.Cluster
	kf       *kafkaFaults
	children []*child

	mu        sync.Mutex // guards faults and faultErrs
	faults    map[string]int
	faultErrs []string

	outageMu sync.Mutex // one ClickHouse outage at a time

	produced atomic.Int64 // good events emitted so far
	resent   int
}

func (r *runner) say(format string, args ...any) {
	fmt.Fprintf(r.cfg.Progress, "chaos %6.1fs  %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

func (r *runner) run(ctx context.Context) (*Report, error) {
	cfg := &r.cfg
	r.camp = campaign(cfg)
	msgs, err := r.camp.Messages()
	if err != nil {
		return nil, err
	}
	r.bad = malformedEvents(cfg, r.camp, msgs)
	r.plan = planFaults(cfg)
	r.say("seed %d (replay with --seed %d): %d good events in %d cells, %d malformed, %d faults planned:\n%s",
		cfg.Seed, cfg.Seed, len(r.camp.Records), len(r.camp.Cells), len(r.bad), len(r.plan), strings.TrimRight(planString(r.plan), "\n"))

	r.say("reference: the same campaign through an in-process processor on a clean in-memory broker")
	if r.ref, err = runReference(ctx, r.camp, r.bad); err != nil {
		return nil, err
	}
	r.say("reference: %d samples, %d round metrics, %d dead letters (%.1fs)", len(r.ref.Samples), len(r.ref.Rounds), len(r.ref.DLQ), r.ref.Took.Seconds())

	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "hf-chaos-"); err != nil {
			return nil, err
		}
	}
	r.say("starting broker, ClickHouse, processors, sink and trainer in %s", dir)
	r.cl, err = fleet.StartCluster(ctx, fleet.ClusterConfig{
		Dir: dir, Bin: cfg.Bin, Env: cfg.ChildEnv,
		// Every sample is trained (none held out); checkpoints, and so the
		// trainer's committed offsets, follow the stream closely.
		TrainArgs: []string{"--heldout-fraction", "-1", "--device", "cpu", "--checkpoint-interval", "5s"},
	})
	if err != nil {
		return nil, fmt.Errorf("start the cluster (run dir %s): %w", dir, err)
	}
	closed := false
	defer func() {
		if !closed {
			r.stopWatchers()
			r.cl.Close()
		}
	}()
	if err := r.cl.StartAll(); err != nil {
		return nil, err
	}
	for _, p := range r.cl.Children() {
		c := &child{p: p, stop: make(chan struct{}), done: make(chan struct{})}
		r.children = append(r.children, c)
		go c.watch(r.say)
	}
	r.kf = newKafkaFaults(r.cl, cfg.KafkaDelay)

	stopProgress := r.progress(ctx)
	prodStats, err := r.produce(ctx)
	if err != nil {
		stopProgress()
		return nil, err
	}
	r.say("produced %d good and %d malformed events; catching up", len(r.camp.Records), len(r.bad))
	settleStart := time.Now()
	v, lags, err := r.settle(ctx)
	stopProgress()
	if err != nil {
		return nil, err
	}
	settle := time.Since(settleStart)

	rep := r.report(v, lags, prodStats)
	rep.SettleS = settle.Seconds()
	if rep.RawOrder, err = measureOrdering(ctx, r.cl.Brokers(), r.camp); err != nil {
		r.say("could not read the raw log's order: %v", err)
	}
	for _, c := range r.children {
		rep.PeakRSSMB[c.p.Name] = float64(int(c.p.PeakRSSMB()*10)) / 10
		rep.Starts[c.p.Name] = c.p.Starts()
	}
	r.stopWatchers()
	closed = true
	if err := r.cl.Close(); err != nil {
		rep.Failures = append(rep.Failures, fmt.Sprintf("a child did not stop cleanly on SIGTERM: %v", err))
	}
	rep.Pass = len(rep.Failures) == 0
	rep.DurationS = time.Since(r.start).Seconds()
	if rep.Pass && !cfg.KeepDir {
		if err := os.RemoveAll(dir); err != nil {
			r.say("could not remove the run dir %s: %v", dir, err)
		}
	} else {
		rep.RunDir = dir
	}
	return rep, nil
}

// produce emits the campaign through the Go SDK at cfg.Rate, mixes in the
// malformed events through a plain kafka-go writer and fires the planned
// faults as the stream passes their moments. It returns once every event is
// acknowledged and every fault is over.
func (r *runner) produce(ctx context.Context) (ProducerStats, error) {
	cfg := &r.cfg
	var failedMu sync.Mutex
	var failed []schemas.Event
	prod, err := producers.New(producers.Config{
		Brokers:        r.cl.Brokers(),
		MaxElapsedTime: 2 * time.Minute,
		OnError: func(ev schemas.Event, _ error) {
			failedMu.Lock()
			failed = append(failed, ev)
			failedMu.Unlock()
		},
	})
	if err != nil {
		return ProducerStats{}, err
	}
	defer prod.Close(context.Background())

	badCh := make(chan kafka.Message, len(r.bad)+1)
	badDone := make(chan error, 1)
	go func() { badDone <- writeMalformed(ctx, r.cl.Brokers(), badCh) }()

	var wg sync.WaitGroup
	n := len(r.camp.Records)
	next, nb := 0, 0
	t0 := time.Now()
	for i, rec := range r.camp.Records {
		if i%20 == 0 {
			if d := time.Until(t0.Add(time.Duration(float64(i) / cfg.Rate * float64(time.Second)))); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
				}
			}
		}
		if err := prod.Emit(ctx, rec.Event); err != nil {
			close(badCh)
			wg.Wait()
			return ProducerStats{}, fmt.Errorf("emit event %d (%s): %w", i, rec.Event.Header().EventID, err)
		}
		r.produced.Store(int64(i + 1))
		for ; nb < len(r.bad) && r.bad[nb].After == i; nb++ {
			badCh <- r.bad[nb].Msg
		}
		for ; next < len(r.plan) && r.plan[next].At*float64(n) <= float64(i); next++ {
			f := r.plan[next]
			r.say("fault %s", f)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := r.inject(ctx, f); err != nil {
					r.say("fault %s failed: %v", f.Kind, err)
					r.mu.Lock()
					r.faultErrs = append(r.faultErrs, fmt.Sprintf("fault %s: %v", f.Kind, err))
					r.mu.Unlock()
				}
			}()
		}
	}
	close(badCh)
	err = prod.Flush(ctx)
	var de *producers.DeliveryError
	if err != nil && !errors.As(err, &de) {
		wg.Wait()
		return ProducerStats{}, fmt.Errorf("flush the producer: %w", err)
	}
	// Events the SDK gave up on (retries past MaxElapsedTime) are produced
	// again, as a careful application would.
	for {
		failedMu.Lock()
		evs := failed
		failed = nil
		failedMu.Unlock()
		if len(evs) == 0 {
			break
		}
		r.resent += len(evs)
		r.say("the SDK gave up on %d events; producing them again", len(evs))
		for {
			if err := prod.EmitSync(ctx, evs...); err == nil {
				break
			} else if ctx.Err() != nil {
				wg.Wait()
				return ProducerStats{}, err
			}
			time.Sleep(time.Second)
		}
	}
	if err := <-badDone; err != nil {
		wg.Wait()
		return ProducerStats{}, err
	}
	wg.Wait()
	r.kf.stopAll()
	st := prod.Stats()
	if err := prod.Close(ctx); err != nil {
		return ProducerStats{}, fmt.Errorf("close the producer: %w", err)
	}
	return ProducerStats{Emitted: st.Emitted, Delivered: st.Delivered, Retries: st.Retries, Resent: r.resent}, nil
}

// writeMalformed writes the malformed messages of ch, in small batches,
// retrying each failed message until it is acknowledged or ctx ends.
func writeMalformed(ctx context.Context, brokers []string, ch <-chan kafka.Message) error {
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: brokers, BatchSize: 100, MaxAttempts: 3})
	defer w.Close()
	for {
		m, ok := <-ch
		if !ok {
			return nil
		}
		batch := []kafka.Message{m}
	more:
		for len(batch) < 100 {
			select {
			case m, ok := <-ch:
				if !ok {
					break more
				}
				batch = append(batch, m)
			default:
				break more
			}
		}
		for wait := 100 * time.Millisecond; len(batch) > 0; wait = min(2*wait, 2*time.Second) {
			err := w.WriteMessages(ctx, batch...)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("write malformed events: %w", ctx.Err())
			}
			var we kafka.WriteErrors
			if errors.As(err, &we) && len(we) == len(batch) {
				var left []kafka.Message
				for i, e := range we {
					if e != nil {
						left = append(left, batch[i])
					}
				}
				batch = left
			}
			time.Sleep(wait)
		}
	}
}

// inject executes one planned fault.
func (r *runner) inject(ctx context.Context, f fault) error {
	var err error
	switch f.Kind {
	case FaultKillProcessors:
		err = r.children[0].kill(ctx, f.Downtime)
	case FaultKillSink:
		err = r.children[1].kill(ctx, f.Downtime)
	case FaultKillTrainer:
		err = r.children[2].kill(ctx, f.Downtime)
	case FaultBrokerRestart:
		err = r.kf.restartBroker()
	case FaultClickHouseOutage:
		err = r.clickHouseOutage(ctx)
	default:
		err = r.kf.run(ctx, f.Kind, r.cfg.KafkaBurst)
	}
	if err == nil {
		r.mu.Lock()
		r.faults[f.Kind]++
		r.mu.Unlock()
	}
	return err
}

func (r *runner) clickHouseOutage(ctx context.Context) error {
	r.outageMu.Lock()
	defer r.outageMu.Unlock()
	if err := r.cl.StopClickHouse(); err != nil {
		return fmt.Errorf("stop ClickHouse: %w", err)
	}
	r.say("ClickHouse stopped for %v", r.cfg.ClickHouseOutage)
	select {
	case <-time.After(r.cfg.ClickHouseOutage):
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := r.cl.StartClickHouse(sctx); err != nil {
		return fmt.Errorf("start ClickHouse again: %w", err)
	}
	r.say("ClickHouse started again")
	return nil
}

// progress prints a line every few seconds until the returned func is
// called.
func (r *runner) progress(ctx context.Context) func() {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			n := r.produced.Load()
			r.mu.Lock()
			injected := 0
			for _, c := range r.faults {
				injected += c
			}
			r.mu.Unlock()
			qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			var attempts, samples uint64
			status := "ClickHouse down"
			if conn := r.cl.Conn(); conn != nil {
				err := conn.QueryRow(qctx, "SELECT (SELECT count() FROM "+r.cl.Database()+".task_attempts), (SELECT count() FROM "+r.cl.Database()+".labeled_samples)").Scan(&attempts, &samples)
				if err == nil {
					status = fmt.Sprintf("ClickHouse rows: %d task_attempts, %d labeled_samples", attempts, samples)
				}
			}
			cancel()
			r.say("produced %d/%d (%.0f%%), faults done %d/%d, %s", n, len(r.camp.Records), 100*float64(n)/float64(len(r.camp.Records)), injected, len(r.plan), status)
		}
	}()
	return func() { close(stop); <-done }
}

// settle waits until every group has committed everything and ClickHouse
// holds what is expected, or cfg.SettleTimeout passes; it returns the last
// verification and the lags.
func (r *runner) settle(ctx context.Context) (*verification, map[string]int64, error) {
	exp := newExpectation(r.camp, r.bad, r.ref)
	client := kafkax.NewClient(r.cl.Brokers())
	deadline := time.Now().Add(r.cfg.SettleTimeout)
	var last *verification
	lags := map[string]int64{}
	for {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		lagErr := r.lags(ctx, client, lags)
		caughtUp := lagErr == nil && lags[groupProcessors]+lags[groupSink]+lags[groupTrainer] == 0
		if caughtUp || time.Now().After(deadline) {
			v, err := verify(ctx, r.cl.Conn(), r.cl.Database(), exp)
			if err == nil {
				last = v
				if caughtUp && len(v.failures()) == 0 {
					return v, lags, nil
				}
			} else {
				lagErr = err
			}
		}
		if time.Now().After(deadline) {
			if last == nil {
				return nil, nil, fmt.Errorf("no verification within the settle timeout %v: %w", r.cfg.SettleTimeout, lagErr)
			}
			return last, lags, nil
		}
		what := fmt.Sprintf("lag %v", lags)
		if lagErr != nil {
			what = lagErr.Error()
		} else if last != nil && caughtUp {
			what = "waiting for ClickHouse: " + strings.Join(last.failures(), "; ")
		}
		r.say("settling: %s", what)
		select {
		case <-time.After(3 * time.Second):
		case <-ctx.Done():
		}
	}
}

// lags fills the three groups' uncommitted message counts.
func (r *runner) lags(ctx context.Context, client *kafka.Client, out map[string]int64) error {
	n, err := processors.Lag(ctx, r.cl.Brokers(), groupProcessors)
	if err != nil {
		return err
	}
	out[groupProcessors] = n
	if out[groupSink], err = kafkax.GroupLag(ctx, client, groupSink, chsink.DefaultTopics()...); err != nil {
		return err
	}
	out[groupTrainer], err = kafkax.GroupLag(ctx, client, groupTrainer, schemas.TopicSamples)
	return err
}

// report assembles the report from the last verification.
func (r *runner) report(v *verification, lags map[string]int64, ps ProducerStats) *Report {
	rep := &Report{
		Seed: r.cfg.Seed, EventsProduced: len(r.camp.Records), MalformedSent: len(r.bad),
		MalformedByReason: map[string]int{}, Rows: map[string]int{}, DLQReasons: v.DLQReasons,
		DLQWrongReason: v.DLQWrongReason, DLQLogCopies: v.DLQLogCopies, SinkDecodeRows: v.SinkDecodeRows,
		Samples: len(r.ref.Samples), SampleMismatches: v.SampleMismatches, Tables: v.Tables,
		Faults: map[string]int{}, KafkaRequestsFaulted: r.kf.hits.Load(), UnexpectedExits: map[string]int{},
		Starts: map[string]int{}, Producer: ps, Lag: lags, PeakRSSMB: map[string]float64{},
		ReferenceS: r.ref.Took.Seconds(), Machine: Machine(), Date: time.Now().UTC().Format(time.RFC3339),
		Command: strings.Join(os.Args, " "),
	}
	for _, m := range r.bad {
		rep.MalformedByReason[m.Reason]++
	}
	r.mu.Lock()
	for k, n := range r.faults {
		rep.Faults[k] = n
	}
	rep.Failures = append(rep.Failures, r.faultErrs...)
	r.mu.Unlock()
	rep.Faults[FaultMalformed] = len(r.bad)
	for _, f := range r.plan {
		rep.Plan = append(rep.Plan, f.String())
	}
	for _, t := range v.Tables {
		rep.Rows[t.Table] = t.Rows
		rep.Lost += t.Lost
		rep.Duplicated += t.Duplicated
	}
	rep.DLQ = v.table("rejected_events").Rows - v.table("rejected_events").Unexpected
	ts := v.table("trainer_steps")
	rep.TrainedTwice, rep.Untrained = ts.Duplicated, ts.Lost
	rep.SamplesEqual = v.SampleMismatches == 0 && v.table("labeled_samples").Lost == 0 && v.table("labeled_samples").Unexpected == 0
	for _, c := range r.children {
		n := c.unexpectedExits()
		rep.UnexpectedExits[c.p.Name] = n
		if n > 0 {
			// No service may exit on a fault it should ride out.
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s exited %d times without being killed (its log: %s)", c.p.Name, n, c.p.LogPath))
		}
	}
	client := kafkax.NewClient(r.cl.Brokers())
	if ends, err := kafkax.EndOffsets(context.Background(), client, schemas.RawTopics...); err == nil {
		for _, ps := range ends {
			for _, e := range ps {
				rep.RawLogMessages += e
			}
		}
	}

	rep.Failures = append(rep.Failures, v.failures()...)
	if len(r.ref.Samples) == 0 {
		rep.Failures = append(rep.Failures, "the reference run produced no samples: the campaign is too small to compare anything")
	}
	malformedSet := newExpectation(r.camp, r.bad, r.ref).malformed
	for p := range r.ref.DLQ {
		if _, ok := malformedSet[p]; !ok {
			rep.Failures = append(rep.Failures, "the uninterrupted reference run dead-lettered an event that is not malformed")
			break
		}
	}
	for g, n := range lags {
		if n > 0 {
			rep.Failures = append(rep.Failures, fmt.Sprintf("consumer group %s: %d messages not committed after %v", g, n, r.cfg.SettleTimeout))
		}
	}
	for kind, planned := range planned(r.plan) {
		if rep.Faults[kind] < planned {
			rep.Failures = append(rep.Failures, fmt.Sprintf("fault %s: %d of %d injected", kind, rep.Faults[kind], planned))
		}
	}
	return rep
}

func planned(plan []fault) map[string]int {
	out := map[string]int{}
	for _, f := range plan {
		out[f.Kind]++
	}
	return out
}

func (r *runner) stopWatchers() {
	for _, c := range r.children {
		c.stopWatch()
	}
}
