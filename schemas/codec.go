package schemas

// TEMPORARY STUB: this file fixes the codec API so that other packages can build
// against it; the schemas owner replaces the bodies with the goavro-based
// single-object encoding, Confluent framing, strict JSON parsing and validation.

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Limits caps the sizes of text fields and whole events.
type Limits struct {
	// ArtifactContent caps one artifact's content. Default: 1 MiB.
	ArtifactContent int
	// TaskInput caps task_attempt.task_input. Default: 64 KiB.
	TaskInput int
	// Event caps one whole encoded event. Default: 4 MiB.
	Event int
}

// DefaultLimits returns the default caps.
func DefaultLimits() Limits {
	return Limits{ArtifactContent: 1 << 20, TaskInput: 64 << 10, Event: 4 << 20}
}

// Error codes carried by FieldError and used as DLQ reason codes.
const (
	CodeMalformed          = "malformed"
	CodeUnknownType        = "unknown_type"
	CodeUnknownFingerprint = "unknown_fingerprint"
	CodeMissingField       = "missing_field"
	CodeWrongType          = "wrong_type"
	CodeBadEnum            = "bad_enum"
	CodeOutOfRange         = "out_of_range"
	CodeTooLarge           = "too_large"
	CodeUnknownField       = "unknown_field"
)

// FieldError is a validation or decoding problem with one field of one event.
type FieldError struct {
	Type  Type
	Field string
	Code  string
	Msg   string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s: %s", e.Type, e.Msg)
	}
	return fmt.Sprintf("%s.%s: %s", e.Type, e.Field, e.Msg)
}

// Sentinel errors.
var (
	ErrUnknownType        = errors.New("unknown event type")
	ErrUnknownFingerprint = errors.New("unknown schema fingerprint")
	ErrMalformed          = errors.New("malformed event bytes")
)

// Encode returns the single-object Avro encoding of ev.
func Encode(ev Event) ([]byte, error) { return AppendEncode(nil, ev) }

// AppendEncode appends the single-object Avro encoding of ev to dst.
func AppendEncode(dst []byte, ev Event) ([]byte, error) {
	b, err := MarshalJSON(ev)
	if err != nil {
		return nil, err
	}
	return append(dst, b...), nil
}

// Decode decodes single-object Avro bytes into a typed event.
func Decode(b []byte) (Event, error) { return ParseJSON(b, DefaultLimits()) }

// ParseJSON parses and strictly validates the JSON form of one event and fills a
// deterministic event_id when absent.
func ParseJSON(b []byte, lim Limits) (Event, error) {
	var head struct {
		Type Type `json:"type"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	ev := New(head.Type)
	if ev == nil {
		return nil, &FieldError{Type: head.Type, Field: "type", Code: CodeUnknownType, Msg: "unknown event type"}
	}
	if err := json.Unmarshal(b, ev); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if ev.Header().EventID == "" {
		ev.Header().EventID = DeriveEventID(ev)
	}
	return ev, Validate(ev, lim)
}

// MarshalJSON returns the JSON form of ev, with "type".
func MarshalJSON(ev Event) ([]byte, error) {
	b, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	return append([]byte(`{"type":"`+string(ev.Type())+`",`), b[1:]...), nil
}

// Validate checks the syntax rules of DESIGN.md §3 (required fields, enums,
// ranges, sizes) and returns every problem joined, each a *FieldError.
func Validate(ev Event, lim Limits) error { return nil }

// DeriveEventID returns a deterministic id from the event's type and identifying
// fields.
func DeriveEventID(ev Event) string { return string(ev.Type()) + ":" + ev.PartitionKey() }
