package schemas

import (
	"errors"
	"fmt"
)

// Error codes carried by FieldError and used as DLQ reason codes.
const (
	// CodeMalformed: bytes or text that do not parse (truncated Avro, bad JSON,
	// invalid UTF-8, a bad hash format).
	CodeMalformed = "malformed"
	// CodeUnknownType: a JSON "type" or an Avro record name that is no event.
	CodeUnknownType = "unknown_type"
	// CodeUnknownFingerprint: single-object bytes whose schema fingerprint is
	// not one of the compiled-in schemas.
	CodeUnknownFingerprint = "unknown_fingerprint"
	// CodeMissingField: a required field is absent (JSON) or empty (typed).
	CodeMissingField = "missing_field"
	// CodeWrongType: a JSON value of the wrong kind (string for an int, ...).
	CodeWrongType = "wrong_type"
	// CodeBadEnum: a value that is not one of the schema's symbols.
	CodeBadEnum = "bad_enum"
	// CodeOutOfRange: a number outside its range (score in [0,1], counts >= 0,
	// NaN or infinite doubles, integers overflowing int32).
	CodeOutOfRange = "out_of_range"
	// CodeTooLarge: a text field or a whole event above its Limits cap.
	CodeTooLarge = "too_large"
	// CodeUnknownField: a JSON field that the event's schema does not have.
	CodeUnknownField = "unknown_field"
	// CodeUnknownSchemaID: Confluent-framed bytes whose schema id the schema
	// registry says it does not have (error_code 40403).
	CodeUnknownSchemaID = "unknown_schema_id"
	// CodeSchemaRegistry: Confluent-framed bytes read by a consumer that has
	// no schema registry to resolve their schema id (--schema-registry).
	CodeSchemaRegistry = "schema_registry"
)

// Sentinel errors. A *FieldError with the matching code unwraps to them, so
// errors.Is works on every error this package returns.
var (
	// ErrUnknownType: the event type (JSON "type", Avro record name) is unknown.
	ErrUnknownType = errors.New("unknown event type")
	// ErrUnknownFingerprint: the schema of single-object bytes is not known.
	ErrUnknownFingerprint = errors.New("unknown schema fingerprint")
	// ErrMalformed: the bytes are not a well-formed event.
	ErrMalformed = errors.New("malformed event bytes")
	// ErrSchemaNotFound: the schema registry does not know the schema id
	// (Confluent error_code 40403), the subject (40401) or the version
	// (40402).
	ErrSchemaNotFound = errors.New("schema not found in registry")
	// ErrNoRegistry: Confluent-framed bytes were given to a Decoder without a
	// Registry.
	ErrNoRegistry = errors.New("confluent framing needs a schema registry")
	// ErrRegistryUnavailable: a Decoder could not ask its schema registry for
	// a schema id (unreachable, an error answer other than "not found", the
	// context ended). Transient: the same bytes may decode later, so
	// consumers retry rather than dead-letter them.
	ErrRegistryUnavailable = errors.New("schema registry unavailable")
)

// FieldError is a validation or decoding problem with one field of one event.
// Several problems are returned as errors.Join of *FieldError, so errors.As
// finds the first one. Code is one of the Code* constants.
type FieldError struct {
	// Type is the event type, empty when not known yet.
	Type Type
	// Field names the field, with a path for nested values
	// ("artifacts[1].kind"); empty for whole-event problems.
	Field string
	// Code is one of the Code* constants.
	Code string
	// Msg describes the problem.
	Msg string
}

// Error returns "type.field: msg", or "type: msg" for whole-event problems and
// for missing or unknown fields (whose message names the field).
func (e *FieldError) Error() string {
	prefix := string(e.Type)
	if e.Field != "" && e.Code != CodeMissingField && e.Code != CodeUnknownField {
		if prefix != "" {
			prefix += "."
		}
		prefix += e.Field
	}
	if prefix == "" {
		return e.Msg
	}
	return prefix + ": " + e.Msg
}

// Unwrap returns the sentinel matching e.Code (ErrMalformed,
// ErrUnknownType, ErrUnknownFingerprint, ErrSchemaNotFound, ErrNoRegistry),
// or nil.
func (e *FieldError) Unwrap() error {
	switch e.Code {
	case CodeUnknownSchemaID:
		return ErrSchemaNotFound
	case CodeSchemaRegistry:
		return ErrNoRegistry
	case CodeMalformed:
		return ErrMalformed
	case CodeUnknownType:
		return ErrUnknownType
	case CodeUnknownFingerprint:
		return ErrUnknownFingerprint
	}
	return nil
}

func fieldErr(t Type, field, code, format string, args ...any) *FieldError {
	return &FieldError{Type: t, Field: field, Code: code, Msg: fmt.Sprintf(format, args...)}
}

// RegistryError is an error answer of the schema registry.
type RegistryError struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// ErrorCode is the registry's error_code (40403: schema not found), 0 if
	// the body had none.
	ErrorCode int
	// Message is the registry's message, or the start of the body.
	Message string
}

// Error describes the answer.
func (e *RegistryError) Error() string {
	return fmt.Sprintf("schema registry: HTTP %d, error_code %d: %s", e.StatusCode, e.ErrorCode, e.Message)
}

// Unwrap returns ErrSchemaNotFound for the registry's "not found" answers
// (error_code 40401, 40402, 40403), else nil. A 404 without one of those
// codes is no such answer (a wrong base URL, a proxy): it says nothing
// about the schema.
func (e *RegistryError) Unwrap() error {
	if e.ErrorCode == 40403 || e.ErrorCode == 40401 || e.ErrorCode == 40402 {
		return ErrSchemaNotFound
	}
	return nil
}
