package trainer

import (
	"net"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/harnessflow/harnessflow/internal/obs"
	"github.com/harnessflow/harnessflow/trainer/backend"
)

// Option customizes a Trainer (New), a dataset export (Export) or a
// checkpoint store (NewCheckpointStore). Export and NewCheckpointStore read
// only WithLogger.
type Option func(*options)

// options are what the Options set; the zero value means every default.
type options struct {
	log    zerolog.Logger
	logSet bool
	reg    prometheus.Registerer
	ln     net.Listener
	be     backend.Backend
	wrapCH func(driver.Conn) driver.Conn
	// evaluator evaluates each checkpoint (WithCheckpointEvaluator).
	evaluator CheckpointEvaluator
}

// collect applies opts over the defaults.
func collect(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// logger is WithLogger's logger, or obs.NewLogger(component) when none was
// given.
func (o *options) logger(component string) zerolog.Logger {
	if o.logSet {
		return o.log
	}
	return obs.NewLogger(component)
}

// WithLogger sets the logger. Default: obs.NewLogger("trainer") (for Export:
// obs.NewLogger("export-dataset")).
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.log, o.logSet = l, true } }

// WithRegisterer registers the trainer's metrics (hf_trainer_*) with r.
// Default: a registry of the trainer's own (obs.NewRegistry). The trainer's
// /metrics serves r when r is a *prometheus.Registry (as obs.NewRegistry
// returns), and otherwise a registry of its own that holds the same metrics.
func WithRegisterer(r prometheus.Registerer) Option { return func(o *options) { o.reg = r } }

// WithListener serves the HTTP API on ln (already bound; closed when the
// trainer stops) instead of binding Config.Listen.
func WithListener(ln net.Listener) Option { return func(o *options) { o.ln = ln } }

// WithBackend uses be instead of opening cfg.Device.
func WithBackend(be backend.Backend) Option { return func(o *options) { o.be = be } }

// withClickHouse wraps the trainer's ClickHouse connection once it is open
// (tests slow or fail its calls).
func withClickHouse(wrap func(driver.Conn) driver.Conn) Option {
	return func(o *options) { o.wrapCH = wrap }
}

// registries returns where the trainer registers its metrics and the
// registry its /metrics serves: r (when nil, a new obs.NewRegistry) and r
// itself when it is a *prometheus.Registry; otherwise both r and a new
// obs.NewRegistry, which /metrics serves.
func registries(r prometheus.Registerer) (prometheus.Registerer, *prometheus.Registry) {
	if r == nil {
		own := obs.NewRegistry()
		return own, own
	}
	if served, ok := r.(*prometheus.Registry); ok {
		return r, served
	}
	own := obs.NewRegistry()
	return teeRegisterer{r, own}, own
}

// teeRegisterer registers every collector with each of its registerers.
type teeRegisterer []prometheus.Registerer

func (t teeRegisterer) Register(c prometheus.Collector) error {
	for i, r := range t {
		if err := r.Register(c); err != nil {
			for _, done := range t[:i] {
				done.Unregister(c)
			}
			return err
		}
	}
	return nil
}

func (t teeRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil {
			panic(err)
		}
	}
}

func (t teeRegisterer) Unregister(c prometheus.Collector) bool {
	ok := true
	for _, r := range t {
		ok = r.Unregister(c) && ok
	}
	return ok
}
