package processors

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/schemas"
)

// inMsg is one input message, decoded once by its fetcher.
type inMsg struct {
	topic     string
	partition int
	offset    int64
	ts        time.Time
	arrived   time.Time // when the fetch that read it returned (wall clock)
	key       []byte
	value     []byte
	// ev is the decoded event (nil when decoding failed or the message is
	// over Limits.Event); rej is the decode- or limit-stage rejection.
	ev  schemas.Event
	rej *rejection
	// single is ev in Avro single-object encoding when value is in another
	// framing (Confluent): what stage A writes to hf.outcomes, which holds
	// single-object events only (outcomeValue). Nil otherwise.
	single []byte
	// emit: the message is at or past its stream's committed offset when
	// merged, so what it derives was never acknowledged and committed
	// (false while the state is rebuilt from the log).
	emit bool
	// sub is the event's index in a batched hf.outcomes record (stage B),
	// and more says events of the same record follow it: the record's
	// offset is consumed only with its last event.
	sub  int
	more bool
}

// decodeMsg fills m.ev or m.rej from m.value: Avro single-object, or
// Confluent-framed through dec's schema registry (dec nil: none, such a
// message is dead-lettered decode/schema_registry). When the registry could
// not be asked it leaves m as it was and returns that error (wrapping
// schemas.ErrRegistryUnavailable): the message is not bad, and the caller
// reads it again later rather than dead-letter it.
func decodeMsg(ctx context.Context, m *inMsg, lim schemas.Limits, dec *schemas.Decoder) error {
	if len(m.value) > lim.Event {
		m.rej = reject(schemas.StageLimit, CodePayloadTooLarge, "message of %d bytes is over the %d-byte event limit", len(m.value), lim.Event)
		return nil
	}
	var ev schemas.Event
	var err error
	if schemas.IsConfluent(m.value) {
		ev, err = dec.Decode(ctx, m.value)
		if errors.Is(err, schemas.ErrRegistryUnavailable) {
			return err
		}
		if ev != nil {
			single, eerr := schemas.Encode(ev)
			if eerr != nil {
				// An event the decoder built always encodes; if not, the
				// bytes are as unusable as malformed ones.
				m.rej = reject(schemas.StageDecode, schemas.CodeMalformed, "Confluent-framed event does not re-encode: %v", eerr)
				return nil
			}
			m.single = single
		}
	} else {
		ev, err = schemas.Decode(m.value)
	}
	switch {
	case ev == nil && err == nil:
		m.rej = reject(schemas.StageDecode, schemas.CodeMalformed, "empty event")
	case ev == nil:
		m.rej = decodeRejection(err)
	case err != nil:
		// A decoder that also validates: keep decode-stage codes apart.
		if errors.Is(err, schemas.ErrMalformed) || errors.Is(err, schemas.ErrUnknownFingerprint) || errors.Is(err, schemas.ErrUnknownType) {
			m.rej = decodeRejection(err)
		} else {
			m.ev, m.rej = ev, syntaxRejection(err)
		}
	default:
		m.ev = ev
	}
	return nil
}

// outcomeValue is what stage A writes to hf.outcomes for an admitted m: its
// value, or its single-object re-encoding when the value was
// Confluent-framed, so that stage B (and any reader of hf.outcomes) needs no
// schema registry.
func (m *inMsg) outcomeValue() []byte {
	if m.single != nil {
		return m.single
	}
	return m.value
}

// sink collects the outputs of a batch, in order.
type sink struct {
	msgs []kafka.Message
	// admitted are the events written to hf.outcomes, for the evCache.
	admitted []evEntry
	// counts by output kind, for metrics and logs.
	outcomes, rejected, samples, rounds int
	// agedOut counts the cells and pairers aged out (Config.CellIdle),
	// logged once per batch.
	agedOut int
	// open indexes opens by pairing key: the hf.outcomes record each key is
	// filling in this batch (addOutcome).
	open  map[string]int
	opens []openOutcome
	// perRecord is the mean events per batched hf.outcomes record of the
	// last batch that had any, the size guess of a new record's buffer.
	perRecord int
}

func (s *sink) reset() {
	for i := range s.msgs {
		s.msgs[i] = kafka.Message{}
	}
	s.msgs = s.msgs[:0]
	clear(s.admitted)
	s.admitted = s.admitted[:0]
	if len(s.opens) > 0 {
		n := 0
		for _, o := range s.opens {
			n += o.n
		}
		s.perRecord = n / len(s.opens)
	}
	s.outcomes, s.rejected, s.samples, s.rounds, s.agedOut = 0, 0, 0, 0, 0
	clear(s.open)
	s.opens = s.opens[:0]
}

// deadLetterSource is the envelope source of the processors' dead letters.
const deadLetterSource = "harnessflow-process"

// deadLetter builds the dead letter of m: a schemas.Rejected whose event_id
// is derived from the event it is about, its stage and its reason code
// (eventDeadLetterID) when the input decoded to an event with an id, else
// from its project and source coordinates (deadLetterID). Either way a
// replay or a redelivery yields the same id and no other project's id can
// equal it; an event resent as a new message (a retried export, a
// producer's resend) is dead-lettered with the same id again, so
// rejected_events keeps one row of it. Its event_time is the message's
// timestamp (never the wall clock).
func deadLetter(m *inMsg, r *rejection, payloadCap int) (kafka.Message, error) {
	o := schemas.Origin{Topic: m.topic, Partition: int32(m.partition), Offset: m.offset, Time: m.ts, Payload: m.value}
	if m.ev != nil {
		o.Event = m.ev
	}
	if r.ev != nil {
		o.Event = r.ev
	}
	if o.Event != nil {
		o.Project = o.Event.Header().Project
	}
	rec := schemas.NewRejected(deadLetterSource, r.stage, r.code, r.msg, o, payloadCap)
	switch {
	case o.Event != nil && o.Event.Header().EventID != "":
		rec.EventID = eventDeadLetterID(o.Project, o.Event.Header().EventID, r.stage, r.code)
	default:
		if id := deadLetterID(o.Project, m.topic, m.partition, m.offset); id != "" {
			rec.EventID = id
		}
		if m.sub > 0 {
			// Events of one batched hf.outcomes record share its coordinates.
			rec.EventID = subID(rec.EventID, m.sub)
		}
	}
	// The message's timestamp even when it is zero (NewRejected would take
	// the wall clock). The id does not hash the time.
	rec.EventTime = m.ts.UTC()
	b, err := schemas.Encode(rec)
	if err != nil {
		return kafka.Message{}, err
	}
	return kafka.Message{Topic: schemas.TopicDLQ, Key: []byte(rec.PartitionKey()), Value: b, Time: m.ts}, nil
}

// deadLetterID is the event_id of a dead letter of project at the source
// coordinates: the hex of the first 16 bytes of SHA-256 over the
// length-prefixed parts "rejected", project, topic, partition, offset, the
// layout of schemas.DeriveEventID for a project-scoped type. "" for no
// project and for schemas.DefaultProject: the dead letter keeps the id
// NewRejected derives from the coordinates alone, the id earlier versions
// gave it (a replay of a single-project deployment adds no duplicate rows),
// which differs from every project's (the parts are length-prefixed).
// Deterministic: a redelivery or replay gets the same id.
func deadLetterID(project, topic string, partition int, offset int64) string {
	if project == "" || project == schemas.DefaultProject {
		return ""
	}
	var buf [256]byte
	b := appendIDPart(buf[:0], string(schemas.TypeRejected))
	b = appendIDPart(b, project)
	b = appendIDPart(b, topic)
	b = appendIDPart(b, strconv.Itoa(partition))
	b = appendIDPart(b, strconv.FormatInt(offset, 10))
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:16])
}

// eventDeadLetterID is the event_id of the dead letter of the event with
// id eventID of project, refused at stage with code: the hex of the first
// 16 bytes of SHA-256 over the length-prefixed parts "rejected", project,
// "event", eventID, stage, code. It hashes no coordinates, so every copy of
// one event refused for one reason (a redelivery, a replay, the same event
// sent twice) has one dead-letter id, and the ReplacingMergeTree
// rejected_events keeps one row of it; the "event" part keeps it apart from
// every deadLetterID.
func eventDeadLetterID(project, eventID, stage, code string) string {
	var buf [256]byte
	b := appendIDPart(buf[:0], string(schemas.TypeRejected))
	b = appendIDPart(b, project)
	b = appendIDPart(b, "event")
	b = appendIDPart(b, eventID)
	b = appendIDPart(b, stage)
	b = appendIDPart(b, code)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:16])
}

func appendIDPart(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// subID is the dead-letter id of the sub-th event (sub > 0) of a batched
// hf.outcomes record whose coordinates derive id: deterministic, and apart
// from the first event's.
func subID(id string, sub int) string {
	h := sha256.Sum256([]byte(id + "/" + strconv.Itoa(sub)))
	return hex.EncodeToString(h[:16])
}
