package chsink

import (
	"context"
	"sync"
	"time"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/schemas"
)

// On a cluster, a recomputation reads each shard through one of its
// replicas; a replica that has not yet fetched an insert another replica
// acknowledged (or whose only holder died a moment after acknowledging it)
// gives a summary without those attempts, or none, and nothing recomputes
// the cell if no later attempt arrives. So the sink keeps every cell it
// recomputed through a cluster until chddl.VerifyCells finds its summary
// settled: the attempts read include some event ids of the latest insert,
// and the summary's version counts every attempt read. A cell found short
// is recomputed again and checked after twice the wait (VerifyDelay,
// doubling up to maxVerifyWait). hf_sink_cell_scores_unverified is the
// figure to wait on: 0 means every summary the sink wrote is whole.
//
// The set lives in memory: a sink that restarts forgets the cells it had
// not verified yet (their next attempt recomputes them; Stats and the gauge
// say how many there were).

// maxCheckIDs is how many event ids of a cell's latest insert its check
// lists: an insert lands on a replica whole, so a few stand for all.
const maxCheckIDs = 8

// maxVerifyWait caps the wait between two checks of a cell still short
// (a replica down for long).
const maxVerifyWait = 30 * time.Second

// verifyBatch is the most cells one verification pass checks.
const verifyBatch = 5000

// unverified is a cell awaiting verification.
type unverified struct {
	ids []string // event ids of its latest insert
	// refused are attempt ids whose late_beyond_window dead letters were
	// inserted and must be read (kept across newer inserts, capped).
	refused []string
	due     time.Time
	wait    time.Duration
	seq     uint64 // order of arrival, for dropping the oldest past MaxUnverified
}

// verifySet is the cells awaiting verification. Safe for concurrent use.
type verifySet struct {
	mu    sync.Mutex
	cells map[chddl.CellKey]*unverified
	seq   uint64
}

// expect adds the cells of checks, due after wait; a cell already waiting
// takes the newer insert's ids and starts its waits over. It returns the
// number of cells dropped to stay within limit.
func (v *verifySet) expect(checks []chddl.CellCheck, now time.Time, wait time.Duration, limit int) (dropped int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cells == nil {
		v.cells = map[chddl.CellKey]*unverified{}
	}
	for _, c := range checks {
		v.seq++
		u := &unverified{ids: c.EventIDs, refused: c.RefusedIDs, due: now.Add(wait), wait: wait, seq: v.seq}
		if old := v.cells[c.Key]; old != nil {
			// A dead letters' check keeps the attempts' ids waiting, and
			// an attempts' check the refusals waiting.
			if len(u.ids) == 0 {
				u.ids = old.ids
			}
			u.refused = append(append([]string(nil), old.refused...), c.RefusedIDs...)
			if len(u.refused) > maxCheckIDs {
				u.refused = u.refused[len(u.refused)-maxCheckIDs:]
			}
		}
		v.cells[c.Key] = u
	}
	for len(v.cells) > limit {
		var oldest chddl.CellKey
		var min uint64
		for k, u := range v.cells {
			if min == 0 || u.seq < min {
				oldest, min = k, u.seq
			}
		}
		delete(v.cells, oldest)
		dropped++
	}
	return dropped
}

// due returns up to n cells whose check is due, with the entries checked
// (settle deletes a cell only if it was not replaced meanwhile).
func (v *verifySet) due(now time.Time, n int) ([]chddl.CellCheck, []*unverified) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var checks []chddl.CellCheck
	var entries []*unverified
	for k, u := range v.cells {
		if len(checks) == n {
			break
		}
		if !u.due.After(now) {
			checks = append(checks, chddl.CellCheck{Key: k, EventIDs: u.ids, RefusedIDs: u.refused})
			entries = append(entries, u)
		}
	}
	return checks, entries
}

// settle removes the checked cells that are settled and schedules the
// others again after twice their wait.
func (v *verifySet) settle(checks []chddl.CellCheck, entries []*unverified, short map[chddl.CellKey]bool, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for i, c := range checks {
		u := entries[i]
		if v.cells[c.Key] != u {
			continue // a newer insert replaced it: checked on its own
		}
		if !short[c.Key] {
			delete(v.cells, c.Key)
			continue
		}
		u.wait = min(2*u.wait, maxVerifyWait)
		u.due = now.Add(u.wait)
	}
}

func (v *verifySet) len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.cells)
}

// attemptChecks returns, per cell of task_attempts rows, up to maxCheckIDs
// of their event ids.
func attemptChecks(rows []row) []chddl.CellCheck {
	at := map[chddl.CellKey]int{}
	var out []chddl.CellCheck
	for _, r := range rows {
		a, ok := r.ev.(*schemas.TaskAttempt)
		if !ok {
			continue
		}
		k := chddl.CellKey{Project: a.Project, CellID: a.CellID}
		i, seen := at[k]
		if !seen {
			i = len(out)
			at[k] = i
			out = append(out, chddl.CellCheck{Key: k})
		}
		if ids := out[i].EventIDs; len(ids) < maxCheckIDs && (len(ids) == 0 || ids[len(ids)-1] != a.EventID) {
			out[i].EventIDs = append(ids, a.EventID)
		}
	}
	return out
}

// expectVerify queues the recomputed cells of a job for verification.
func (s *Sink) expectVerify(checks []chddl.CellCheck) {
	if len(checks) == 0 {
		return
	}
	if dropped := s.verify.expect(checks, time.Now(), s.cfg.VerifyDelay, s.cfg.MaxUnverified); dropped > 0 {
		s.m.unverifiedDropped.Add(float64(dropped))
		s.log.Warn().Int("dropped", dropped).Int("max_unverified", s.cfg.MaxUnverified).
			Msg("too many cells await cell_scores verification; the oldest are dropped unverified (their next attempt recomputes them)")
	}
	s.noteUnverified()
}

func (s *Sink) noteUnverified() {
	n := s.verify.len()
	s.m.unverified.Set(float64(n))
	s.addStats(func(st *Stats) { st.Unverified = int64(n) })
}

// verifier checks the due cells every VerifyDelay/2 until ctx ends: it
// recomputes the cells found short and schedules their next check. Its
// failures (ClickHouse unreachable) are logged and the cells checked again
// later: they never stop the sink.
func (s *Sink) verifier(ctx context.Context, cs CellScorer, cv CellVerifier) {
	tick := time.NewTicker(max(s.cfg.VerifyDelay/2, 50*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for ctx.Err() == nil {
			checks, entries := s.verify.due(time.Now(), verifyBatch)
			if len(checks) == 0 {
				break
			}
			s.verifyOnce(ctx, cs, cv, checks, entries)
			if len(checks) < verifyBatch {
				break
			}
		}
	}
}

// verifyOnce checks one batch of cells and recomputes the short ones.
func (s *Sink) verifyOnce(ctx context.Context, cs CellScorer, cv CellVerifier, checks []chddl.CellCheck, entries []*unverified) {
	short := map[chddl.CellKey]bool{}
	vctx, cancel := context.WithTimeout(ctx, s.cfg.InsertTimeout)
	defer cancel()
	keys, err := cv.VerifyCellScores(vctx, checks)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		s.log.Warn().Err(err).Int("cells", len(checks)).Msg("cell_scores verification failed; checking again later")
		for _, c := range checks {
			short[c.Key] = true
		}
		s.verify.settle(checks, entries, short, time.Now())
		return
	}
	for _, k := range keys {
		short[k] = true
	}
	if len(keys) > 0 {
		if err := cs.RecomputeCellScores(vctx, keys); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn().Err(err).Int("cells", len(keys)).Msg("cell_scores repair failed; checking again later")
		} else {
			s.m.repairs.Add(float64(len(keys)))
			s.addStats(func(st *Stats) { st.Repairs += int64(len(keys)) })
			s.log.Info().Int("cells", len(keys)).Int("checked", len(checks)).
				Msg("cell_scores recomputed again: a replica had not yet fetched their attempts")
		}
	}
	s.verify.settle(checks, entries, short, time.Now())
	s.noteUnverified()
}
