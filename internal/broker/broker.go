// Package broker runs harnessflow's embedded Kafka-protocol broker
// (franz-go's kfake, one node, optionally persisted to a directory) for
// `harnessflow up`, `harnessflow broker`, the benches and the tests, with a
// session watch that evicts silent group members as Kafka does, and helpers
// to inject faults into its requests.
package broker

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Config configures the embedded broker.
type Config struct {
	// Listen is host:port to serve the Kafka protocol on. Default: 127.0.0.1:9092;
	// port 0 picks a free port.
	Listen string
	// DataDir persists topics, offsets and groups; empty keeps everything in
	// memory. Default: "" (memory).
	DataDir string
	// SyncWrites fsyncs every produced batch. Default: false (fsync on segment
	// roll and shutdown, like Kafka's default).
	SyncWrites bool
	// Opts are extra kfake options (tests inject faults through them).
	Opts []kfake.Opt
	// AssumedSessionTimeout is the session timeout the broker's session
	// watch (sessions.go) gives a group member it has only seen in a group
	// description, never in a JoinGroup with its member id (a consumer
	// killed during its first join). Default: 45s.
	AssumedSessionTimeout time.Duration
}

// Broker is an embedded single-node Kafka-protocol broker (franz-go's kfake).
// Any Kafka client can connect to Addr.
type Broker struct {
	c        *kfake.Cluster
	addr     string
	sessions *sessions
}

// Start starts the embedded broker. With a DataDir, what an earlier broker
// stored there is loaded back.
func Start(cfg Config) (*Broker, error) {
	if cfg.Listen == "" {
		cfg.Listen = kafkax.DefaultBrokers
	}
	host, portStr, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("broker listen address %q: %w (want host:port)", cfg.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("broker listen port %q: %w", portStr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	if port == 0 {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("pick a free port on %s: %w", host, err)
		}
		port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return net.Listen(network, net.JoinHostPort(host, strconv.Itoa(port)))
		}),
		kfake.DefaultNumPartitions(6),
	}
	if cfg.DataDir != "" {
		opts = append(opts, kfake.DataDir(cfg.DataDir))
	}
	if cfg.SyncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	opts = append(opts, cfg.Opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start embedded broker on %s: %w", cfg.Listen, err)
	}
	addr := c.ListenAddrs()[0]
	return &Broker{c: c, addr: addr, sessions: watchSessions(c, addr, cfg.AssumedSessionTimeout)}, nil
}

// Addr is the broker's host:port.
func (b *Broker) Addr() string { return b.addr }

// Cluster exposes the kfake cluster (fault injection in tests and chaos runs).
func (b *Broker) Cluster() *kfake.Cluster { return b.c }

// Close stops the broker, flushing its data dir. Safe to call more than once.
func (b *Broker) Close() {
	b.sessions.close()
	b.c.Close()
}
