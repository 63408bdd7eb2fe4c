package trainer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/schemas"
)

// rejectUndecodable skips m, a message that did not decode: it logs it and
// dead-letters it (stage decode).
func (t *Trainer) rejectUndecodable(ctx context.Context, m sampleMsg) error {
	t.log.Error().Err(m.err).Str("topic", t.cfg.Topic).Int32("partition", m.part).Int64("offset", m.off).
		Msg("skipping undecodable sample: it is consumed, not retried, and dead-lettered in hf.dlq; fix its producer and re-send it")
	code := schemas.CodeMalformed
	var fe *schemas.FieldError
	if errors.As(m.err, &fe) && fe.Code != "" {
		code = fe.Code
	}
	return t.deadLetter(ctx, m, schemas.StageDecode, code, m.err.Error(), m.raw)
}

// rejectInvalid skips m, a sample that checkSample found unfit (fe says
// why): it counts, logs and dead-letters it (stage syntax) with the sample
// as read.
func (t *Trainer) rejectInvalid(ctx context.Context, m sampleMsg, fe *schemas.FieldError) error {
	t.metrics.invalid.WithLabelValues(fe.Code).Inc()
	t.log.Error().Err(fe).Str("reason", fe.Code).Str("topic", t.cfg.Topic).Int32("partition", m.part).Int64("offset", m.off).
		Str("sample_id", m.s.SampleID).Msg("skipping invalid sample: it is consumed, not retried, and dead-lettered in hf.dlq; fix its producer and re-send it")
	raw, _ := schemas.Encode(m.s) // what was read, for the record
	return t.deadLetter(ctx, m, schemas.StageSyntax, fe.Code, fe.Error(), raw)
}

// deadLetter writes the rejected record of a sample the trainer skips to
// hf.dlq and waits for its acknowledgement: the sample's offset is part of
// the next checkpoint, so a record not written now would never be. Its event
// id derives from the sample's coordinates, so a sample read again after a
// restart is dead-lettered again under the same id. The payload is cut at
// the default payload limit, the event time is now. The message names the
// sample ("sample s-9 (update u-17, cell c-3): ..."), from what was read of
// it when it did not decode (schemas.NewRejected).
func (t *Trainer) deadLetter(ctx context.Context, m sampleMsg, stage, code, msg string, payload []byte) error {
	o := schemas.Origin{Topic: t.cfg.Topic, Partition: m.part, Offset: m.off,
		Time: time.Now().UTC().Truncate(time.Millisecond), Payload: payload}
	if m.s != nil {
		o.Project, o.Event = m.s.Project, m.s // names the sample in the message
	}
	rec := schemas.NewRejected("trainer:"+t.cfg.Name, stage, code, msg, o, schemas.DefaultLimits().Payload)
	b, err := schemas.Encode(rec)
	if err == nil {
		// A stop arriving now does not cut the record short.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err = t.dlq.WriteMessages(wctx, kafka.Message{Key: []byte(rec.PartitionKey()), Value: b})
		cancel()
	}
	if err != nil {
		return fmt.Errorf("dead-letter %s/%d@%d (%s): %w", t.cfg.Topic, m.part, m.off, code, err)
	}
	return nil
}

// checkSample returns the first problem that makes s unfit to train on, or
// nil: a *schemas.FieldError whose Code (one of the DLQ's reason codes) is the
// reason. Decode does not apply schemas.Validate, and one effect that is NaN,
// infinite or far out of range makes the whole step's loss non-finite: the
// step fails with ErrDiverged, and after the restart the same sample fails it
// again, forever. It checks what the trainer reads of a sample, by the
// labeled_sample contract (schemas/fields.go): the id (dedup, held-out split,
// trainer_steps rows), the label, the effect and the harness version index
// (staleness, kept in checkpoints); a bad field the trainer does not read is
// no reason to lose the sample's training signal.
func checkSample(s *schemas.LabeledSample) *schemas.FieldError {
	bad := func(field, code, msg string) *schemas.FieldError {
		return &schemas.FieldError{Type: schemas.TypeLabeledSample, Field: field, Code: code, Msg: msg}
	}
	switch {
	case s.SampleID == "":
		return bad("sample_id", schemas.CodeMissingField, `required field "sample_id" is empty`)
	case LabelIndex(s.Label) < 0:
		return bad("label", schemas.CodeBadEnum, fmt.Sprintf("%q is not one of %s", s.Label, strings.Join(LabelNames[:], ", ")))
	case !(s.Effect >= -1 && s.Effect <= 1): // NaN fails both comparisons
		return bad("effect", schemas.CodeOutOfRange, strconv.FormatFloat(s.Effect, 'g', -1, 64)+" is outside [-1,1]")
	case s.HarnessVersionIndex < 0:
		return bad("harness_version_index", schemas.CodeOutOfRange, strconv.Itoa(int(s.HarnessVersionIndex))+" is negative")
	}
	return nil
}
