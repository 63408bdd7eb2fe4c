package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/schemas"
)

type probe struct {
	cell, id string
	sent     time.Time
}

// latency paces a campaign at LatencyRate events/s for LatencyDuration and
// times produce -> visible for one task attempt in LatencySample.
func (b *bench) latency(ctx context.Context) (*Latency, error) {
	cfg := b.cfg
	n := int(float64(cfg.LatencyRate) * cfg.LatencyDuration.Seconds())
	p := planFor(n)
	c := b.chunk(p, "lat", 0)
	b.pr("latency: %d events paced at %d events/s (%s); one attempt in %d timed, ClickHouse polled every %s",
		len(c.Records), cfg.LatencyRate, cfg.LatencyDuration, cfg.LatencySample, cfg.PollEvery)
	prod, err := producers.New(producers.Config{Brokers: b.cl.Brokers(), Source: "bench-e2e"})
	if err != nil {
		return nil, err
	}
	defer prod.Close(context.Background())

	var mu sync.Mutex
	pending := map[string]probe{}
	var lat []float64
	var polls int
	var pollTime time.Duration
	emitted := make(chan struct{})
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pollDone := make(chan error, 1)
	go func() {
		pollDone <- b.pollProbes(pctx, &mu, pending, &lat, &polls, &pollTime, emitted)
	}()

	cpu0 := b.cpuSnap()
	t0 := time.Now()
	attempts := 0
	for i, r := range c.Records {
		due := t0.Add(time.Duration(float64(i) / float64(cfg.LatencyRate) * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		// event_time is stamped by the SDK at emit, as a live agent's would be:
		// the generator's synthetic times (1 ms apart from the chunk's start)
		// run ahead of the emit rate, so chunks emitted back to back would
		// overlap in event time, which no live producer does.
		r.Event.Header().EventTime = time.Time{}
		if err := prod.Emit(ctx, r.Event); err != nil {
			return nil, fmt.Errorf("emit: %w", err)
		}
		if a, ok := r.Event.(*schemas.TaskAttempt); ok {
			attempts++
			if attempts%cfg.LatencySample == 0 {
				mu.Lock()
				pending[a.EventID] = probe{cell: a.CellID, id: a.EventID, sent: time.Now()}
				mu.Unlock()
			}
		}
	}
	dur := time.Since(t0)
	if err := prod.Flush(ctx); err != nil {
		return nil, fmt.Errorf("flush: %w", err)
	}
	close(emitted)
	if err := <-pollDone; err != nil {
		return nil, err
	}
	sort.Float64s(lat)
	l := &Latency{OfferedPerS: float64(cfg.LatencyRate), AchievedPerS: float64(len(c.Records)) / dur.Seconds(),
		DurationS: dur.Seconds(), Samples: len(lat), PollMS: float64(cfg.PollEvery.Milliseconds()),
		What: "produce (SDK Emit) -> task_attempts row visible to a SELECT, per sampled attempt; resolution: one poll period"}
	if polls > 0 {
		l.MeanPollMS = float64(pollTime.Milliseconds()) / float64(polls)
	}
	if len(lat) > 0 {
		l.P50, l.P95, l.P99, l.Max = pct(lat, 0.50), pct(lat, 0.95), pct(lat, 0.99), lat[len(lat)-1]
	}
	b.pr("latency: p50 %.0f ms, p95 %.0f ms, p99 %.0f ms (max %.0f, %d samples, %.0f events/s achieved, poll period %.0f ms)",
		l.P50, l.P95, l.P99, l.Max, l.Samples, l.AchievedPerS, l.MeanPollMS)
	// Let the rest of the campaign (samples, round metrics) land before the
	// next phase.
	// The CPU budget covers the paced load until all of it is visible:
	// what the pipeline spent per event at this load (bench/README.md,
	// issue 41: ClickHouse's CPU per event as the flush policy changes).
	ph := &Phase{Expected: expected(c)}
	cpu1, err := b.wait(ctx, "lat", ph, t0, 500*time.Millisecond)
	if err != nil {
		return l, err
	}
	l.CPU = cpuBudget(cpu0, cpu1, len(c.Records))
	b.pr("latency: cpu: %s", l.CPU)
	return l, nil
}

// pollProbes queries ClickHouse every PollEvery for the pending probes and
// records each one's latency when its row shows up. It returns once emitted
// is closed and no probe is pending, or with an error after PhaseTimeout.
func (b *bench) pollProbes(ctx context.Context, mu *sync.Mutex, pending map[string]probe, lat *[]float64, polls *int, pollTime *time.Duration, emitted <-chan struct{}) error {
	var deadline time.Time
	last := time.Now()
	for {
		start := time.Now()
		mu.Lock()
		var ps []probe
		for _, p := range pending {
			ps = append(ps, p)
		}
		mu.Unlock()
		done := false
		select {
		case <-emitted:
			done = true
			if deadline.IsZero() {
				deadline = time.Now().Add(b.cfg.PhaseTimeout)
			}
		default:
		}
		if done && len(ps) == 0 {
			return nil
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return fmt.Errorf("latency: %d sampled attempts %w", len(ps), ErrNotVisible)
		}
		if len(ps) > 0 {
			if len(ps) > 1000 {
				ps = ps[:1000]
			}
			cells, ids := map[string]bool{}, make([]string, 0, len(ps))
			for _, p := range ps {
				cells[p.cell] = true
				ids = append(ids, quote(p.id))
			}
			var cl []string
			for c := range cells {
				cl = append(cl, quote(c))
			}
			q := "SELECT event_id FROM task_attempts WHERE cell_id IN (" + strings.Join(cl, ",") + ") AND event_id IN (" + strings.Join(ids, ",") + ")"
			rows, err := b.cl.Conn().Query(ctx, q)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				b.log.Warn().Err(err).Msg("latency poll")
			} else {
				mu.Lock()
				for rows.Next() {
					var id string
					if err := rows.Scan(&id); err != nil {
						break
					}
					if p, ok := pending[id]; ok {
						*lat = append(*lat, float64(start.Sub(p.sent).Microseconds())/1000)
						delete(pending, id)
					}
				}
				mu.Unlock()
				rows.Close()
			}
		}
		*polls++
		*pollTime += start.Sub(last)
		last = start
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(start.Add(b.cfg.PollEvery))):
		}
	}
}

func quote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// pct is the q-quantile of sorted xs (nearest rank).
func pct(xs []float64, q float64) float64 {
	i := int(q*float64(len(xs))+0.999999) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}
