package chsink

import (
	"errors"
	"fmt"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/schemas"
)

// rejectedSource is the Source of the dead letters the sink writes.
const rejectedSource = "sink"

// rejection turns an undecodable message into a rejected_events row: stage
// decode, the reason code from err, the payload cut at Config.PayloadCap, the
// message's time (now when it has none), and an event id from the message's
// coordinates ("sink-decode:<topic>:<partition>:<offset>"), so a message read
// again after a restart yields the same row. The message names the entity
// of what the payload's readable prefix holds ("task t-1 attempt 2 (cell
// c-3): ..."; schemas.NewRejected, PayloadEntity).
func (s *Sink) rejection(m kafka.Message, err error) *schemas.Rejected {
	code := schemas.CodeMalformed
	var fe *schemas.FieldError
	switch {
	case errors.As(err, &fe) && fe.Code != "":
		code = fe.Code
	case errors.Is(err, schemas.ErrUnknownFingerprint):
		code = schemas.CodeUnknownFingerprint
	case errors.Is(err, schemas.ErrUnknownType):
		code = schemas.CodeUnknownType
	}
	msg := err.Error()
	if code == schemas.CodeSchemaRegistry {
		msg += " (start the sink with --schema-registry)"
	}
	rec := schemas.NewRejected(rejectedSource, schemas.StageDecode, code, msg, schemas.Origin{
		Topic: m.Topic, Partition: int32(m.Partition), Offset: m.Offset, Time: m.Time, Payload: m.Value,
	}, s.cfg.PayloadCap)
	rec.EventID = fmt.Sprintf("sink-decode:%s:%d:%d", m.Topic, m.Partition, m.Offset)
	return rec
}
