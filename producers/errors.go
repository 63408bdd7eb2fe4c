package producers

import (
	"errors"
	"fmt"

	"github.com/harnessflow/harnessflow/schemas"
)

// Sentinel errors.
var (
	// ErrBufferFull is returned by Emit when the buffer is full and the
	// producer is configured with Backpressure FailFast.
	ErrBufferFull = errors.New("producer buffer full")
	// ErrClosed is returned by Emit, EmitSync and Flush after Close, and is
	// reported for events still queued when Close's context ends.
	ErrClosed = errors.New("producer closed")
	// ErrInvalidEvent matches every *InvalidEventError (errors.Is).
	ErrInvalidEvent = errors.New("invalid event")
	// ErrSchemaRegistry is returned (wrapped) by Emit and EmitSync when the
	// schema registry of WithSchemaRegistry could not give an event's schema
	// id (unreachable, or it refused the schema); nothing of it is queued.
	ErrSchemaRegistry = errors.New("schema registry")
	// ErrInternalType is the cause (InvalidEventError.Err) of an event whose
	// type is not one of ProducerTypes: a derived type the pipeline writes
	// (labeled_sample, round_metrics, rejected, checkpoint_published). Only a
	// Producer made WithInternalTypes emits them.
	ErrInternalType = errors.New("internal event type")
)

// InvalidEventError is returned by Emit and EmitSync for an event that fails
// validation or encoding; nothing of it is produced. Err is the cause: one or
// more *schemas.FieldError (joined), reachable with errors.As, or an error
// wrapping ErrInternalType for a type producers may not send.
type InvalidEventError struct {
	// Index is the event's position among EmitSync's arguments (0 for Emit).
	Index   int
	Type    schemas.Type
	EventID string
	Err     error
}

func (e *InvalidEventError) Error() string {
	if e.EventID == "" {
		return fmt.Sprintf("invalid %s event: %v", e.Type, e.Err)
	}
	return fmt.Sprintf("invalid %s event %s: %v", e.Type, e.EventID, e.Err)
}

// Unwrap returns the cause.
func (e *InvalidEventError) Unwrap() error { return e.Err }

// Is reports whether target is ErrInvalidEvent.
func (e *InvalidEventError) Is(target error) bool { return target == ErrInvalidEvent }

// DeliveryError summarizes events that were accepted but could not be
// delivered: a permanent broker error, or retries exhausted after
// Config.MaxElapsedTime. Each event is also reported to Config.OnError.
type DeliveryError struct {
	// Failed is the number of events not delivered.
	Failed int
	// First is the first event's error.
	First error
}

func (e *DeliveryError) Error() string {
	return fmt.Sprintf("%d event(s) not delivered; first error: %v", e.Failed, e.First)
}

// Unwrap returns the first event's error.
func (e *DeliveryError) Unwrap() error { return e.First }
