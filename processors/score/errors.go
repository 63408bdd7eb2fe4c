package score

import "errors"

// Sentinel errors returned (wrapped) by Pairer.Add and Params.Validate.
var (
	// ErrUnknownCell: an event names a cell whose cell_started this Pairer has
	// not seen. The runtime forwards a cell's events in order, so this is a bug
	// upstream (or a Pairer rebuilt from the middle of a stream).
	ErrUnknownCell = errors.New("cell_started not seen for cell")
	// ErrKeyMismatch: a cell_started whose pairing key is not the Pairer's key.
	ErrKeyMismatch = errors.New("cell belongs to another pairing key")
	// ErrDuplicateBaseline: a second baseline cell for the same pairing key. The
	// cell is ignored (its later events are dropped and counted in Stats).
	ErrDuplicateBaseline = errors.New("second baseline cell for pairing key")
	// ErrUnsupportedEvent: an event type the Pairer does not consume (derived
	// events, DLQ records, checkpoints).
	ErrUnsupportedEvent = errors.New("unsupported event type")
	// ErrBadParams: Params.Validate found a problem.
	ErrBadParams = errors.New("invalid score params")
)

// ErrLateBeyondWindow: an event of a cell that finished and was forgotten
// (Pairer.Forget: the runtime's retention window for late events passed):
// it cannot correct the cell's outputs any more and must be refused
// (dead-lettered late_beyond_window), never dropped silently.
var ErrLateBeyondWindow = errors.New("the cell finished and its retention window for late events passed")
