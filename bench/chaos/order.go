package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/processors"
	"github.com/harnessflow/harnessflow/producers/gen"
	"github.com/harnessflow/harnessflow/schemas"
)

// Ordering describes how the raw log's order of each cell's events differs
// from the order the campaign produced them in. It is a diagnostic, not an
// assertion: producer retries can reorder a cell's events, and the
// processors merge a cell's topics by message timestamp.
type Ordering struct {
	// LogInversions counts events whose first copy sits at a lower offset
	// than the first copy of an event of the same cell, on the same topic,
	// produced before it.
	LogInversions int `json:"log_inversions"`
	// TimeInversions counts events whose first copy has an earlier message
	// timestamp than an event of the same cell (any raw cell topic)
	// produced before it: the merge sees them in another order.
	TimeInversions int `json:"time_inversions"`
	// TimeTies counts events whose first copy has the same timestamp as an
	// event of the same cell produced before it on a topic the merge ranks
	// later (processors.CellTopics order breaks timestamp ties).
	TimeTies int `json:"time_ties"`
	// Examples name a few inverted events.
	Examples []string `json:"examples,omitempty"`
}

type firstCopy struct {
	ts     time.Time
	offset int64
}

// measureOrdering reads the raw cell topics and compares their order with
// the campaign's production order.
func measureOrdering(ctx context.Context, brokers []string, c *gen.Campaign) (Ordering, error) {
	first := map[string]firstCopy{}
	err := readTopics(ctx, brokers, func(m kafka.Message, ev schemas.Event) {
		id := ev.Header().EventID
		if f, ok := first[id]; !ok || m.Offset < f.offset {
			first[id] = firstCopy{ts: m.Time, offset: m.Offset}
		}
	}, processors.CellTopics...)
	if err != nil {
		return Ordering{}, err
	}
	rank := map[string]int{}
	for i, t := range processors.CellTopics {
		rank[t] = i
	}
	type seen struct {
		maxTS     time.Time
		maxTSRank int
		maxOffset map[string]int64
	}
	cells := map[string]*seen{}
	var o Ordering
	example := func(format string, args ...any) {
		if len(o.Examples) < 5 {
			o.Examples = append(o.Examples, fmt.Sprintf(format, args...))
		}
	}
	for _, r := range c.Records {
		if r.Topic == schemas.TopicCampaigns {
			continue
		}
		f, ok := first[r.Event.Header().EventID]
		if !ok {
			continue // lost: the tables' checks count it
		}
		key := r.Event.PartitionKey()
		s := cells[key]
		if s == nil {
			s = &seen{maxOffset: map[string]int64{}}
			cells[key] = s
		}
		if mo, ok := s.maxOffset[r.Topic]; ok && f.offset < mo {
			o.LogInversions++
			example("%s %s at offset %d, after offset %d of an earlier event", r.Topic, r.Event.Header().EventID, f.offset, mo)
		}
		switch {
		case !s.maxTS.IsZero() && f.ts.Before(s.maxTS):
			o.TimeInversions++
			example("%s %s stamped %s, %v before an earlier event of its cell", r.Topic, r.Event.Header().EventID, f.ts.Format(time.RFC3339Nano), s.maxTS.Sub(f.ts))
		case f.ts.Equal(s.maxTS) && rank[r.Topic] < s.maxTSRank:
			o.TimeTies++
		}
		if f.ts.After(s.maxTS) || (f.ts.Equal(s.maxTS) && rank[r.Topic] > s.maxTSRank) {
			s.maxTS, s.maxTSRank = f.ts, rank[r.Topic]
		}
		if mo, ok := s.maxOffset[r.Topic]; !ok || f.offset > mo {
			s.maxOffset[r.Topic] = f.offset
		}
	}
	return o, nil
}
