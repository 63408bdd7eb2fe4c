package kafkax

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// SASL mechanisms Security accepts (the flag's values).
const (
	SASLPlain       = "plain"
	SASLScramSHA256 = "scram-sha-256"
	SASLScramSHA512 = "scram-sha-512"
)

// Security is how this process's Kafka clients authenticate to the brokers
// and encrypt the connection. The zero value is PLAINTEXT without SASL, as
// before. One process talks to one Kafka cluster, so it is set once, at
// start-up (Configure), and every client of this package uses it: NewClient,
// NewWriter, ReaderConfig, NewConsumerGroup, NewTransport, Dialer.
type Security struct {
	// SASL is "", SASLPlain, SASLScramSHA256 or SASLScramSHA512.
	SASL string
	// User and Password are the SASL credentials.
	User, Password string
	// TLS encrypts every connection (and checks the brokers' certificates).
	TLS bool
	// CAFile is a PEM file of the CA certificates that sign the brokers'
	// certificates; empty: the system's roots. Implies TLS.
	CAFile string
}

// secured is what Configure built: nil means PLAINTEXT without SASL.
type secured struct {
	mech sasl.Mechanism
	tls  *tls.Config
}

var current atomic.Pointer[secured]

// Configure makes s the security of every Kafka client this package builds
// from now on. It checks s and loads the CA file; a bad setting is an error
// that names the flag to fix.
func Configure(s Security) error {
	var out secured
	switch strings.ToLower(s.SASL) {
	case "":
		if s.User != "" || s.Password != "" {
			return errors.New("kafka user or password given without --kafka-sasl (plain, scram-sha-256 or scram-sha-512)")
		}
	case SASLPlain:
		out.mech = plain.Mechanism{Username: s.User, Password: s.Password}
	case SASLScramSHA256, SASLScramSHA512:
		algo := scram.SHA256
		if strings.EqualFold(s.SASL, SASLScramSHA512) {
			algo = scram.SHA512
		}
		m, err := scram.Mechanism(algo, s.User, s.Password)
		if err != nil {
			return fmt.Errorf("kafka SASL %s: %w", s.SASL, err)
		}
		out.mech = m
	default:
		return fmt.Errorf("--kafka-sasl %q: want plain, scram-sha-256 or scram-sha-512", s.SASL)
	}
	if out.mech != nil && (s.User == "" || s.Password == "") {
		return errors.New("kafka SASL needs --kafka-user and --kafka-password-file")
	}
	if s.TLS || s.CAFile != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if s.CAFile != "" {
			pem, err := os.ReadFile(s.CAFile)
			if err != nil {
				return fmt.Errorf("--kafka-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return fmt.Errorf("--kafka-ca %s: no PEM certificate in it", s.CAFile)
			}
			cfg.RootCAs = pool
		}
		out.tls = cfg
	}
	if out.mech == nil && out.tls == nil {
		current.Store(nil)
		return nil
	}
	current.Store(&out)
	return nil
}

// Secured says whether Configure set SASL or TLS.
func Secured() bool { return current.Load() != nil }

// transport is the Transport for clients and writers: nil (kafka-go's
// shared default) when nothing is configured, else a new one with SASL/TLS.
func transport() kafka.RoundTripper {
	s := current.Load()
	if s == nil {
		return nil
	}
	return &kafka.Transport{SASL: s.mech, TLS: s.tls}
}

// NewTransport returns a Transport of its own (no connection shared with
// kafka-go's default one) with this process's security.
func NewTransport() *kafka.Transport {
	t := &kafka.Transport{}
	if s := current.Load(); s != nil {
		t.SASL, t.TLS = s.mech, s.tls
	}
	return t
}

// Dialer returns the dialer with this process's security (kafka-go's
// DefaultDialer when none is configured): readers, consumer groups and
// direct connections (DialContext, DialLeader) use it. Do not modify it.
func Dialer() *kafka.Dialer {
	s := current.Load()
	if s == nil {
		return kafka.DefaultDialer
	}
	return &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, SASLMechanism: s.mech, TLS: s.tls}
}

// DialContext is kafka.DialContext with this process's security.
func DialContext(ctx context.Context, network, addr string) (*kafka.Conn, error) {
	return Dialer().DialContext(ctx, network, addr)
}

// DialLeader is kafka.DialLeader with this process's security.
func DialLeader(ctx context.Context, network, addr, topic string, partition int) (*kafka.Conn, error) {
	return Dialer().DialLeader(ctx, network, addr, topic, partition)
}

// Poll calls fn with a client of its own now and then every interval until
// ctx ends; failed gets each error fn returns while ctx is live. The
// client's transport shares no connection with the process's writers
// (kafka.DefaultTransport: a poll's stale connection made a writer's first
// produce after a broker restart fail), and it is replaced after every
// failure, so that a connection a broker restart broke is not used again.
func Poll(ctx context.Context, brokers []string, interval time.Duration,
	fn func(context.Context, *kafka.Client) error, failed func(error)) {
	client := NewClient(brokers)
	t := NewTransport()
	client.Transport = t
	defer func() { t.CloseIdleConnections() }()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if err := fn(ctx, client); err != nil && ctx.Err() == nil {
			failed(err)
			t.CloseIdleConnections()
			t = NewTransport()
			client.Transport = t
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
