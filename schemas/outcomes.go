package schemas

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// OutcomeBatchMagic starts a batched record of hf.outcomes, the topic the
// processors' stage A writes the events it admitted to, keyed by pairing
// key, for stage B. A batched record packs the admitted events of one
// pairing key from one flush, in order:
//
//	"HFB\x01"                                 4 bytes: 'H' 'F' 'B' 0x01
//	then, per event, until the value ends:
//	  uvarint(len(event))                     unsigned LEB128 (encoding/binary.AppendUvarint)
//	  varint(timestamp)                       zig-zag LEB128 of the event's raw message
//	                                          timestamp, unix milliseconds (encoding/binary.AppendVarint)
//	  event                                   the event, Avro single-object encoded
//	                                          (0xC3 0x01, schema fingerprint, body)
//
// A value of hf.outcomes that does not start with the marker is one event,
// single-object encoded (records of processors run with an outcome batch
// of 1, or of versions before batching). Single-object and Confluent values
// never start with 'H'.
const OutcomeBatchMagic = "HFB\x01"

// ErrOutcomeFraming: a batched hf.outcomes value does not parse.
var ErrOutcomeFraming = errors.New("hf.outcomes batch framing")

// IsOutcomeBatch reports whether v is a batched hf.outcomes value.
func IsOutcomeBatch(v []byte) bool { return bytes.HasPrefix(v, []byte(OutcomeBatchMagic)) }

// AppendOutcome appends one event with its timestamp to a batched value
// (which must already start with OutcomeBatchMagic).
func AppendOutcome(dst []byte, ts time.Time, ev []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(ev)))
	dst = binary.AppendVarint(dst, ts.UnixMilli())
	return append(dst, ev...)
}

// SplitOutcomes calls fn for each event of a batched value, in order, with
// its timestamp; the event slices alias v. It returns an error wrapping
// ErrOutcomeFraming, naming the byte, when v does not parse (fn may have
// been called for the events before the damage) or holds no event.
func SplitOutcomes(v []byte, fn func(ts time.Time, ev []byte)) error {
	if !IsOutcomeBatch(v) {
		return fmt.Errorf("%w: no batch marker", ErrOutcomeFraming)
	}
	rest := v[len(OutcomeBatchMagic):]
	if len(rest) == 0 {
		return fmt.Errorf("%w: no event", ErrOutcomeFraming)
	}
	for at := len(OutcomeBatchMagic); len(rest) > 0; at = len(v) - len(rest) {
		n, k := binary.Uvarint(rest)
		if k <= 0 {
			return fmt.Errorf("%w: bad length at byte %d", ErrOutcomeFraming, at)
		}
		rest = rest[k:]
		ms, k := binary.Varint(rest)
		if k <= 0 {
			return fmt.Errorf("%w: bad timestamp at byte %d", ErrOutcomeFraming, at)
		}
		rest = rest[k:]
		if n > uint64(len(rest)) {
			return fmt.Errorf("%w: event of %d bytes at byte %d overruns the record", ErrOutcomeFraming, n, at)
		}
		fn(time.UnixMilli(ms), rest[:n:n])
		rest = rest[n:]
	}
	return nil
}
