package chx

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// DefaultUser is the ClickHouse user Open connects as unless Security names
// another.
const DefaultUser = "default"

// Security is how this process's ClickHouse connections authenticate and
// encrypt. The zero value is the user "default" without a password over
// plain TCP, as before. One process talks to one ClickHouse server, so it is
// set once, at start-up (Configure), and every Open uses it.
type Security struct {
	// User is the ClickHouse user. Default: DefaultUser.
	User string
	// Password is User's password. Default: none.
	Password string
	// TLS dials the server's secure native port (tcp_port_secure, usually
	// 9440) over TLS and checks its certificate.
	TLS bool
	// CAFile is a PEM file of the CA certificates that sign the server's
	// certificate; empty: the system's roots. Implies TLS.
	CAFile string
}

// secured is what Configure built.
type secured struct {
	user, password string
	tls            *tls.Config // nil: plain TCP
}

var current atomic.Pointer[secured]

// Configure makes s the security of every connection Open makes from now
// on. It loads the CA file; a bad setting is an error that names the flag to
// fix. Safe for concurrent use, but meant to be called once, before Open.
func Configure(s Security) error {
	out := secured{user: s.User, password: s.Password}
	if out.user == "" {
		out.user = DefaultUser
	}
	if s.TLS || s.CAFile != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if s.CAFile != "" {
			pem, err := os.ReadFile(s.CAFile)
			if err != nil {
				return fmt.Errorf("--clickhouse-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return fmt.Errorf("--clickhouse-ca %s: no PEM certificate in it", s.CAFile)
			}
			cfg.RootCAs = pool
		}
		out.tls = cfg
	}
	if out.user == DefaultUser && out.password == "" && out.tls == nil {
		current.Store(nil)
		return nil
	}
	current.Store(&out)
	return nil
}

// security returns what Configure set, or the defaults.
func security() secured {
	if s := current.Load(); s != nil {
		return *s
	}
	return secured{user: DefaultUser}
}

// dialTLS runs the TLS handshake over c with cfg, checking the certificate
// against the host of addr unless cfg names a server.
func dialTLS(ctx context.Context, c net.Conn, addr string, cfg *tls.Config) (net.Conn, error) {
	cfg = cfg.Clone()
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		cfg.ServerName = host
	}
	tc := tls.Client(c, cfg)
	hctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		c.Close()
		return nil, &tlsError{err: err}
	}
	return tc, nil
}

// tlsError is a failed TLS handshake: a setting to fix, not an outage.
type tlsError struct{ err error }

func (e *tlsError) Error() string {
	return fmt.Sprintf("tls handshake: %v (check --clickhouse-tls and --clickhouse-ca: the server's secure native port, usually 9440, and the CA that signed its certificate)", e.err)
}

func (e *tlsError) Unwrap() error { return e.err }

// authCodes are the server's exception codes for a refused login.
var authCodes = map[int32]bool{
	192: true, // UNKNOWN_USER
	193: true, // WRONG_PASSWORD
	194: true, // REQUIRED_PASSWORD
	195: true, // IP_ADDRESS_NOT_ALLOWED
	516: true, // AUTHENTICATION_FAILED
}

// Refused reports whether err is the server refusing this process's
// settings rather than an outage: a refused login (wrong user or password)
// or a TLS handshake that failed on a certificate or on a port that does not
// speak TLS. Retrying such an error cannot succeed until the operator fixes
// the flags.
func Refused(err error) bool {
	_, fix := explainOpenError(err, "")
	return fix
}

// Transient reports whether a failure to connect to or prepare ClickHouse
// (a ping, a migration) is an outage worth waiting out: Retryable, and
// neither a missing address nor settings the server refuses (Refused).
// A long-running service retries such an error instead of exiting.
func Transient(err error) bool {
	return Retryable(err) && !Refused(err) && !errors.Is(err, ErrNoAddr)
}

// explainOpenError turns a failed first ping into what to fix: a refused
// login names the credential flags, a failed TLS handshake the TLS ones.
func explainOpenError(err error, user string) (error, bool) {
	var ex *clickhouse.Exception
	if errors.As(err, &ex) && authCodes[ex.Code] {
		return fmt.Errorf("%w: ClickHouse refused user %q: check --clickhouse-user and --clickhouse-password-file (HF_CLICKHOUSE_USER, HF_CLICKHOUSE_PASSWORD_FILE)", err, user), true
	}
	var te *tlsError
	if errors.As(err, &te) && badTLSSetting(te.err) {
		return err, true
	}
	return err, false
}

// closedAfterConnect reports whether err is a connection that was made and
// then reset or closed by the server before it answered, as a secure port
// does to a client that does not speak TLS.
func closedAfterConnect(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "read" {
		return true
	}
	return errors.Is(err, io.EOF)
}

// badTLSSetting reports whether a handshake failed on a setting (a
// certificate not trusted or for another host, a port that does not speak
// TLS, the server's refusal) rather than on the network.
func badTLSSetting(err error) bool {
	var (
		verr *tls.CertificateVerificationError
		uerr x509.UnknownAuthorityError
		herr x509.HostnameError
		cerr x509.CertificateInvalidError
		rerr tls.RecordHeaderError
		aerr tls.AlertError
	)
	return errors.As(err, &verr) || errors.As(err, &uerr) || errors.As(err, &herr) ||
		errors.As(err, &cerr) || errors.As(err, &rerr) || errors.As(err, &aerr)
}
