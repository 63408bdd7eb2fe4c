package critic

import "errors"

// ErrConfig marks an invalid Config.
var ErrConfig = errors.New("critic: invalid config")

// ErrNoSamples is returned when an arm derived no labeled sample, or its
// group split left one side empty.
var ErrNoSamples = errors.New("critic: no samples")
