package score

import (
	"sort"

	"github.com/harnessflow/harnessflow/schemas"
)

// collect emits what became final after an event of c, sorted.
func (p *Pairer) collect(c *cell) []schemas.Event {
	var out []schemas.Event
	if c.kind == kindBaseline && c.finished && p.base.cellID == c.info.CellID && !p.base.finished {
		p.base.finished = true
		p.base.frozen, p.base.scores = freezeScores(p.base.scores), nil
		p.base.maxTime = c.maxTime
		ids := make([]string, 0, len(p.cells))
		for id := range p.cells {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			out = p.emitReady(p.cells[id], out, true)
		}
	} else {
		out = p.emitReady(c, out, false)
	}
	if len(out) > 1 {
		sortEvents(out)
	}
	return out
}

// emitReady appends the round metrics and samples of c that became final
// (force: look again even if c closed no new round), evicts the rounds no
// pending update reads, and evicts c once it finished with nothing left.
func (p *Pairer) emitReady(c *cell, out []schemas.Event, force bool) []schemas.Event {
	closed := c.closedThrough()
	needBase := c.kind != kindBaseline && c.kind != kindProduction
	if force || closed != c.handled {
		c.handled = closed
		if !needBase || p.baseReady() {
			var cycles []int32
			for cy, r := range c.rounds {
				if !r.emitted && int64(cy) <= closed {
					cycles = append(cycles, cy)
				}
			}
			sort.Slice(cycles, func(i, j int) bool { return cycles[i] < cycles[j] })
			for _, cy := range cycles {
				r := c.rounds[cy]
				out = append(out, p.metrics(c, r))
				r.emitted = true
				p.stats.RoundMetrics++
			}
		}
	}
	if len(c.updates) > 0 && (c.kind != kindInSitu || p.baseReady()) {
		kept := c.updates[:0]
		for _, u := range c.updates {
			if int64(u.cycle)+1 <= closed {
				out = append(out, p.sample(c, u))
				p.stats.Samples++
				continue
			}
			kept = append(kept, u)
		}
		for i := len(kept); i < len(c.updates); i++ {
			c.updates[i] = nil
		}
		c.updates = kept
	}
	// Evict rounds whose metrics went out and that no pending update reads.
	for cy, r := range c.rounds {
		if !r.emitted || c.needsRound(cy) {
			continue
		}
		// The attempt index keeps the rows (without their round) until the
		// cell finishes, so that a late skill event or judgment is counted as
		// late whatever the other cells did meanwhile.
		for _, rec := range r.attempts {
			rec.round = nil
		}
		delete(c.rounds, cy)
		if c.last == r {
			c.last = nil
		}
	}
	if c.finished && len(c.rounds) == 0 && len(c.updates) == 0 {
		delete(p.cells, c.info.CellID)
		p.gone[c.info.CellID] = struct{}{}
	}
	return out
}

// eventOrder returns the sort key of a derived event.
func eventOrder(ev schemas.Event) (cellID string, cycle int32, rank int) {
	switch e := ev.(type) {
	case *schemas.RoundMetrics:
		return e.CellID, e.Cycle, 0
	case *schemas.LabeledSample:
		return e.CellID, e.Cycle, 1
	}
	return "", 0, 2
}

// sortEvents orders derived events by cell_id, cycle, type (round metrics
// before samples) and event id.
func sortEvents(evs []schemas.Event) {
	sort.Slice(evs, func(i, j int) bool {
		ci, yi, ri := eventOrder(evs[i])
		cj, yj, rj := eventOrder(evs[j])
		if ci != cj {
			return ci < cj
		}
		if yi != yj {
			return yi < yj
		}
		if ri != rj {
			return ri < rj
		}
		return evs[i].Header().EventID < evs[j].Header().EventID
	})
}
