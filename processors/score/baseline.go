package score

import "time"

// baseline is the pairing key's baseline cell: its attempt-1 score per
// task, against which the other cells' lifts are measured.
type baseline struct {
	cellID string
	// cell is the baseline cell while the Pairer holds it (its attempt-1
	// winners are the scores); once it is forgotten, frozen holds them.
	cell     *cell
	frozen   *scoreTable
	finished bool
	at       time.Time // the baseline's latest event time, once forgotten
}

// score returns the baseline's score on a task (its attempt-1 winner's;
// 0 when its status is not ok).
func (b *baseline) score(task []byte) (float64, bool) {
	if b.cell != nil {
		if rec := b.cell.baseRec(task); rec != nil {
			return rec.score, true
		}
		return 0, false
	}
	if b.frozen != nil {
		return b.frozen.get(string(task))
	}
	return 0, false
}

// maxTime is the baseline's latest event time.
func (b *baseline) maxTime() time.Time {
	if b.cell != nil {
		return b.cell.maxTime
	}
	return b.at
}

// freeze keeps the baseline's scores in a compact table when its cell is
// forgotten (more evolved cells of the key may still start).
func (b *baseline) freeze() {
	if b.cell == nil {
		return
	}
	m := map[string]float64{}
	c := b.cell
	for i := range c.slots {
		if s := &c.slots[i]; s.attempt == 1 && s.att != 0 {
			task := c.taskOf(int32(i))
			m[string(task)] = c.baseRec(task).score
		}
	}
	b.frozen, b.at, b.cell = freezeScores(m), b.cell.maxTime, nil
}

// size is the number of tasks scored.
func (b *baseline) size() int {
	if b.frozen != nil {
		return b.frozen.len()
	}
	return 0
}

// baseReady reports that the baseline finished: its scores are final
// (until a late attempt of it corrects them).
func (p *Pairer) baseReady() bool { return p.base != nil && p.base.finished }

// baseRec is a baseline cell's attempt 1 of task: the lowest cycle's,
// should the task have been solved in several rounds; nil if none.
func (c *cell) baseRec(task []byte) *attemptRec {
	s := c.findSlotBytes(task, 1)
	if s < 0 || c.slots[s].att == 0 {
		return nil
	}
	best := &c.recs[c.slots[s].att-1]
	for i := best.next; i != 0; i = c.recs[i-1].next {
		if r := &c.recs[i-1]; r.cycle < best.cycle {
			best = r
		}
	}
	return best
}
