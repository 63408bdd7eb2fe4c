// Package kafkax is harnessflow's Kafka client wiring: topic creation,
// writers, readers, clients and consumer groups with every default made
// explicit (STYLE.md §4), and offset and lag queries.
package kafkax

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// ParseBrokers splits a comma-separated broker list and drops empty entries.
func ParseBrokers(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// ErrNoBrokers is returned when a component is given no broker address.
var ErrNoBrokers = errors.New("no Kafka brokers given: pass --brokers host:port[,host:port] or set HF_BROKERS")

// WriterConfig holds the settings of a kafka-go Writer. Zero fields take the
// defaults documented on each field; none inherits kafka-go's own defaults.
type WriterConfig struct {
	// Brokers to bootstrap from. Required.
	Brokers []string
	// Topic to write to; empty means each message names its topic.
	Topic string
	// BatchSize is the maximum messages per produce request. Default: 1000.
	BatchSize int
	// BatchBytes is the maximum bytes per produce request. Default: 4 MiB.
	BatchBytes int64
	// BatchTimeout flushes an incomplete batch after this long. Default: 5ms
	// (kafka-go's 1 s default stalls synchronous writers).
	BatchTimeout time.Duration
	// WriteTimeout bounds one produce request. Default: 10s.
	WriteTimeout time.Duration
	// MaxAttempts is kafka-go's own per-batch retry count. Default: 3.
	MaxAttempts int
	// Async makes WriteMessages return before acknowledgement. Default: false.
	Async bool
	// Completion is called with each batch's outcome (async writers).
	Completion func(messages []kafka.Message, err error)
}

func (c *WriterConfig) setDefaults() {
	if c.BatchSize == 0 {
		c.BatchSize = 1000
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = 4 << 20
	}
	if c.BatchTimeout == 0 {
		c.BatchTimeout = 5 * time.Millisecond
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 3
	}
}

// NewWriter returns a kafka-go Writer with every durability and batching setting
// explicit: RequireAll acks, hash balancing by key (all of a cell's events on one
// partition), no auto topic creation (EnsureTopics does that).
func NewWriter(cfg WriterConfig) *kafka.Writer {
	cfg.setDefaults()
	return &kafka.Writer{
		Addr:                   kafka.TCP(cfg.Brokers...),
		Transport:              transport(),
		Topic:                  cfg.Topic,
		Balancer:               &kafka.Hash{},
		MaxAttempts:            cfg.MaxAttempts,
		WriteBackoffMin:        50 * time.Millisecond,
		WriteBackoffMax:        time.Second,
		BatchSize:              cfg.BatchSize,
		BatchBytes:             cfg.BatchBytes,
		BatchTimeout:           cfg.BatchTimeout,
		ReadTimeout:            cfg.WriteTimeout,
		WriteTimeout:           cfg.WriteTimeout,
		RequiredAcks:           kafka.RequireAll,
		Async:                  cfg.Async,
		Completion:             cfg.Completion,
		Compression:            0,
		AllowAutoTopicCreation: false,
	}
}

// ReaderMaxWait is how long a reader's fetch may wait at the broker for data
// (Kafka's own fetch.max.wait.ms default). With MinBytes 1 the first record
// ends the wait, so it bounds only the polls of idle partitions, not latency.
// kafka-go asks the broker to answer within three quarters of it and drops
// the connection when the answer misses the last quarter: at 100 ms that
// margin was 25 ms, which a machine at full use misses often; the sink and
// trainer of a co-located bench then redialled about 150 times a second,
// each a new connection with ApiVersions, Metadata and ListOffsets
// (bench/README.md).
const ReaderMaxWait = 500 * time.Millisecond

// ReaderConfig returns a kafka-go ReaderConfig with explicit fetch settings. It
// uses explicit commits (CommitInterval 0: CommitMessages is synchronous) and
// starts a new group at the first offset.
func ReaderConfig(brokers []string, group string, topics ...string) kafka.ReaderConfig {
	rc := kafka.ReaderConfig{
		Brokers:           brokers,
		Dialer:            Dialer(),
		GroupID:           group,
		MinBytes:          1,
		MaxBytes:          8 << 20,
		MaxWait:           ReaderMaxWait,
		ReadBatchTimeout:  5 * time.Second,
		QueueCapacity:     1000,
		CommitInterval:    0,
		StartOffset:       kafka.FirstOffset,
		HeartbeatInterval: time.Second,
		SessionTimeout:    10 * time.Second,
		RebalanceTimeout:  10 * time.Second,
		JoinGroupBackoff:  500 * time.Millisecond,
		ReadBackoffMin:    50 * time.Millisecond,
		ReadBackoffMax:    500 * time.Millisecond,
		MaxAttempts:       3,
	}
	if len(topics) == 1 {
		rc.Topic = topics[0]
	} else {
		rc.GroupTopics = topics
	}
	if group == "" {
		rc.GroupTopics = nil
	}
	return rc
}

// DefaultBrokers is the broker address every command dials unless told
// otherwise, and where `harnessflow broker` and `up` serve the embedded one.
const DefaultBrokers = "127.0.0.1:9092"

// DefaultConnectTimeout is how long a command waits for a reachable broker
// (WaitReachable) unless told otherwise.
const DefaultConnectTimeout = 10 * time.Second

// WaitReachable waits for a broker that answers a Kafka request with this
// process's security (Configure), retrying until ctx ends or timeout
// passes, and returns a clear error naming the addresses otherwise. A
// refusal that retrying cannot mend (SASL credentials the broker refuses, a
// certificate not trusted, TLS to a broker that does not speak it) is
// returned at once, saying which flag to fix.
func WaitReachable(ctx context.Context, brokers []string, timeout time.Duration) error {
	if len(brokers) == 0 {
		return ErrNoBrokers
	}
	deadline := time.Now().Add(timeout)
	var last error
	connected := false
	for {
		for _, b := range brokers {
			d := net.Dialer{Timeout: time.Second}
			c, err := d.DialContext(ctx, "tcp", b)
			if err != nil {
				last = err
				continue
			}
			c.Close()
			connected = true
			if err = probe(ctx, b); err == nil {
				return nil
			}
			if hint := permanentHint(err); hint != "" {
				return fmt.Errorf("Kafka broker %s refused this client: %w (%s)", b, err, hint)
			}
			last = err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if connected {
				return fmt.Errorf("Kafka broker at %s accepts connections but answers no request: %w "+
					"(if it requires SASL or TLS, check --kafka-sasl, --kafka-user, --kafka-password-file, --kafka-tls and --kafka-ca)",
					strings.Join(brokers, ","), last)
			}
			return fmt.Errorf("no Kafka broker reachable at %s (is `harnessflow broker` or `harnessflow up` running?): %w", strings.Join(brokers, ","), last)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Ping succeeds when any of brokers answers a metadata request with this
// process's security (SASL, TLS: Configure), asking them in turn, each
// within ctx and at most 5 s; otherwise it returns an error naming each broker and what it answered. It is
// the readiness check of the services (obs.WithCheck); WaitReachable is the
// wait at start.
func Ping(ctx context.Context, brokers []string) error {
	if len(brokers) == 0 {
		return ErrNoBrokers
	}
	var errs []string
	var last error
	for _, b := range brokers {
		if last = probe(ctx, b); last == nil {
			return nil
		}
		errs = append(errs, fmt.Sprintf("%s: %v", b, last))
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("no Kafka broker answers (%s): %w", strings.Join(errs, "; "), last)
}

// probe asks broker b for its metadata, a request a SASL broker answers only
// to an authenticated client, on a connection of its own.
func probe(ctx context.Context, b string) error {
	t := NewTransport()
	defer t.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c := &kafka.Client{Addr: kafka.TCP(b), Timeout: 5 * time.Second, Transport: t}
	_, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{}})
	return err
}

// permanentHint says what to fix when err is a refusal retrying cannot
// mend, and is "" otherwise.
func permanentHint(err error) string {
	var rec tls.RecordHeaderError
	var unknownCA x509.UnknownAuthorityError
	var host x509.HostnameError
	var verify *tls.CertificateVerificationError
	switch {
	case errors.Is(err, kafka.SASLAuthenticationFailed), errors.Is(err, kafka.IllegalSASLState):
		return "check --kafka-user and --kafka-password-file"
	case errors.Is(err, kafka.UnsupportedSASLMechanism):
		return "the broker does not offer this --kafka-sasl mechanism"
	case errors.As(err, &rec):
		return "the broker does not speak TLS: drop --kafka-tls and --kafka-ca"
	case errors.As(err, &unknownCA), errors.As(err, &host), errors.As(err, &verify):
		return "the broker's certificate is not trusted: give its CA with --kafka-ca"
	}
	return ""
}

// ClientTimeout bounds each request of a client from NewClient.
const ClientTimeout = 10 * time.Second

// NewClient returns a kafka-go client for admin and offset requests to
// brokers, each bounded by ClientTimeout.
func NewClient(brokers []string) *kafka.Client {
	return &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: ClientTimeout, Transport: transport()}
}

// GroupConfig is a consumer group's membership. Zero durations take the
// defaults named on each field.
type GroupConfig struct {
	ID      string
	Brokers []string
	Topics  []string
	// SessionTimeout: the broker evicts a member silent this long. Default 10s.
	SessionTimeout time.Duration
	// HeartbeatInterval. Default: SessionTimeout/5, at least 100ms.
	HeartbeatInterval time.Duration
	// RebalanceTimeout: how long a rebalance waits for members to rejoin.
	// Default: SessionTimeout.
	RebalanceTimeout time.Duration
	// JoinGroupBackoff: the wait before a failed join is retried. Default 200ms.
	JoinGroupBackoff time.Duration
	// Balancers assign partitions. Default: kafka-go's (range, round robin).
	Balancers []kafka.GroupBalancer
}

// NewConsumerGroup joins a consumer group whose generations the caller
// drives (kafka.ConsumerGroup.Next). A new group starts at the first offset
// and the broker keeps its committed offsets for 30 days.
func NewConsumerGroup(cfg GroupConfig) (*kafka.ConsumerGroup, error) {
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = 10 * time.Second
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = max(cfg.SessionTimeout/5, 100*time.Millisecond)
	}
	if cfg.RebalanceTimeout <= 0 {
		cfg.RebalanceTimeout = cfg.SessionTimeout
	}
	if cfg.JoinGroupBackoff <= 0 {
		cfg.JoinGroupBackoff = 200 * time.Millisecond
	}
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID: cfg.ID, Brokers: cfg.Brokers, Topics: cfg.Topics, GroupBalancers: cfg.Balancers,
		HeartbeatInterval: cfg.HeartbeatInterval, SessionTimeout: cfg.SessionTimeout,
		RebalanceTimeout: cfg.RebalanceTimeout, JoinGroupBackoff: cfg.JoinGroupBackoff,
		RetentionTime: 30 * 24 * time.Hour, StartOffset: kafka.FirstOffset, Timeout: ClientTimeout,
		PartitionWatchInterval: 5 * time.Second, Dialer: Dialer(),
	})
	if err != nil {
		return nil, fmt.Errorf("consumer group %s: %w", cfg.ID, err)
	}
	return cg, nil
}
