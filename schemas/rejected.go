package schemas

import (
	"time"
	"unicode/utf8"
)

// MaxRejectedMessage caps a dead letter's Message (bytes).
const MaxRejectedMessage = 4096

// Origin is where an offending message was read: its coordinates, its time
// and its bytes, its project where that is known, and the event it decoded
// to, if any.
type Origin struct {
	Topic     string
	Partition int32
	Offset    int64
	Time      time.Time
	Payload   []byte
	Project   string
	// Event is the offending event when the message decoded (nil when it
	// did not): NewRejected names its entity in the message. Without it
	// the entity is named from Payload, best-effort (PayloadEntity).
	Event Event
}

// NewRejected returns the dead letter of the message at o, written by source
// (the stage's name in the event's Source field) at stage for reason code
// (the DLQ's codes, docs/design.md §3) with message saying why in words, prefixed
// with the entity the message is about ("update u-17 (cell c-3): ..." from
// o.Event, else from o.Topic and o.Payload by PayloadEntity, else no prefix)
// and cut at MaxRejectedMessage bytes (on a rune boundary). The payload is
// copied and cut at payloadCap bytes (0: whole). EventTime is o.Time in UTC
// (now when zero); EventID derives from the coordinates (DeriveEventID), so
// a message read again after a restart or a redelivery yields the same dead
// letter.
func NewRejected(source, stage, code, message string, o Origin, payloadCap int) *Rejected {
	payload := o.Payload
	if payloadCap > 0 && len(payload) > payloadCap {
		payload = payload[:payloadCap]
	}
	name := Entity(o.Event)
	if o.Event == nil {
		name = PayloadEntity(o.Topic, o.Payload)
	}
	message = cutUTF8(WithEntity(name, message), MaxRejectedMessage)
	at := o.Time
	if at.IsZero() {
		at = time.Now().Truncate(time.Millisecond)
	}
	rec := &Rejected{
		Envelope:    Envelope{EventTime: at.UTC(), Source: source, Project: o.Project},
		Stage:       stage,
		ReasonCode:  code,
		Message:     message,
		SourceTopic: o.Topic,
		Partition:   o.Partition,
		Offset:      o.Offset,
		Payload:     append([]byte(nil), payload...),
	}
	rec.EventID = DeriveEventID(rec)
	return rec
}

// cutUTF8 cuts s at n bytes, back to a rune boundary when the cut splits
// one (a dead letter's message stays valid UTF-8).
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && i > n-utf8.UTFMax && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}
