package stages

import (
	"errors"

	"github.com/rs/zerolog"
)

// Option configures a bench that logs (Process, Sink).
type Option func(*options)

type options struct {
	log zerolog.Logger
}

// WithLogger sets the logger that receives the bench's progress lines and
// the measured component's logs. Default: a no-op logger.
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.log = l } }

func newOptions(opts []Option) options {
	o := options{log: zerolog.Nop()}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// ErrFailed marks an error of the measured run itself (the processor run of
// Process, the sink of Sink), as opposed to one of the bench's setup:
// `harnessflow bench` exits 1 on it and 2 on any other error.
var ErrFailed = errors.New("the measured run failed")

// failedError carries err's text unchanged and matches ErrFailed.
type failedError struct{ err error }

func (e failedError) Error() string   { return e.err.Error() }
func (e failedError) Unwrap() []error { return []error{e.err, ErrFailed} }

// failed marks err (nil stays nil) as the measured run's.
func failed(err error) error {
	if err == nil {
		return nil
	}
	return failedError{err}
}
