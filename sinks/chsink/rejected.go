package chsink

import (
	"errors"
	"fmt"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/infra/chddl"
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

// ReasonLateBeyondWindow is the reason code of the dead letter of an event
// the processors refuse as too late to change the derived figures; the
// views leave out the events so refused (infra/chddl/0009_natural_keys.sql)
// and cell_scores is recomputed without them (refusedAttempts).
const ReasonLateBeyondWindow = "late_beyond_window"

// refusedEvent decodes the event a dead letter refuses from its payload
// (the refused message's bytes, Avro single-object): nil when the payload
// does not decode (a decode failure, a payload cut at the processors'
// DLQPayloadCap, Confluent framing, which needs the schema registry).
func refusedEvent(e *schemas.Rejected) schemas.Event {
	if len(e.Payload) == 0 || schemas.IsConfluent(e.Payload) {
		return nil
	}
	ev, err := schemas.Decode(e.Payload)
	if err != nil {
		return nil
	}
	return ev
}

// refusedEventID is the event id of the event a dead letter refuses
// (rejected_events.source_event_id): its event_id is derived from that id
// (processors/message.go) and cannot be read back, so the payload is
// decoded. "" when it does not decode.
func refusedEventID(e *schemas.Rejected) string {
	if ev := refusedEvent(e); ev != nil {
		return ev.Header().EventID
	}
	return ""
}

// refusedAttempts returns, for the rejected_events rows of a batch, the
// task attempts refused as late_beyond_window whose project is the dead
// letter's: their cells' cell_scores summaries are recomputed once the
// dead letters are inserted, as after an attempt, so that they leave the
// refused attempts out whichever arrived first.
func refusedAttempts(rows []row) []row {
	var out []row
	for _, r := range rows {
		rec, ok := r.ev.(*schemas.Rejected)
		if !ok || rec.ReasonCode != ReasonLateBeyondWindow {
			continue
		}
		if a, ok := refusedEvent(rec).(*schemas.TaskAttempt); ok && a.Project == rec.Project {
			out = append(out, row{ev: a, m: r.m})
		}
	}
	return out
}

// addRefusedChecks gives each part the verification of its cells' refused
// attempts (rows, from refusedAttempts): chddl.VerifyCells reports a cell
// whose dead letters rejected_events, as read, does not hold yet.
func addRefusedChecks(parts []*part, rows []row) {
	at := map[chddl.CellKey]int{}
	byProject := map[string]*part{}
	for _, p := range parts {
		byProject[p.project] = p
	}
	for _, r := range rows {
		a := r.ev.(*schemas.TaskAttempt)
		p := byProject[a.Project]
		if p == nil {
			continue
		}
		k := chddl.CellKey{Project: a.Project, CellID: a.CellID}
		i, ok := at[k]
		if !ok {
			i = len(p.checks)
			at[k] = i
			p.checks = append(p.checks, chddl.CellCheck{Key: k})
		}
		if ids := p.checks[i].RefusedIDs; len(ids) < maxCheckIDs {
			p.checks[i].RefusedIDs = append(ids, a.EventID)
		}
	}
}
