package producers

import (
	"time"

	"github.com/rs/zerolog"
)

// Option is a test seam or an optional collaborator of New.
type Option func(*options)

// options are what New's Options set.
type options struct {
	log zerolog.Logger
	now func() time.Time
}

// WithLogger sets the logger. Default: a disabled logger.
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.log = l } }

// WithClock sets the clock that fills missing event times. Default: time.Now.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }
