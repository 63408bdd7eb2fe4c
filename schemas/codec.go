package schemas

import (
	"encoding/binary"
	"fmt"
)

// Limits caps the sizes of text fields and whole events. A zero field means
// its default.
type Limits struct {
	// ArtifactContent caps one artifact's content (and a labeled sample's
	// query and update text). Default: 1 MiB.
	ArtifactContent int
	// TaskInput caps task_attempt.task_input. Default: 64 KiB.
	TaskInput int
	// Event caps one whole event: the JSON text in ParseJSON, the Avro
	// single-object encoding in Validate. Default: 4 MiB.
	Event int
	// Payload caps rejected.payload (the DLQ copy of a bad input).
	// Default: 64 KiB.
	Payload int
	// Name caps every id and name field (caps.go lists them). Default:
	// DefaultNameCap (256 bytes).
	Name int
}

// DefaultLimits returns the default caps.
func DefaultLimits() Limits {
	return Limits{ArtifactContent: 1 << 20, TaskInput: 64 << 10, Event: 4 << 20, Payload: 64 << 10, Name: DefaultNameCap}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.ArtifactContent <= 0 {
		l.ArtifactContent = d.ArtifactContent
	}
	if l.TaskInput <= 0 {
		l.TaskInput = d.TaskInput
	}
	if l.Event <= 0 {
		l.Event = d.Event
	}
	if l.Payload <= 0 {
		l.Payload = d.Payload
	}
	if l.Name <= 0 {
		l.Name = d.Name
	}
	return l
}

// Encode returns the single-object Avro encoding of ev with its type's
// current schema: 0xC3 0x01, the 8-byte little-endian fingerprint, the Avro
// binary body. An empty EventID is written as DeriveEventID(ev) (ev is not
// modified). Encode checks only what Avro itself needs (enum symbols); call
// Validate for the full rules. Safe for concurrent use.
func Encode(ev Event) ([]byte, error) { return AppendEncode(make([]byte, 0, 256), ev) }

// AppendEncode appends the single-object Avro encoding of ev to dst and
// returns the extended slice; on error it returns dst unchanged in length.
func AppendEncode(dst []byte, ev Event) ([]byte, error) {
	ti, err := lookup(ev)
	if err != nil {
		return dst, err
	}
	n := len(dst)
	dst = append(dst, SingleObjectMagic[0], SingleObjectMagic[1])
	dst = binary.LittleEndian.AppendUint64(dst, ti.current.fp)
	out, err := appendBody(dst, ti, ev)
	if err != nil {
		return out[:n], err
	}
	return out, nil
}

// Decode decodes single-object Avro bytes into a typed event. The
// fingerprint selects the writer schema among every compiled-in version
// (Versions); bytes of an older version are resolved to the current struct.
// Errors: a *FieldError wrapping ErrMalformed (short, truncated, trailing or
// invalid bytes) or ErrUnknownFingerprint. Decode never panics. It does not
// apply Validate. Safe for concurrent use.
func Decode(b []byte) (Event, error) {
	if len(b) < 10 || b[0] != SingleObjectMagic[0] || b[1] != SingleObjectMagic[1] {
		return nil, &FieldError{Code: CodeMalformed, Msg: fmt.Sprintf("not Avro single-object encoded (%d bytes, want 0xC3 0x01 + 8-byte fingerprint + body)", len(b))}
	}
	fp := binary.LittleEndian.Uint64(b[2:10])
	sv := byFingerprint[fp]
	if sv == nil {
		return nil, &FieldError{Code: CodeUnknownFingerprint, Msg: fmt.Sprintf("schema fingerprint %016x is not a known schema", fp)}
	}
	return sv.decode(b[10:])
}

func (sv *schemaVersion) decode(body []byte) (Event, error) {
	if sv.current {
		return decodeBody(sv.info, body)
	}
	return decodeWithCodec(sv.info, sv.codec, body)
}
