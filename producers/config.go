package producers

import (
	"errors"
	"fmt"
	"time"

	"github.com/harnessflow/harnessflow/infra/kafkatopics"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/schemas"
)

// Backpressure says what Emit does when the buffer is full.
type Backpressure int

const (
	// Block makes Emit wait for room (or its context to end). The default.
	Block Backpressure = iota
	// FailFast makes Emit return ErrBufferFull at once.
	FailFast
)

func (b Backpressure) String() string {
	switch b {
	case Block:
		return "block"
	case FailFast:
		return "fail-fast"
	}
	return fmt.Sprintf("Backpressure(%d)", int(b))
}

// Config configures a Producer. Zero fields take the documented defaults.
type Config struct {
	// Brokers to bootstrap from. Required.
	Brokers []string
	// BufferSize is the number of encoded events Emit may queue ahead of the
	// writer; as many more (at least one batch) may be in flight,
	// unacknowledged. Default: 10000.
	BufferSize int
	// Backpressure is what Emit does when the buffer is full. Default: Block.
	Backpressure Backpressure
	// BatchSize is the most events written in one produce call. Default: 1000.
	BatchSize int
	// BatchBytes is the most encoded bytes (keys and values) in one produce
	// call (one record batch per partition). It must hold the largest valid
	// event (Limits.Event plus a key and overhead: Validate refuses less) and
	// stay under the topics' max.message.bytes (kafkatopics.MaxMessageBytes,
	// 8 MiB). Default: DefaultBatchBytes (5 MiB).
	BatchBytes int64
	// BatchTimeout is how long a batch waits for more events before it is
	// written. Default: 5ms.
	BatchTimeout time.Duration
	// WriteTimeout bounds one produce call to the brokers. Default: 10s.
	WriteTimeout time.Duration
	// MaxElapsedTime bounds the retries of one batch (exponential backoff);
	// events still failing then are reported failed. Default: 30s.
	MaxElapsedTime time.Duration
	// Project fills the envelope's project when an event has none. Default: "".
	Project string
	// Source fills the envelope's source when an event has none.
	// Default: "sdk-go".
	Source string
	// OnError is called once for each event Emit accepted that could not be
	// delivered. It runs on the producer's or kafka-go's goroutines, possibly
	// concurrently: it must be safe for concurrent use, must not block, and
	// must not call Flush or Close. Default: nil (failures are still counted and
	// returned by Flush and Close).
	OnError func(ev schemas.Event, err error)
	// Limits caps field and event sizes. Default: schemas.DefaultLimits().
	Limits schemas.Limits
}

// DefaultBatchBytes is the default of Config.BatchBytes: an event at the
// schemas' 4 MiB cap with 1 MiB to spare, 3 MiB under max.message.bytes.
const DefaultBatchBytes = 5 << 20

// DefaultConfig returns the configuration New fills in for the fields left
// zero (Brokers stays empty).
func DefaultConfig() Config {
	var c Config
	c.setDefaults()
	return c
}

// batchOverhead is what kafka-go adds to a message's key and value when it
// sizes a batch (headers, lengths, timestamps).
const batchOverhead = 64

func (c *Config) setDefaults() {
	if c.BufferSize == 0 {
		c.BufferSize = 10000
	}
	if c.BatchSize == 0 {
		c.BatchSize = 1000
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = DefaultBatchBytes
	}
	if c.BatchTimeout == 0 {
		c.BatchTimeout = 5 * time.Millisecond
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.MaxElapsedTime == 0 {
		c.MaxElapsedTime = 30 * time.Second
	}
	if c.Source == "" {
		c.Source = "sdk-go"
	}
	if c.Limits == (schemas.Limits{}) {
		c.Limits = schemas.DefaultLimits()
	}
}

// Validate reports every problem of the configuration, joined.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, kafkax.ErrNoBrokers)
	}
	if c.BufferSize < 1 {
		errs = append(errs, fmt.Errorf("buffer size %d: must be at least 1", c.BufferSize))
	}
	if c.Backpressure != Block && c.Backpressure != FailFast {
		errs = append(errs, fmt.Errorf("backpressure %v: want Block or FailFast", c.Backpressure))
	}
	if c.BatchSize < 1 {
		errs = append(errs, fmt.Errorf("batch size %d: must be at least 1", c.BatchSize))
	}
	if need := int64(c.Limits.Event) + schemas.DefaultNameCap + batchOverhead; c.BatchBytes < need {
		errs = append(errs, fmt.Errorf("batch bytes %d: below the %d-byte event cap plus key and overhead (%d), so a valid event could not be sent; raise it or leave it 0 (default %d)",
			c.BatchBytes, c.Limits.Event, need, DefaultBatchBytes))
	}
	if c.BatchBytes > kafkatopics.MaxMessageBytes-64<<10 {
		errs = append(errs, fmt.Errorf("batch bytes %d: not under the topics' max.message.bytes (%d) less 64 KiB of record overhead; lower it or leave it 0 (default %d)",
			c.BatchBytes, kafkatopics.MaxMessageBytes, DefaultBatchBytes))
	}
	if c.BatchTimeout < 0 {
		errs = append(errs, fmt.Errorf("batch timeout %s: must not be negative", c.BatchTimeout))
	}
	if c.WriteTimeout < 0 {
		errs = append(errs, fmt.Errorf("write timeout %s: must not be negative", c.WriteTimeout))
	}
	if c.MaxElapsedTime < 0 {
		errs = append(errs, fmt.Errorf("max elapsed time %s: must not be negative", c.MaxElapsedTime))
	}
	if c.Limits.Event <= 0 || c.Limits.ArtifactContent <= 0 || c.Limits.TaskInput <= 0 {
		errs = append(errs, fmt.Errorf("limits %+v: every cap must be positive", c.Limits))
	}
	return errors.Join(errs...)
}
