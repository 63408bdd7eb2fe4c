package chsink

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/schemas"
)

// Recomputing cell_scores, isolated per project.
//
// The cost of recomputing a cell grows with its attempts (0.37 s for a cell
// of 200 000, 0.05 s for a small one), and a task_attempts batch's offsets
// are committed only once its cells are recomputed. With one recomputer, one
// project's huge cell delayed every project's summaries and commits. So each
// inserted task_attempts batch is split into parts, one per project (its
// cells, its verification checks, and the lowest offset per partition of
// that project's rows), and the parts wait in per-project queues that
// Config.RecomputeWorkers workers take in turn: a worker takes every part
// queued for one project (coalesced: one statement set per project and
// pass), and a project is worked on by one worker at a time, so a project
// whose cells are slow holds one worker, never the others. A batch is done
// when its last part is; in the meantime commit holds each partition only at
// the lowest offset of a part not done yet, so a partition that carries
// none of the slow project's rows commits.
//
// What is committed is always summarized (at-least-once, as before): the
// split moves no recomputation off the commit path, it only stops
// serializing them across projects.

// maxRecomputeJobs bounds the task_attempts batches inserted and awaiting
// their recomputation; past it the inserters wait (and so, in turn, the
// loop and fetching): the sink's memory stays bounded when ClickHouse
// recomputes more slowly than attempts arrive.
const maxRecomputeJobs = 64

// part is the share of one inserted task_attempts batch that belongs to one
// project: its cells, what verifying them expects (on a cluster), and the
// lowest offset per partition of its rows, which commit holds until the
// part is done.
type part struct {
	job     *job
	project string
	cells   []chddl.CellKey
	checks  []chddl.CellCheck
	pending map[tp]int64
	queued  time.Time // when it was queued (hf_sink_cell_scores_lag_seconds)
	done    atomic.Bool
}

// attemptParts splits task_attempts rows by project: one part per project,
// with its distinct cells (in order of arrival), the lowest offset of its
// rows per partition and, when checks is set, its cells' checks
// (attemptChecks).
func attemptParts(j *job, rows []row, checks bool) []*part {
	at := map[string]*part{}
	var out []*part
	seen := map[chddl.CellKey]struct{}{}
	for _, r := range rows {
		a, ok := r.ev.(*schemas.TaskAttempt)
		if !ok {
			continue
		}
		p := at[a.Project]
		if p == nil {
			p = &part{job: j, project: a.Project, pending: map[tp]int64{}}
			at[a.Project] = p
			out = append(out, p)
		}
		k := tp{r.m.topic, int(r.m.partition)}
		if lo, ok := p.pending[k]; !ok || r.m.offset < lo {
			p.pending[k] = r.m.offset
		}
		c := chddl.CellKey{Project: a.Project, CellID: a.CellID}
		if _, dup := seen[c]; !dup {
			seen[c] = struct{}{}
			p.cells = append(p.cells, c)
		}
	}
	if checks {
		for _, c := range attemptChecks(rows) {
			p := at[c.Key.Project]
			p.checks = append(p.checks, c)
		}
	}
	return out
}

// recomputeQueue holds the parts awaiting recomputation, one FIFO per
// project, and the projects that have parts and no worker, in the order
// they became ready (round robin: a project whose parts keep coming goes to
// the back after each pass). Safe for concurrent use.
type recomputeQueue struct {
	mu       sync.Mutex
	cond     *sync.Cond
	projects map[string]*projectQueue
	ready    []string
	closed   bool
	cells    int // queued cells (with repeats across parts)
	busy     int // workers recomputing
	// every is Config.RecomputeEvery: a project is taken at most once per
	// every after its previous pass ended (last), unless draining.
	every    time.Duration
	last     map[string]time.Time
	draining bool
	swept    time.Time // when last was last swept of entries past lastKeep

	// slots bounds the jobs awaiting recomputation (maxRecomputeJobs).
	slots chan struct{}
}

// projectQueue is one project's queued parts; busy while a worker
// recomputes them.
type projectQueue struct {
	parts []*part
	busy  bool
	since time.Time // when the oldest part not done was queued (zero: none)
}

func newRecomputeQueue(every time.Duration) *recomputeQueue {
	q := &recomputeQueue{projects: map[string]*projectQueue{}, every: every, last: map[string]time.Time{}, slots: make(chan struct{}, maxRecomputeJobs)}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// push queues parts (one job's, stamped now).
func (q *recomputeQueue) push(parts []*part, now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, p := range parts {
		p.queued = now
		pq := q.projects[p.project]
		if pq == nil {
			pq = &projectQueue{}
			q.projects[p.project] = pq
		}
		if len(pq.parts) == 0 && !pq.busy {
			q.ready = append(q.ready, p.project)
		}
		if pq.since.IsZero() {
			pq.since = now
		}
		pq.parts = append(pq.parts, p)
		q.cells += len(p.cells)
	}
	q.cond.Broadcast()
}

// take waits for a ready project that is due (its previous pass ended
// RecomputeEvery ago or more, or the sink is draining), marks it busy and
// returns its queued parts; ok is false once the queue is closed. A project
// not due yet waits in its place while due ones are taken: one project's
// spacing holds no worker.
func (q *recomputeQueue) take() (project string, parts []*part, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if q.closed {
			return "", nil, false
		}
		now := time.Now()
		var wake time.Time
		for i, p := range q.ready {
			due := q.dueLocked(p)
			if due.After(now) {
				if wake.IsZero() || due.Before(wake) {
					wake = due
				}
				continue
			}
			q.ready = append(q.ready[:i], q.ready[i+1:]...)
			pq := q.projects[p]
			pq.busy = true
			q.busy++
			return p, q.takeLocked(pq), true
		}
		if wake.IsZero() {
			q.cond.Wait()
			continue
		}
		t := time.AfterFunc(wake.Sub(now), func() {
			q.mu.Lock()
			q.cond.Broadcast()
			q.mu.Unlock()
		})
		q.cond.Wait()
		t.Stop()
	}
}

// dueLocked is when project may be recomputed next (zero: now).
func (q *recomputeQueue) dueLocked(project string) time.Time {
	if q.draining || q.every <= 0 {
		return time.Time{}
	}
	last, ok := q.last[project]
	if !ok {
		return time.Time{}
	}
	return last.Add(q.every)
}

// drain makes every queued project due at once: the sink is stopping and
// its drain waits for their passes.
func (q *recomputeQueue) drain() {
	q.mu.Lock()
	q.draining = true
	q.mu.Unlock()
	q.cond.Broadcast()
}

// more returns the parts queued for project, busy, since its last take.
func (q *recomputeQueue) more(project string) []*part {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.takeLocked(q.projects[project])
}

func (q *recomputeQueue) takeLocked(pq *projectQueue) []*part {
	parts := pq.parts
	pq.parts = nil
	for _, p := range parts {
		q.cells -= len(p.cells)
	}
	return parts
}

// lastKeep is how long the end of a project's pass is remembered: longer
// than any RecomputeEvery worth setting.
const lastKeep = 10 * time.Minute

// finish ends a worker's pass on project: the project is ready again if
// parts were queued meanwhile, and forgotten otherwise.
func (q *recomputeQueue) finish(project string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	q.last[project] = now
	if len(q.last) > 4096 && now.Sub(q.swept) > time.Minute {
		q.swept = now
		for p, t := range q.last {
			if now.Sub(t) > lastKeep {
				delete(q.last, p)
			}
		}
	}
	pq := q.projects[project]
	pq.busy = false
	q.busy--
	if len(pq.parts) > 0 {
		pq.since = pq.parts[0].queued
		q.ready = append(q.ready, project)
		q.cond.Broadcast()
		return
	}
	delete(q.projects, project)
}

// close wakes the workers: they return from take.
func (q *recomputeQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}

// depth returns the cells queued, the projects with parts queued or being
// recomputed, the workers busy and the age of the oldest part not done.
func (q *recomputeQueue) depth(now time.Time) (cells, projects, busy int, oldest time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, pq := range q.projects {
		if !pq.since.IsZero() && now.Sub(pq.since) > oldest {
			oldest = now.Sub(pq.since)
		}
	}
	return q.cells, len(q.projects), q.busy, oldest
}

// enqueueParts hands an inserted task_attempts job's parts to the workers,
// waiting while maxRecomputeJobs jobs await theirs. It reports false when
// ctx ended first.
func (s *Sink) enqueueParts(ctx context.Context, q *recomputeQueue, j *job) bool {
	select {
	case q.slots <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	q.push(j.parts, time.Now())
	s.noteQueue(q)
	return true
}

// partDone marks p done (its summaries written) and its job done with its
// last part, releasing the job's slot; the loop is told either way, since a
// part done may let a partition commit further.
func (s *Sink) partDone(q *recomputeQueue, p *part) {
	p.done.Store(true)
	if p.job.left.Add(-1) == 0 {
		<-q.slots
		s.markDone(p.job)
		return
	}
	select {
	case s.doneNote <- struct{}{}:
	default:
	}
}

// recomputeWorker recomputes the parts of one project at a time (RecomputeWorkers
// of them run): every part queued for the project it takes, and those
// queued while inserts are in flight (coalesced, at most MaxAge of
// waiting), in one statement set; then it marks them done. After any
// worker's failure it reports nothing more and only takes parts.
func (s *Sink) recomputeWorker(ctx context.Context, cs CellScorer, q *recomputeQueue) {
	for {
		project, parts, ok := q.take()
		if !ok {
			return
		}
		s.noteQueue(q)
		if s.failed.Load() {
			q.finish(project)
			continue
		}
		// Coalesce: a project is taken at most once per RecomputeEvery
		// (take; the parts queued meanwhile join this pass), and while
		// inserts are still in flight (a sustained load) the pass waits
		// for them, up to MaxAge, so that one recomputation covers
		// several inserts instead of competing with each of them.
		if idle := s.inflight.Idle(); s.inflight.Load() > 0 {
			wait := time.NewTimer(s.cfg.MaxAge)
			select {
			case <-idle:
			case <-wait.C:
			case <-ctx.Done():
			}
			wait.Stop()
		}
		parts = append(parts, q.more(project)...)
		seen := map[chddl.CellKey]struct{}{}
		var list []chddl.CellKey
		for _, p := range parts {
			for _, c := range p.cells {
				if _, dup := seen[c]; !dup {
					seen[c] = struct{}{}
					list = append(list, c)
				}
			}
		}
		t0 := time.Now()
		attempts, err := s.retry(ctx, "cell_scores", len(list), "recompute", func(ictx context.Context) error {
			return cs.RecomputeCellScores(ictx, list)
		})
		if err != nil {
			s.fail(&InsertError{Table: "cell_scores", Rows: len(list), Attempts: attempts, Err: err})
			q.finish(project)
			s.noteQueue(q)
			continue
		}
		now := time.Now()
		s.m.latency.WithLabelValues("cell_scores").Observe(now.Sub(t0).Seconds())
		s.log.Debug().Str("project", project).Int("cells", len(list)).Int("parts", len(parts)).
			Dur("took", now.Sub(t0)).Msg("cell_scores recomputed")
		for _, p := range parts {
			s.m.recomputeLag.Observe(now.Sub(p.queued).Seconds())
			s.expectVerify(p.checks) // before the offsets can be committed
			s.partDone(q, p)
		}
		q.finish(project)
		s.noteQueue(q)
	}
}

// noteQueue sets the recompute queue's gauges.
func (s *Sink) noteQueue(q *recomputeQueue) {
	cells, projects, busy, _ := q.depth(time.Now())
	s.m.queuedCells.Set(float64(cells))
	s.m.queuedProjects.Set(float64(projects))
	s.m.busyWorkers.Set(float64(busy))
	s.addStats(func(st *Stats) { st.RecomputeQueued = int64(cells) })
}
