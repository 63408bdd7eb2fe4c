package jsonl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/harnessflow/harnessflow/schemas"
)

// decodeFunc decodes one message value (schemas.Decoder.Decode).
type decodeFunc func(context.Context, []byte) (schemas.Event, error)

// rejectedLine returns the JSON line of the dead letter r: its JSON form
// (schemas.MarshalJSON, "payload" in base64 as always) followed by what its
// payload holds:
//
//   - "payload_event": the payload decoded, in its JSON form, when it
//     decodes: Avro single-object or Confluent framing (through decode, so
//     Confluent needs the registry), or JSON text that parses as an event;
//   - "payload_error": why it does not decode, otherwise;
//   - "payload_text": the payload as text, when it does not decode and is
//     printable UTF-8 (JSON text, a log line).
//
// It fails only when r itself cannot be written as JSON.
func rejectedLine(ctx context.Context, decode decodeFunc, r *schemas.Rejected) ([]byte, error) {
	line, err := schemas.MarshalJSON(r)
	if err != nil {
		return nil, err
	}
	return appendPayload(ctx, line[:len(line)-1], decode, r.Payload), nil
}

// appendPayload appends the payload members of rejectedLine and the closing
// brace to b, an open JSON object.
func appendPayload(ctx context.Context, b []byte, decode decodeFunc, payload []byte) []byte {
	ev, err := decodePayload(ctx, decode, payload)
	var evJSON []byte
	if err == nil {
		if evJSON, err = schemas.MarshalJSON(ev); err != nil {
			err = fmt.Errorf("decoded as %s, but JSON cannot carry it: %w", ev.Type(), err)
		}
	}
	if err == nil {
		b = append(b, `,"payload_event":`...)
		b = append(b, evJSON...)
		return append(b, '}')
	}
	b = append(b, `,"payload_error":`...)
	b = appendString(b, err.Error())
	if isText(payload) {
		b = append(b, `,"payload_text":`...)
		b = appendString(b, string(payload))
	}
	return append(b, '}')
}

// errEmptyPayload: the dead letter carries no payload bytes.
var errEmptyPayload = errors.New("empty payload")

// decodePayload decodes a dead letter's payload: JSON text (its first
// non-blank byte is '{') with schemas.ParseJSON, anything else with decode
// (Avro single-object, Confluent framing). It never panics.
func decodePayload(ctx context.Context, decode decodeFunc, payload []byte) (schemas.Event, error) {
	if len(payload) == 0 {
		return nil, errEmptyPayload
	}
	if t := bytes.TrimLeft(payload, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		ev, err := schemas.ParseJSON(payload, schemas.Limits{})
		if err != nil {
			return nil, fmt.Errorf("JSON text: %w", err)
		}
		return ev, nil
	}
	ev, err := decode(ctx, payload)
	if errors.Is(err, schemas.ErrNoRegistry) {
		err = fmt.Errorf("%w (pass --schema-registry)", err)
	}
	return ev, err
}

// isText reports whether b is non-empty valid UTF-8 whose only control
// characters are tabs and line breaks.
func isText(b []byte) bool {
	if len(b) == 0 || !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if unicode.IsControl(r) && r != '\t' && r != '\n' && r != '\r' {
			return false
		}
	}
	return true
}

// appendString appends s as a JSON string: valid UTF-8 in, valid JSON out
// (invalid bytes become U+FFFD).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r == '\n':
			b = append(b, '\\', 'n')
		case r == '\r':
			b = append(b, '\\', 'r')
		case r == '\t':
			b = append(b, '\\', 't')
		case r < 0x20 || r == 0x7f || r == 0x2028 || r == 0x2029:
			b = fmt.Appendf(b, `\u%04x`, r)
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return append(b, '"')
}
