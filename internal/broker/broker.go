// Package broker runs harnessflow's embedded Kafka-protocol broker
// (franz-go's kfake, one node unless Config.Brokers asks more, optionally
// persisted to a directory) for `harnessflow up`, `harnessflow broker`, the
// benches and the tests, with a session watch that evicts silent group
// members as Kafka does, and helpers to inject faults into its requests.
package broker

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/harnessflow/harnessflow/infra/kafkatopics"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/secret"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Config configures the embedded broker.
type Config struct {
	// Listen is host:port to serve the Kafka protocol on. Default: 127.0.0.1:9092;
	// port 0 picks a free port.
	Listen string
	// Brokers is the number of broker nodes; the first serves on Listen, the
	// others on free ports of its host (tests of multi-broker clusters:
	// replication, partition leaders on several nodes). Default: 1.
	Brokers int
	// DataDir persists topics, offsets and groups; empty keeps everything in
	// memory. Default: "" (memory).
	DataDir string
	// SyncWrites fsyncs every produced batch. Default: false (fsync on segment
	// roll and shutdown, like Kafka's default).
	SyncWrites bool
	// Opts are extra kfake options (tests inject faults through them).
	Opts []kfake.Opt
	// SASLUsers, when not empty, makes every client authenticate with SASL
	// (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512) as one of these users (user ->
	// password); each may do everything. Default: none (no SASL).
	SASLUsers map[string]string
	// TLS, when set, makes the broker accept TLS connections only.
	TLS *tls.Config
	// AssumedSessionTimeout is the session timeout the broker's session
	// watch (sessions.go) gives a group member it has only seen in a group
	// description, never in a JoinGroup with its member id (a consumer
	// killed during its first join). Default: 45s.
	AssumedSessionTimeout time.Duration
}

// Broker is an embedded Kafka-protocol broker (franz-go's kfake), one node
// unless Config.Brokers asks more.
// Any Kafka client can connect to Addr.
type Broker struct {
	c        *kfake.Cluster
	addr     string
	n        int
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
	// Port 0: the first broker listens on a port the kernel picks (its
	// Addr says which). Picking one first and listening on it later would
	// race with every other listener of the machine (tests in parallel).
	if cfg.Brokers < 1 {
		cfg.Brokers = 1
	}
	ports := make([]int, cfg.Brokers) // the others: 0, a port the kernel picks
	ports[0] = port
	opts := []kfake.Opt{
		kfake.NumBrokers(cfg.Brokers),
		kfake.Ports(ports...),
		kfake.ListenFn(func(network, addr string) (net.Listener, error) {
			p := strconv.Itoa(port)
			if _, ap, err := net.SplitHostPort(addr); err == nil && ap == "0" {
				p = "0"
			}
			return net.Listen(network, net.JoinHostPort(host, p))
		}),
		kfake.DefaultNumPartitions(6),
	}
	if cfg.DataDir != "" {
		opts = append(opts, kfake.DataDir(cfg.DataDir))
	}
	if cfg.SyncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	// The session watch's own client talks to the broker as an internal
	// superuser when SASL is on, over TLS when TLS is on (to itself on
	// loopback: the certificate is not checked).
	var watch *kafka.Transport
	if len(cfg.SASLUsers) > 0 || cfg.TLS != nil {
		watch = &kafka.Transport{}
	}
	if len(cfg.SASLUsers) > 0 {
		opts = append(opts, kfake.EnableSASL())
		for u, p := range cfg.SASLUsers {
			for _, m := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
				opts = append(opts, kfake.Superuser(m, u, p))
			}
		}
		pass := make([]byte, 16)
		if _, err := rand.Read(pass); err != nil {
			return nil, err
		}
		internal := plain.Mechanism{Username: internalUser, Password: hex.EncodeToString(pass)}
		opts = append(opts, kfake.Superuser("PLAIN", internal.Username, internal.Password))
		watch.SASL = internal
	}
	if cfg.TLS != nil {
		opts = append(opts, kfake.TLS(cfg.TLS))
		watch.TLS = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the broker's own loopback connection to itself
	}
	opts = append(opts, cfg.Opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start embedded broker on %s: %w", cfg.Listen, err)
	}
	addr := c.ListenAddrs()[0]
	return &Broker{c: c, addr: addr, n: cfg.Brokers, sessions: watchSessions(c, addr, cfg.AssumedSessionTimeout, watch)}, nil
}

// internalUser is the SASL user of the broker's own session watch.
const internalUser = "hf-broker-internal"

// ReadUsersFile reads a SASL users file: one "USER PASSWORD" pair per line,
// blank lines and # comments allowed. A file readable by group or others is
// refused (chmod 600), as is a duplicate or malformed line.
func ReadUsersFile(path string) (map[string]string, error) {
	b, err := secret.ReadFile(path, "SASL users file")
	if err != nil {
		return nil, err
	}
	users := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("SASL users file %s line %d: want \"USER PASSWORD\"", path, i+1)
		}
		if f[0] == internalUser {
			return nil, fmt.Errorf("SASL users file %s line %d: %s is reserved", path, i+1, internalUser)
		}
		if _, dup := users[f[0]]; dup {
			return nil, fmt.Errorf("SASL users file %s line %d: user %s listed twice", path, i+1, f[0])
		}
		users[f[0]] = f[1]
	}
	if len(users) == 0 {
		return nil, fmt.Errorf("SASL users file %s has no user", path)
	}
	return users, nil
}

// EnsureAllTopics creates every harnessflow topic (infra/kafkatopics) that
// does not exist yet, with ReplicationFactor replicas, through the broker's
// own client: it works with SASL and TLS on, whatever this process's client
// security.
func (b *Broker) EnsureAllTopics(ctx context.Context) error {
	return kafkax.EnsureTopicsWith(ctx, b.sessions.client, kafkatopics.All(), b.TopicOption())
}

// ReplicationFactor is the most replicas a topic can have on this cluster:
// its broker count (Config.Brokers), 1 by default.
func (b *Broker) ReplicationFactor() int { return b.n }

// TopicOption is what creating topics on this embedded cluster passes to
// kafkax.EnsureTopics: every topic with ReplicationFactor replicas, since
// the declared factor (3) is for a real cluster and is otherwise refused.
func (b *Broker) TopicOption() kafkax.TopicOption {
	return kafkax.WithReplicationFactor(b.n)
}

// Addr is the first broker's host:port: the bootstrap address.
func (b *Broker) Addr() string { return b.addr }

// Addrs are every broker's host:port, the first being Addr.
func (b *Broker) Addrs() []string { return b.c.ListenAddrs() }

// Cluster exposes the kfake cluster (fault injection in tests and chaos runs).
func (b *Broker) Cluster() *kfake.Cluster { return b.c }

// Close stops the broker, flushing its data dir. Safe to call more than once.
func (b *Broker) Close() {
	b.sessions.close()
	b.c.Close()
}
