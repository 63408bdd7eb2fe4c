package producers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/harnessflow/harnessflow/schemas"
)

// item is one encoded event in the buffer, or a flush marker.
type item struct {
	ev     schemas.Event
	buf    *[]byte // key then value
	keyLen int
	topic  string
	// at is the Kafka message timestamp: when Emit accepted the event, kept
	// across retries (see submit).
	at    time.Time
	flush chan struct{} // non-nil: a Flush marker, nothing else is set
}

func (it *item) size() int64 { return int64(len(*it.buf)) + batchOverhead }

// keyField names the field an event type is keyed by.
func keyField(t schemas.Type) string {
	switch t {
	case schemas.TypeCampaignDeclared:
		return "campaign_id"
	case schemas.TypeRejected:
		return "source_topic"
	case schemas.TypeCheckpointPublished:
		return "model_version"
	}
	return "cell_id"
}

// prepare fills, validates and encodes ev into a pooled buffer. ctx bounds
// a schema registry's answer (WithSchemaRegistry).
func (p *Producer) prepare(ctx context.Context, ev schemas.Event) (item, error) {
	if ev == nil {
		return item{}, &InvalidEventError{Err: &schemas.FieldError{Code: schemas.CodeMissingField, Msg: "nil event"}}
	}
	t := ev.Type()
	h := ev.Header()
	if h.Project == "" {
		h.Project = p.cfg.Project
	}
	if h.Source == "" {
		h.Source = p.cfg.Source
	}
	if h.EventTime.IsZero() {
		h.EventTime = p.now().UTC().Truncate(time.Millisecond)
	}
	if h.EventID == "" {
		h.EventID = schemas.DeriveEventID(ev)
	}
	invalid := func(err error) (item, error) {
		return item{}, &InvalidEventError{Type: t, EventID: h.EventID, Err: err}
	}
	if !p.internal {
		if err := CheckProducerType(t); err != nil {
			return invalid(err)
		}
	}
	topic := schemas.TopicFor(t)
	if topic == "" {
		return invalid(&schemas.FieldError{Type: t, Field: "type", Code: schemas.CodeUnknownType, Msg: "no topic for this event type"})
	}
	key := ev.PartitionKey()
	if key == "" {
		f := keyField(t)
		return invalid(&schemas.FieldError{Type: t, Field: f, Code: schemas.CodeMissingField, Msg: f + " is required (it is the partition key)"})
	}
	if err := schemas.Validate(ev, p.cfg.Limits); err != nil {
		return invalid(err)
	}
	buf := p.pool.Get().(*[]byte)
	b := append((*buf)[:0], key...)
	b, err := p.encode(ctx, b, ev)
	if err != nil {
		p.pool.Put(buf)
		var fe *schemas.FieldError
		if p.registry != nil && !errors.As(err, &fe) {
			// Not the event's fault: the registry did not answer, or
			// refused the schema.
			return item{}, fmt.Errorf("%w: %s event %s: %w", ErrSchemaRegistry, t, h.EventID, err)
		}
		return invalid(err)
	}
	*buf = b
	if n := len(b) - len(key); n > p.cfg.Limits.Event {
		p.release(buf)
		return invalid(&schemas.FieldError{Type: t, Code: schemas.CodeTooLarge, Msg: fmt.Sprintf("encoded event is %d bytes, over the %d-byte limit", n, p.cfg.Limits.Event)})
	}
	if int64(len(b))+batchOverhead > p.cfg.BatchBytes {
		p.release(buf)
		return invalid(&schemas.FieldError{Type: t, Code: schemas.CodeTooLarge, Msg: fmt.Sprintf("encoded event is %d bytes, over the producer's %d-byte batch limit", len(b), p.cfg.BatchBytes)})
	}
	return item{ev: ev, buf: buf, keyLen: len(key), topic: topic, at: p.now()}, nil
}

// encode appends ev's encoding to dst: the Confluent wire format with a
// schema registry (WithSchemaRegistry), Avro single-object otherwise.
func (p *Producer) encode(ctx context.Context, dst []byte, ev schemas.Event) ([]byte, error) {
	if p.registry != nil {
		return p.registry.AppendEncodeConfluent(ctx, dst, ev)
	}
	return schemas.AppendEncode(dst, ev)
}

// release returns a buffer to the pool; nil is ignored. Buffers that grew very
// large are dropped so that one huge event does not pin memory.
func (p *Producer) release(buf *[]byte) {
	if buf == nil || cap(*buf) > 64<<10 {
		return
	}
	p.pool.Put(buf)
}
