package chsink

import (
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/schemas"
)

// rejection turns an undecodable message into a rejected_events row.
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
	payload := m.Value
	if len(payload) > s.cfg.PayloadCap {
		payload = payload[:s.cfg.PayloadCap]
	}
	ts := m.Time
	if ts.IsZero() {
		ts = time.Now()
	}
	msg := err.Error()
	if len(msg) > 4096 {
		msg = msg[:4096]
	}
	return &schemas.Rejected{
		Envelope: schemas.Envelope{
			EventID:   fmt.Sprintf("sink-decode:%s:%d:%d", m.Topic, m.Partition, m.Offset),
			EventTime: ts.UTC(),
			Source:    "sink",
		},
		Stage: schemas.StageDecode, ReasonCode: code, Message: msg,
		SourceTopic: m.Topic, Partition: int32(m.Partition), Offset: m.Offset,
		Payload: append([]byte(nil), payload...),
	}
}
