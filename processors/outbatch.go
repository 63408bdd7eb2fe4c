package processors

import (
	"encoding/binary"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/schemas"
)

// An hf.outcomes record packs the admitted events of one pairing key from one
// flush of stage A, in their merged order: the Kafka work of both stages is
// then paid per record, not per event (bench process --relay-batch measures
// what that buys). The framing (schemas.OutcomeBatchMagic, documented there
// and in docs/design.md) is "HFB\x01" then, per event,
// uvarint(len(event)) varint(timestamp, unix ms) event, where event is the
// admitted event single-object encoded (the raw message's value, or its
// re-encoding when that was Confluent-framed) and the timestamp is the raw
// message's. Stage B reads a record whose value does not start with the
// marker as one event (records written with Config.OutcomeBatch 1, or by an
// earlier version).
var outcomeBatchMagic = []byte(schemas.OutcomeBatchMagic)

// outcomeBatchMaxBytes bounds a batched record's value; an event larger than
// that goes in a record of its own.
const outcomeBatchMaxBytes = 1 << 20

// errOutcomeFraming is a batched hf.outcomes record that does not parse.
var errOutcomeFraming = schemas.ErrOutcomeFraming

// isOutcomeBatch reports whether v is a batched hf.outcomes value.
func isOutcomeBatch(v []byte) bool { return schemas.IsOutcomeBatch(v) }

// appendOutcome appends one event to a batched value (which must already
// start with outcomeBatchMagic).
func appendOutcome(dst []byte, ts time.Time, ev []byte) []byte {
	return schemas.AppendOutcome(dst, ts, ev)
}

// splitOutcomes calls fn for each event of a batched value, in order; the
// event slices alias v. It returns an error wrapping errOutcomeFraming when v
// does not parse (fn may have been called for the events before the damage).
func splitOutcomes(v []byte, fn func(ts time.Time, ev []byte)) error {
	return schemas.SplitOutcomes(v, fn)
}

// openOutcome is the batched record a flush is filling for one pairing key.
type openOutcome struct {
	idx int // in sink.msgs
	n   int // events in it
}

// addOutcome adds an admitted event to the batch's hf.outcomes output: to the
// record its key already has in this flush while that holds fewer than limit
// events and stays within outcomeBatchMaxBytes, else to a new record. limit 1
// writes the event as a record of its own, unframed.
//
// A new record's buffer is sized for the mean events per record of the last
// batch (perRecord), so that records rarely grow by copying; the key map is
// only written when a record opens (an update of a []byte-keyed map entry
// would allocate the key string on every event).
func (s *sink) addOutcome(key []byte, value []byte, ts time.Time, limit int) {
	s.outcomes++
	if limit <= 1 {
		s.msgs = append(s.msgs, kafka.Message{Topic: schemas.TopicOutcomes, Key: key, Value: value, Time: ts})
		return
	}
	if i, ok := s.open[string(key)]; ok {
		o := &s.opens[i]
		if o.n < limit && len(s.msgs[o.idx].Value)+len(value)+2*binary.MaxVarintLen64 <= outcomeBatchMaxBytes {
			m := &s.msgs[o.idx]
			m.Value = appendOutcome(m.Value, ts, value)
			if ts.After(m.Time) {
				m.Time = ts
			}
			o.n++
			return
		}
	}
	if s.open == nil {
		s.open = map[string]int{}
	}
	per := min(max(s.perRecord+s.perRecord/4+1, 8), limit)
	v := make([]byte, 0, min(len(outcomeBatchMagic)+per*(len(value)+2*binary.MaxVarintLen64), outcomeBatchMaxBytes))
	v = appendOutcome(append(v, outcomeBatchMagic...), ts, value)
	s.msgs = append(s.msgs, kafka.Message{Topic: schemas.TopicOutcomes, Key: key, Value: v, Time: ts})
	s.opens = append(s.opens, openOutcome{idx: len(s.msgs) - 1, n: 1})
	s.open[string(key)] = len(s.opens) - 1
}
