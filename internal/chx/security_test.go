package chx_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/harnessflow/harnessflow/internal/chserver"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/testenv"
)

// writeCert writes a self-signed certificate for 127.0.0.1 (its own CA)
// and its key as PEM files in dir.
func writeCert(t *testing.T, dir string) (cert, key string) {
	c := testenv.SelfSignedCert(t, dir)
	return c.Cert, c.Key
}

// TestOpenPasswordAndTLS runs a real clickhouse-server whose default user
// has a password and which serves a secure native port: Open succeeds with
// the password (over plain TCP and over TLS with the server's CA), and a
// wrong or missing password, TLS to the plain port or an untrusted
// certificate fail at once (no ping retries) with the flags to fix.
func TestOpenPasswordAndTLS(t *testing.T) {
	t.Parallel()
	t.Cleanup(func() { _ = chx.Configure(chx.Security{}) })
	ctx, cancel := testenv.Context(t)
	defer cancel()
	dir := t.TempDir()
	cert, key := writeCert(t, dir)
	otherCA, _ := writeCert(t, t.TempDir())
	const pw = "s3cret <&> pw"
	srv, err := chserver.Start(ctx, chserver.Config{DataDir: filepath.Join(dir, "ch"), Password: pw,
		TLSCertFile: cert, TLSKeyFile: key, StopTimeout: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()

	open := func(sec chx.Security, addr string) error {
		t.Helper()
		if err := chx.Configure(sec); err != nil {
			t.Fatalf("Configure(%+v): %v", sec, err)
		}
		conn, err := chx.Open(ctx, addr, "")
		if err != nil {
			return err
		}
		defer conn.Close()
		var one uint8
		if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Fatalf("SELECT 1 on %s: %d, %v", addr, one, err)
		}
		return nil
	}
	if err := open(chx.Security{Password: pw}, srv.Addr()); err != nil {
		t.Fatalf("right password: %v", err)
	}
	if err := open(chx.Security{User: "default", Password: pw, CAFile: cert}, srv.SecureAddr()); err != nil {
		t.Fatalf("right password over TLS: %v", err)
	}
	// Without TLS to the secure port: the server resets the connection,
	// which looks like an outage (retried); the error suggests TLS.
	if testing.Short() {
		t.Log("-short: not waiting out the retries of plain TCP to the secure port")
	} else if err := open(chx.Security{Password: pw}, srv.SecureAddr()); err == nil || !strings.Contains(err.Error(), "--clickhouse-tls") {
		t.Errorf("plain TCP to the secure port: err = %v, want one suggesting --clickhouse-tls", err)
	}
	for _, c := range []struct {
		name string
		sec  chx.Security
		addr string
		want string
	}{
		{"wrong password", chx.Security{Password: "guess"}, srv.Addr(), "--clickhouse-password-file"},
		{"no password", chx.Security{}, srv.Addr(), "--clickhouse-password-file"},
		{"unknown user", chx.Security{User: "nobody", Password: pw}, srv.Addr(), "--clickhouse-user"},
		{"TLS to the plain port", chx.Security{Password: pw, CAFile: cert}, srv.Addr(), "--clickhouse-tls"},
		{"untrusted certificate", chx.Security{Password: pw, TLS: true, CAFile: otherCA}, srv.SecureAddr(), "--clickhouse-ca"},
	} {
		start := time.Now()
		err := open(c.sec, c.addr)
		if err == nil || !strings.Contains(err.Error(), c.want) || !chx.Refused(err) {
			t.Errorf("%s: err = %v (Refused %v), want one naming %s", c.name, err, chx.Refused(err), c.want)
		}
		if d := time.Since(start); d > chx.PingMaxElapsed/3 {
			t.Errorf("%s: failed after %v: retried a setting error", c.name, d)
		}
	}
}

func TestRefusedIsNotAnOutage(t *testing.T) {
	t.Parallel()
	for _, err := range []error{nil, errors.New("dial tcp 127.0.0.1:9000: connect: connection refused"),
		&clickhouse.Exception{Code: 60, Message: "Table doesn't exist"}} {
		if chx.Refused(err) {
			t.Errorf("Refused(%v) = true", err)
		}
	}
	if !chx.Refused(fmt.Errorf("ping: %w", &clickhouse.Exception{Code: 516, Message: "Authentication failed"})) {
		t.Error("Refused(AUTHENTICATION_FAILED) = false")
	}
}

func TestConfigureBadCA(t *testing.T) {
	t.Parallel()
	t.Cleanup(func() { _ = chx.Configure(chx.Security{}) })
	bad := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(bad, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{bad, filepath.Join(t.TempDir(), "missing.pem")} {
		if err := chx.Configure(chx.Security{CAFile: f}); err == nil || !strings.Contains(err.Error(), "--clickhouse-ca") {
			t.Errorf("Configure(CAFile %s) = %v, want an error naming --clickhouse-ca", f, err)
		}
	}
}
