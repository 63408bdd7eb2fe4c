package eval

import "errors"

var (
	// ErrConfig marks an invalid Config or argument; the message says which.
	ErrConfig = errors.New("invalid eval config")
	// ErrNoRows is returned when a side of the split (or the held-out rows
	// given to Evaluate) is empty, so there is nothing to fit or to score.
	ErrNoRows = errors.New("no rows")
	// ErrMismatch is returned when a predictor's predictions are not one per
	// held-out row.
	ErrMismatch = errors.New("predictions do not match rows")
)
