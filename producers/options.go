package producers

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/harnessflow/harnessflow/schemas"
)

// Option is a test seam or an optional collaborator of New.
type Option func(*options)

// options are what New's Options set.
type options struct {
	log      zerolog.Logger
	now      func() time.Time
	registry *schemas.Registry
	internal bool
}

// WithLogger sets the logger. Default: a disabled logger.
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.log = l } }

// WithClock sets the clock that fills missing event times. Default: time.Now.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithSchemaRegistry makes the Producer write the Confluent wire format
// (schemas.Registry.AppendEncodeConfluent: 0x00, the schema id, the Avro
// body), registering each event type's current schema under its subject on
// first use; readers decode it with a schemas.Decoder holding a registry of
// the same URL. Emit and EmitSync then return an error wrapping
// ErrSchemaRegistry when the registry cannot give an id. Default: none, Avro
// single-object encoding (schemas.AppendEncode).
func WithSchemaRegistry(r *schemas.Registry) Option { return func(o *options) { o.registry = r } }

// WithInternalTypes lets the Producer emit the pipeline's own derived event
// types (labeled_sample, round_metrics, rejected, checkpoint_published):
// without it Emit and EmitSync refuse them with an *InvalidEventError
// wrapping ErrInternalType. It is for tests and repair only (`harnessflow
// produce --allow-internal-types`): an event of these types replaces what
// the pipeline derived. Default: refused.
func WithInternalTypes() Option { return func(o *options) { o.internal = true } }
