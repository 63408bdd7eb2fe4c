package chaos

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// Config sizes a chaos campaign. Zero fields take the default named on each
// field; a negative fault count disables that fault.
type Config struct {
	// Bin is the harnessflow executable the children (process, sink, train)
	// run. Required.
	Bin string
	// Dir is the run directory: the broker's log, ClickHouse's data, the
	// trainer's checkpoints and the children's logs (Dir/logs). It is kept
	// when the campaign fails (or with KeepDir) and removed when it passes.
	// Default: a new temporary directory.
	Dir string
	// KeepDir keeps Dir even when the campaign passes. Default: false.
	KeepDir bool
	// Seed drives the campaign, the malformed events and the fault plan; the
	// same seed replays the same plan. Default: derived from the clock (and
	// reported).
	Seed int64
	// Events is the approximate number of good events of the generated
	// campaign (whole agents of Evolvers+1 cells are added until it is
	// reached). Default: 200000.
	Events int
	// Evolvers, Rounds and Tasks shape each agent's cells (producers/gen).
	// Defaults: 3, 10, 100.
	Evolvers, Rounds, Tasks int
	// Rate paces the producer in events per second, so that the faults land
	// on a live pipeline. Default: 1500.
	Rate float64
	// MalformedFraction is the share of malformed events mixed into the
	// stream (garbage bytes, truncated Avro, JSON, unknown schema
	// fingerprints; each unique); negative: none. Default: 0.01.
	MalformedFraction float64
	// Kills is the number of SIGKILLs of each child (processors, sink,
	// trainer). Default: 5.
	Kills int
	// Skip lists fault kinds (kill_processors, broker_restart, ...) left
	// out of the plan. Default: none.
	Skip []string
	// MaxDowntime bounds the random pause between a SIGKILL and the restart.
	// Default: 2s.
	MaxDowntime time.Duration
	// BrokerRestarts is the number of restarts of the embedded broker on its
	// data dir. Default: 1.
	BrokerRestarts int
	// ClickHouseOutages is the number of times ClickHouse is stopped.
	// Default: 1.
	ClickHouseOutages int
	// ClickHouseOutage is how long ClickHouse stays stopped. Default: 15s.
	ClickHouseOutage time.Duration
	// KafkaBursts is the number of bursts of each Kafka fault kind (produce
	// errors, fetch errors, NOT_LEADER_FOR_PARTITION, request timeouts).
	// Default: 2.
	KafkaBursts int
	// KafkaBurst is how long one burst of Kafka faults lasts. Default: 3s.
	KafkaBurst time.Duration
	// KafkaDelay is how long a timed-out fetch is held before the broker
	// answers it. Default: 3s.
	KafkaDelay time.Duration
	// SettleTimeout bounds the catch-up after the last event was produced:
	// every group committed, ClickHouse holding every expected row.
	// Default: 5m.
	SettleTimeout time.Duration
	// ChildEnv is added to the children's environment (HF_LOG_LEVEL=debug).
	ChildEnv []string
	// Progress receives human-readable progress lines. Default: io.Discard.
	Progress io.Writer
}

// DefaultConfig is the configuration Run fills in for the fields left zero,
// except Seed, which stays 0 (Run takes it from the clock and prints it).
func DefaultConfig() Config {
	var c Config
	c.setDefaults()
	c.Seed = 0
	return c
}

func (c *Config) setDefaults() {
	if c.Seed == 0 {
		c.Seed = time.Now().UnixNano() % 1_000_000_000
		if c.Seed == 0 {
			c.Seed = 1
		}
	}
	defInt := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	defDur := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	defInt(&c.Events, 200000)
	defInt(&c.Evolvers, 3)
	defInt(&c.Rounds, 10)
	defInt(&c.Tasks, 100)
	if c.Rate == 0 {
		c.Rate = 1500
	}
	if c.MalformedFraction == 0 {
		c.MalformedFraction = 0.01
	}
	defInt(&c.Kills, 5)
	defDur(&c.MaxDowntime, 2*time.Second)
	defInt(&c.BrokerRestarts, 1)
	defInt(&c.ClickHouseOutages, 1)
	defDur(&c.ClickHouseOutage, 15*time.Second)
	defInt(&c.KafkaBursts, 2)
	defDur(&c.KafkaBurst, 3*time.Second)
	defDur(&c.KafkaDelay, 3*time.Second)
	defDur(&c.SettleTimeout, 5*time.Minute)
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

// Validate reports every problem of c (after defaults), joined; each wraps
// ErrConfig.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...)))
	}
	if c.Bin == "" {
		bad("no harnessflow binary for the children (Bin)")
	}
	if c.Events < 1 || c.Evolvers < 1 || c.Rounds < 2 || c.Tasks < 1 {
		bad("campaign too small: events %d, evolvers %d, rounds %d (at least 2), tasks %d", c.Events, c.Evolvers, c.Rounds, c.Tasks)
	}
	if c.Rate <= 0 {
		bad("rate %v events/s must be positive", c.Rate)
	}
	if c.MalformedFraction > 0.5 {
		bad("malformed fraction %v is above 0.5 (negative: none)", c.MalformedFraction)
	}
	if c.MaxDowntime < 0 || c.ClickHouseOutage < 0 || c.KafkaBurst < 0 || c.KafkaDelay < 0 || c.SettleTimeout < 0 {
		bad("durations must not be negative")
	}
	return errors.Join(errs...)
}

// count is a fault count with "negative: none" applied.
func count(n int) int { return max(n, 0) }
