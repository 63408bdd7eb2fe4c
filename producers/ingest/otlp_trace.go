package ingest

import (
	"cmp"
	"fmt"
	"sync"

	"github.com/harnessflow/harnessflow/schemas"
)

// This file holds what the mapping does per trace rather than per span
// (docs/otlp.md, "A trace stands alone"):
//
//   - all or nothing: the spans of one trace (within one request) that map
//     to events are accepted together or refused together, so a refused
//     invoke_agent span never leaves its skill spans' events behind without
//     their attempt; every span of a refused trace is named in
//     partial_success, the refused one with its own reason, the others as
//     refused with it;
//   - its cell: a span whose cell carries harnessflow.campaign_id (on the
//     span or its resource) opens the cell itself, with a cell_started made
//     from the harnessflow.<field> cell attributes; its event id is the one
//     /v1/events derives for a cell_started without event_id (type,
//     project, cell_id), so every trace of the cell, every retry and a
//     cell_started sent on /v1/events without event_id are one event;
//   - a span with harnessflow.cell_status ends its cell (mapSpan).

// cellAttrs are the cell_started fields read from harnessflow.<field>.
var cellAttrs = []string{
	"campaign_id", "cell_id", "benchmark", "agent_model", "evolver_model", "seed", "route",
	"h0_version", "batch_size", "max_attempts", "task_count",
}

// otlpMapped is one event made from a span (or, for a cell_started, from
// the cell attributes of a span of the trace).
type otlpMapped struct {
	ev    schemas.Event
	span  *otlpSpan
	trace *otlpTrace
}

// otlpTrace is one trace of a request: its spans that map to events, their
// events, the cell_started events its attributes make, and why it was
// refused, if it was.
type otlpTrace struct {
	spans  []*otlpSpan
	events []otlpMapped
	starts []otlpMapped         // one per cell, the earliest
	errs   map[*otlpSpan]string // the refused spans' own reasons
	first  *otlpSpan            // the first refused span
	read   map[*otlpSpan]bool   // spans whose cell attributes were read
}

// refuse marks sp refused for why, and so its whole trace.
func (tr *otlpTrace) refuse(sp *otlpSpan, why string) {
	if tr.errs == nil {
		tr.errs = map[*otlpSpan]string{}
	}
	if _, dup := tr.errs[sp]; !dup {
		tr.errs[sp] = why
	}
	if tr.first == nil {
		tr.first = sp
	}
}

// openCell adds the cell_started of sp's cell when the cell's attributes
// carry harnessflow.campaign_id. They are read from the span that names
// the cell: the attempt's own span, a skill span's invoke_agent ancestor
// (else the skill span), a finishing span itself; that span is returned,
// the one to refuse when they make no valid cell_started (each such span
// is read once). Of a trace's spans of one cell, the earliest start is its
// event_time, so that it sorts before every event of the trace.
func (tr *otlpTrace) openCell(sp *otlpSpan, project string, lim schemas.Limits) (*otlpSpan, error) {
	src := sp
	if sp.kind == kindSkill && sp.owner != nil {
		src = sp.owner
	}
	if src.get(attrCampaign) == nil || (src != sp && tr.read[src]) {
		return src, nil
	}
	if tr.read == nil {
		tr.read = map[*otlpSpan]bool{}
	}
	tr.read[src] = true
	obj := map[string]any{"type": string(schemas.TypeCellStarted), "source": OTLPSource}
	if v := src.get(attrProject); v != nil {
		obj["project"] = jsonValue(v)
	}
	for _, f := range cellAttrs {
		if v := src.get(hf + f); v != nil {
			obj[f] = jsonValue(v)
		}
	}
	start := cmp.Or(sp.s.GetStartTimeUnixNano(), sp.s.GetEndTimeUnixNano())
	if start > 0 {
		obj["event_time"] = int64(start / 1e6)
	}
	ev, err := parseClaimed(obj, project, lim)
	if err != nil {
		return src, fmt.Errorf("its cell's cell_started, made from the cell attributes (harnessflow.campaign_id is set: "+
			"harnessflow.cell_id, .benchmark, .agent_model and .route are required, see docs/otlp.md): %w", err)
	}
	ev.Header().EventID = schemas.DeriveEventID(ev)
	for i, m := range tr.starts {
		if m.ev.Header().EventID == ev.Header().EventID {
			if ev.Header().EventTime.Before(m.ev.Header().EventTime) {
				tr.starts[i].ev = ev
			}
			return src, nil
		}
	}
	tr.starts = append(tr.starts, otlpMapped{ev: ev, span: src, trace: tr})
	return src, nil
}

// traceSet groups a request's spans by trace id, in the order the traces
// first appear. A span without a trace id is a trace of its own.
type traceSet struct {
	list []*otlpTrace
	byID map[string]*otlpTrace
}

func newTraceSet() *traceSet { return &traceSet{byID: map[string]*otlpTrace{}} }

func (ts *traceSet) of(sp *otlpSpan) *otlpTrace {
	id := string(sp.s.GetTraceId())
	if tr := ts.byID[id]; tr != nil && id != "" {
		return tr
	}
	tr := &otlpTrace{}
	ts.list = append(ts.list, tr)
	if id != "" {
		ts.byID[id] = tr
	}
	return tr
}

// otlpResult is what mapTraces made of a request.
type otlpResult struct {
	traces   []*otlpTrace
	events   []otlpMapped // the accepted traces' events, their cells' starts first
	spans    int          // every span of the request
	ignored  int          // spans the mapping does not map
	accepted int          // spans of the accepted traces
	rejected []string     // one message per refused span
}

// assemble sets events, accepted and rejected from the traces: an accepted
// trace's cell_started events (each id once in the request), then its
// spans' events; a refused trace's spans each as a rejection, the refused
// spans first with their reasons, then the others, refused with them.
func (res *otlpResult) assemble() {
	res.events, res.rejected, res.accepted = res.events[:0], res.rejected[:0], 0
	started := map[string]bool{}
	for _, tr := range res.traces {
		if tr.first != nil {
			for _, sp := range tr.spans {
				if why, own := tr.errs[sp]; own {
					res.rejected = append(res.rejected, fmt.Sprintf("%s: %s", sp.id(), why))
				}
			}
			for _, sp := range tr.spans {
				if _, own := tr.errs[sp]; !own {
					res.rejected = append(res.rejected, fmt.Sprintf("%s: refused with its trace, whose %s was refused", sp.id(), tr.first.id()))
				}
			}
			continue
		}
		for _, m := range tr.starts {
			if id := m.ev.Header().EventID; !started[id] {
				started[id] = true
				res.events = append(res.events, m)
			}
		}
		res.events = append(res.events, tr.events...)
		res.accepted += len(tr.spans)
	}
}

// openedCells remembers the ids of cell_started events made from trace
// attributes that the brokers acknowledged, so that the next traces of the
// cell do not send it again (the processors would skip the copies, the
// sink store them until ClickHouse merges). Bounded: the oldest id is
// forgotten first, and a forgotten cell's start is sent once more, which
// the processors skip as a redelivery.
type openedCells struct {
	mu   sync.Mutex
	ids  map[string]struct{}
	ring []string
	next int
}

// openedCellsSize bounds openedCells: the cells started recently enough
// that their next traces skip the start.
const openedCellsSize = 8192

func newOpenedCells(n int) *openedCells {
	return &openedCells{ids: make(map[string]struct{}, n), ring: make([]string, n)}
}

func (c *openedCells) has(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.ids[id]
	return ok
}

func (c *openedCells) add(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.ids[id]; ok {
		return
	}
	if old := c.ring[c.next]; old != "" {
		delete(c.ids, old)
	}
	c.ring[c.next] = id
	c.ids[id] = struct{}{}
	c.next = (c.next + 1) % len(c.ring)
}
