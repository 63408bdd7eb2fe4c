package schemas

import "time"

// MaxRejectedMessage caps a dead letter's Message (bytes).
const MaxRejectedMessage = 4096

// Origin is where an offending message was read: its coordinates, its time
// and its bytes, and its project where that is known.
type Origin struct {
	Topic     string
	Partition int32
	Offset    int64
	Time      time.Time
	Payload   []byte
	Project   string
}

// NewRejected returns the dead letter of the message at o, written by source
// (the stage's name in the event's Source field) at stage for reason code
// (the DLQ's codes, DESIGN.md §3) with message saying why in words (cut at
// MaxRejectedMessage bytes). The payload is copied and cut at payloadCap
// bytes (0: whole). EventTime is o.Time in UTC (now when zero); EventID
// derives from the coordinates (DeriveEventID), so a message read again
// after a restart or a redelivery yields the same dead letter.
func NewRejected(source, stage, code, message string, o Origin, payloadCap int) *Rejected {
	payload := o.Payload
	if payloadCap > 0 && len(payload) > payloadCap {
		payload = payload[:payloadCap]
	}
	if len(message) > MaxRejectedMessage {
		message = message[:MaxRejectedMessage]
	}
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
