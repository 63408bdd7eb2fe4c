package trainer

import "errors"

var (
	// ErrConfig marks an invalid Config or ModelConfig; the message says which field.
	ErrConfig = errors.New("invalid trainer config")
	// ErrDevice is a compute backend failure reported by Sync.
	ErrDevice = errors.New("compute device error")
	// ErrDiverged is returned when a step's loss is NaN or infinite.
	ErrDiverged = errors.New("training diverged")
	// ErrIncompatible means a checkpoint does not fit the configured model
	// (different sizes or ensemble width).
	ErrIncompatible = errors.New("checkpoint incompatible with model config")
	// ErrCorrupt marks a checkpoint file that failed its integrity checks
	// (truncated, bad magic, checksum mismatch, undecodable).
	ErrCorrupt = errors.New("checkpoint corrupt")
	// ErrNoCheckpoint is returned by LoadLatest when the directory holds no
	// valid checkpoint.
	ErrNoCheckpoint = errors.New("no valid checkpoint")
)
