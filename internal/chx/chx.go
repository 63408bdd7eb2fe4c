// Package chx opens harnessflow's ClickHouse connections: clickhouse-go/v2 over
// the native protocol (its HTTP mode fails on 18.16), LZ4 compression, explicit
// timeouts and a bounded retry of the first ping.
package chx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/retry"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// DefaultAddr is the ClickHouse native-protocol address every command dials
// unless told otherwise.
const DefaultAddr = "127.0.0.1:9000"

// ErrNoAddr is returned when no ClickHouse address is given.
var ErrNoAddr = errors.New("no ClickHouse address given: pass --clickhouse host:port (native protocol, usually 9000) or set HF_CLICKHOUSE")

// Timeouts and pool sizes used by Open.
const (
	// DialTimeout bounds one TCP connect and handshake.
	DialTimeout = 5 * time.Second
	// ReadTimeout bounds one read from the server; long analyst queries and
	// large inserts stay well below it.
	ReadTimeout = 5 * time.Minute
	// PingMaxElapsed bounds the retries of the first ping (a server still
	// starting, a restart in progress).
	PingMaxElapsed = 30 * time.Second
	// WriteTimeout bounds one write to a connection's socket. clickhouse-go
	// ties a context's deadline to the socket only inside some calls (a
	// batch's Send, not its Flush), so without it a write to a server that
	// stopped reading could block for as long as TCP retransmits.
	WriteTimeout = 2 * time.Minute
	// MaxOpenConns and MaxIdleConns size the connection pool.
	MaxOpenConns = 16
	MaxIdleConns = 8
)

// Open connects to the ClickHouse server at addr (host:port of the native
// protocol) with database as the default database ("" = the server's default),
// and pings it, retrying transient failures with exponential backoff for up to
// PingMaxElapsed or until ctx ends. A server-side error (unknown database, bad
// credentials) is not retried, nor is a TLS setting the server refuses; both
// errors name the flags to fix. It connects with the user, password and TLS
// that Configure set (default: user "default", no password, plain TCP). The
// returned conn is safe for concurrent use.
func Open(ctx context.Context, addr, database string, opts ...OpenOption) (driver.Conn, error) {
	if strings.TrimSpace(addr) == "" {
		return nil, ErrNoAddr
	}
	sec := security()
	var settings clickhouse.Settings
	for _, o := range opts {
		if settings == nil {
			settings = clickhouse.Settings{}
		}
		o(settings)
	}
	conn, err := clickhouse.Open(&clickhouse.Options{
		Settings: settings,
		Protocol: clickhouse.Native,
		Addr:     strings.Split(addr, ","),
		Auth:     clickhouse.Auth{Database: database, Username: sec.user, Password: sec.password},
		Compression: &clickhouse.Compression{
			Method: clickhouse.CompressionLZ4,
		},
		DialContext: func(ctx context.Context, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: DialTimeout}
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			if sec.tls != nil {
				if c, err = dialTLS(ctx, c, addr, sec.tls); err != nil {
					return nil, err
				}
			}
			return newWriteDeadlineConn(c, WriteTimeout), nil
		},
		DialTimeout:     DialTimeout,
		ReadTimeout:     ReadTimeout,
		MaxOpenConns:    MaxOpenConns,
		MaxIdleConns:    MaxIdleConns,
		ConnMaxLifetime: time.Hour,
		ClientInfo: clickhouse.ClientInfo{Products: []struct {
			Name    string
			Version string
		}{{Name: "harnessflow", Version: "1"}}},
	})
	if err != nil {
		return nil, fmt.Errorf("clickhouse %s: %w", addr, err)
	}
	err = retry.Do(ctx, retry.Policy{Initial: 50 * time.Millisecond, Max: 2 * time.Second, MaxElapsed: PingMaxElapsed}, func() error {
		pctx, cancel := context.WithTimeout(ctx, DialTimeout)
		defer cancel()
		if err := conn.Ping(pctx); err != nil {
			if err, fix := explainOpenError(err, sec.user); fix || !Retryable(err) {
				return retry.Permanent(err)
			}
			return err
		}
		return nil
	}, nil)
	if err != nil {
		conn.Close()
		if sec.tls == nil && closedAfterConnect(err) {
			return nil, fmt.Errorf("clickhouse %s: ping: %w (the server closed the connection: if %s is its secure port, add --clickhouse-tls or --clickhouse-ca)", addr, err, addr)
		}
		return nil, fmt.Errorf("clickhouse %s: ping: %w", addr, err)
	}
	return conn, nil
}

// OpenOption adds query settings to every query of a connection.
type OpenOption func(clickhouse.Settings)

// Cluster makes a connection fit for writing to harnessflow's Distributed
// tables on a cluster (infra/chddl/cluster.go): an INSERT returns only once
// its rows are stored on a replica of every shard they go to
// (insert_distributed_sync = 1), not when the node that was asked has
// queued them for sending, so that a writer that commits Kafka offsets
// after the insert commits only what is stored. A node that goes down
// after receiving rows would otherwise take its queue with it.
func Cluster() OpenOption {
	return func(s clickhouse.Settings) { s["insert_distributed_sync"] = 1 }
}

// Retryable reports whether err is worth retrying: network failures, timeouts,
// a server that is shutting down or overloaded, and on a cluster a replica
// or ZooKeeper that is away (a Distributed query's connection to a restarted
// node, a replicated table read-only while its ZooKeeper session is lost)
// are; an error the server returned about the query itself (syntax, unknown
// table or column, type mismatch, unknown database) is not.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		switch ex.Code {
		case 95, // CANNOT_READ_FROM_SOCKET
			96,  // CANNOT_WRITE_TO_SOCKET
			159, // TIMEOUT_EXCEEDED
			202, // TOO_MANY_SIMULTANEOUS_QUERIES
			203, // NO_FREE_CONNECTION
			209, // SOCKET_TIMEOUT
			210, // NETWORK_ERROR
			225, // NO_ZOOKEEPER
			241, // MEMORY_LIMIT_EXCEEDED
			242, // TABLE_IS_READ_ONLY (a replica without its ZooKeeper session)
			244, // UNEXPECTED_ZOOKEEPER_ERROR
			252, // TOO_MANY_PARTS
			254, // NO_ACTIVE_REPLICAS
			265, // NO_AVAILABLE_REPLICA
			279, // ALL_CONNECTION_TRIES_FAILED
			285, // TOO_FEW_LIVE_REPLICAS
			286, // UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE
			319, // UNKNOWN_STATUS_OF_INSERT
			369, // ALL_REPLICAS_ARE_STALE
			415, // ALL_REPLICAS_LOST
			425, // SYSTEM_ERROR
			999: // KEEPER_EXCEPTION
			return true
		case 3, 32: // UNEXPECTED_END_OF_FILE, ATTEMPT_TO_READ_AFTER_EOF
			// From a peer's connection (a Distributed query reading a
			// node that restarted: "while receiving packet from …") it
			// is the network; from the data a client sent, the query's.
			return strings.Contains(ex.Message, "while receiving packet from") ||
				strings.Contains(ex.Message, "while reading from socket")
		}
		return false
	}
	return true
}

// ServerVersion asks the server for its version (`SELECT version()`), for
// choosing optional features (docs/design.md §2).
func ServerVersion(ctx context.Context, conn driver.Conn) (chddl.Version, error) {
	var raw string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&raw); err != nil {
		return chddl.Version{}, fmt.Errorf("server version: %w", err)
	}
	return chddl.ParseVersion(raw), nil
}

// Session adapts a clickhouse-go connection to chddl.Session, the two calls
// migrations need.
func Session(conn driver.Conn) chddl.Session { return session{conn} }

type session struct{ conn driver.Conn }

func (s session) Exec(ctx context.Context, query string) error { return s.conn.Exec(ctx, query) }

func (s session) QueryStrings(ctx context.Context, query string) ([]string, [][]string, error) {
	return QueryStrings(ctx, s.conn, query)
}

// writeDeadlineConn bounds every Write by timeout, or by the deadline its
// user set if that is sooner (a deadline set through SetDeadline or
// SetWriteDeadline is never extended).
type writeDeadlineConn struct {
	net.Conn
	timeout time.Duration
	mu      sync.Mutex
	user    time.Time // the user's write deadline; zero: none
}

func newWriteDeadlineConn(c net.Conn, timeout time.Duration) *writeDeadlineConn {
	return &writeDeadlineConn{Conn: c, timeout: timeout}
}

func (c *writeDeadlineConn) Write(b []byte) (int, error) {
	d := time.Now().Add(c.timeout)
	c.mu.Lock()
	if !c.user.IsZero() && c.user.Before(d) {
		d = c.user
	}
	c.mu.Unlock()
	if err := c.Conn.SetWriteDeadline(d); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

func (c *writeDeadlineConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.user = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *writeDeadlineConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.user = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}
