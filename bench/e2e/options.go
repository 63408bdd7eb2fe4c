package e2e

import "github.com/rs/zerolog"

// Option configures Run.
type Option func(*options)

type options struct {
	log zerolog.Logger
}

// WithLogger sets the logger that receives Run's JSON logs (warnings of its
// own cleanup and polls). Default: a no-op logger.
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.log = l } }

func newOptions(opts []Option) options {
	o := options{log: zerolog.Nop()}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}
