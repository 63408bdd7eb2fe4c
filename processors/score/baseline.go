package score

import "time"

// baseline is the pairing key's baseline cell: its attempt-1 score per
// task, against which the other cells' lifts are measured.
type baseline struct {
	cellID string
	// scores maps task_id → attempt-1 score (0 when status ≠ ok) while the
	// baseline runs; frozen holds them once it finished (scores is nil).
	scores   map[string]float64
	frozen   *scoreTable
	finished bool
	maxTime  time.Time
}

// score returns the baseline's score on a task.
func (b *baseline) score(task string) (float64, bool) {
	if b.frozen != nil {
		return b.frozen.get(task)
	}
	v, ok := b.scores[task]
	return v, ok
}

// size is the number of tasks scored.
func (b *baseline) size() int {
	if b.frozen != nil {
		return b.frozen.len()
	}
	return len(b.scores)
}

// baseReady reports that the baseline finished: its scores are final.
func (p *Pairer) baseReady() bool { return p.base != nil && p.base.finished }
