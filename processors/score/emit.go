package score

import (
	"sort"

	"github.com/harnessflow/harnessflow/schemas"
)

// collect emits what became final, or changed, after an event of c, sorted.
func (p *Pairer) collect(c *cell) []schemas.Event {
	var out []schemas.Event
	if c.kind == kindBaseline && c.finished && p.base != nil && p.base.cell == c && !p.base.finished {
		p.base.finished = true
		out = p.emitAll(out, true)
	} else if p.baseDirty {
		// A late attempt of the finished baseline: every output that reads
		// it is computed again.
		p.baseDirty = false
		out = p.emitAll(out, false)
	} else {
		out = p.emitReady(c, out, false)
	}
	if len(out) > 1 {
		sortEvents(out)
	}
	return out
}

func (p *Pairer) emitAll(out []schemas.Event, force bool) []schemas.Event {
	ids := make([]string, 0, len(p.cells))
	for id := range p.cells {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		out = p.emitReady(p.cells[id], out, force)
	}
	return out
}

// emitReady appends the round metrics and samples of c that became final
// (their round closed) or that an input changed since they were emitted
// (a correction: same event id, the values computed again from every
// winner). force: look again even if c closed no new round.
func (p *Pairer) emitReady(c *cell, out []schemas.Event, force bool) []schemas.Event {
	closed := c.closedThrough()
	changed := closed != c.handled
	c.handled = closed
	if !(force || changed || c.dirty) {
		return out
	}
	needBase := c.kind != kindBaseline && c.kind != kindProduction
	if !needBase || p.baseReady() {
		var cycles []int32
		for i := range c.rounds.len() {
			if cy, r := c.rounds.key(i), c.rounds.val(i); int64(cy) <= closed && (!r.out.done && len(r.keys) > 0 || r.dirty) {
				cycles = append(cycles, cy)
			}
		}
		sort.Slice(cycles, func(i, j int) bool { return cycles[i] < cycles[j] })
		for _, cy := range cycles {
			r, _ := c.rounds.get(cy)
			r.dirty = false
			m := p.metrics(c, r)
			sum, ok := fingerprint(m)
			if r.out.done {
				if r.out.same(sum, ok) {
					continue
				}
				p.stats.Corrections++
			}
			r.out = emitted{sum: sum, done: true, ok: ok}
			out = append(out, m)
			p.stats.RoundMetrics++
		}
	}
	if len(c.updates) > 0 && (c.kind != kindInSitu || p.baseReady()) {
		for _, u := range c.updates {
			if int64(u.cycle)+1 > closed || (u.out.done && !u.dirty) {
				continue
			}
			u.dirty = false
			s := p.sample(c, u)
			sum, ok := fingerprint(s)
			if u.out.done {
				if u.out.same(sum, ok) {
					continue
				}
				p.stats.Corrections++
			}
			u.out = emitted{sum: sum, done: true, ok: ok}
			out = append(out, s)
			p.stats.Samples++
		}
	}
	c.dirty = false
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
