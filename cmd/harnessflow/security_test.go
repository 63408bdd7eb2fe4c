package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/chserver"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers/producerstest"
	"github.com/harnessflow/harnessflow/schemas"
)

// writeCert writes a self-signed certificate for 127.0.0.1 (its own CA)
// and its key as PEM files in dir.
func writeCert(t *testing.T, dir string) (cert, key string) {
	c := testenv.SelfSignedCert(t, dir)
	return c.Cert, c.Key
}

func writeFile(t *testing.T, path, text string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
}

// startSecuredBroker runs `harnessflow broker` with SASL users and TLS in
// this process and returns its address once it printed it.
func startSecuredBroker(t *testing.T, users, cert, key string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	root := newRoot()
	root.SetArgs([]string{"broker", "--listen", "127.0.0.1:0", "--sasl-users", users, "--tls-cert", cert, "--tls-key", key})
	root.SetOut(pw)
	root.SetErr(io.Discard)
	go func() { done <- root.ExecuteContext(ctx); pw.Close() }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("broker: %v", err)
		}
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("broker printed no address: %v (%v)", err, <-done)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	return strings.TrimSpace(line)
}

// TestSecuredBrokerAndClientFlags: `harnessflow broker --sasl-users
// --tls-cert --tls-key` refuses clients without credentials or TLS; produce
// with --kafka-* flags and consume with the HF_KAFKA_* environment reach it.
// A password file open to others is refused before anything connects.
func TestSecuredBrokerAndClientFlags(t *testing.T) {
	t.Cleanup(func() { _ = kafkax.Configure(kafkax.Security{}) })
	dir := t.TempDir()
	cert, key := writeCert(t, dir)
	users, pwFile := filepath.Join(dir, "users"), filepath.Join(dir, "pw")
	writeFile(t, users, "# user password\nsvc s3cret\n", 0o600)
	writeFile(t, pwFile, "s3cret\n", 0o600)
	addr := startSecuredBroker(t, users, cert, key)

	ev := producerstest.TaskAttempt(1, "p")
	line := prodJSONL(t, []schemas.Event{ev})[0]

	// Refusals exit 2 with what to fix: no SASL and a wrong password (the
	// broker closes the connection; after --connect-timeout) and a CA that
	// is not the broker's (at once).
	ctx := prodCtx(t, 90*time.Second)
	wrongPW := filepath.Join(dir, "wrong")
	writeFile(t, wrongPW, "guess\n", 0o600)
	otherCA, _ := writeCert(t, t.TempDir())
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no SASL", []string{"--kafka-ca", cert, "--connect-timeout", "2s"}, "--kafka-sasl"},
		{"wrong password", []string{"--kafka-sasl", "scram-sha-256", "--kafka-user", "svc", "--kafka-password-file", wrongPW, "--kafka-ca", cert, "--connect-timeout", "2s"}, "--kafka-password-file"},
		{"untrusted", []string{"--kafka-sasl", "plain", "--kafka-user", "svc", "--kafka-password-file", pwFile, "--kafka-ca", otherCA}, "--kafka-ca"},
	} {
		start := time.Now()
		code, _, stderr := prodRunCLI(t, ctx, line+"\n", append([]string{"produce", "--brokers", addr}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d after %v, want 2 and a message naming %s; stderr:\n%s", c.name, code, time.Since(start), c.want, stderr)
		}
	}

	// Flags: SCRAM over TLS.
	code, _, stderr := prodRunCLI(t, ctx, line+"\n", "produce", "--brokers", addr,
		"--kafka-sasl", "scram-sha-512", "--kafka-user", "svc", "--kafka-password-file", pwFile, "--kafka-ca", cert)
	if code != 0 {
		t.Fatalf("produce with SASL/TLS flags: exit %d; stderr:\n%s", code, stderr)
	}

	// Environment: PLAIN over TLS, read back with consume.
	t.Setenv("HF_KAFKA_SASL", "plain")
	t.Setenv("HF_KAFKA_USER", "svc")
	t.Setenv("HF_KAFKA_PASSWORD_FILE", pwFile)
	t.Setenv("HF_KAFKA_CA", cert)
	code, out, stderr := prodRunCLI(t, ctx, "", "consume", "--brokers", addr, "--topic", schemas.TopicAttempts,
		"--from-beginning", "--max", "1")
	if code != 0 {
		t.Fatalf("consume with HF_KAFKA_*: exit %d; stderr:\n%s", code, stderr)
	}
	if got := consumeLines(out); len(got) != 1 || got[0] != line {
		t.Fatalf("consumed %q, want the one event produced:\n%s", got, line)
	}

	// A password file readable by others: exit 2 naming the chmod.
	if err := os.Chmod(pwFile, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = prodRunCLI(t, ctx, "", "consume", "--brokers", addr, "--topic", schemas.TopicAttempts, "--max", "1")
	if code != 2 || !strings.Contains(stderr, "chmod 600") {
		t.Fatalf("loose password file: exit %d, stderr:\n%s", code, stderr)
	}
}

// TestClickHousePasswordAndTLSFlags runs a real clickhouse-server whose
// default user has a password and which serves a secure native port:
// migrate with --clickhouse-password-file, and report with the
// HF_CLICKHOUSE_* environment over TLS, reach it; a wrong or missing
// password and an untrusted certificate exit 2 at once naming the flag to
// fix; a password file open to others is refused before anything connects.
func TestClickHousePasswordAndTLSFlags(t *testing.T) {
	t.Cleanup(func() { _ = chx.Configure(chx.Security{}) })
	ctx := prodCtx(t, 3*time.Minute)
	dir := t.TempDir()
	cert, key := writeCert(t, dir)
	otherCA, _ := writeCert(t, t.TempDir())
	pwFile, wrongPW := filepath.Join(dir, "ch-pw"), filepath.Join(dir, "ch-wrong")
	writeFile(t, pwFile, "ch s3cret\n", 0o600)
	writeFile(t, wrongPW, "guess\n", 0o600)
	srv, err := chserver.Start(ctx, chserver.Config{DataDir: filepath.Join(dir, "ch"), Password: "ch s3cret",
		TLSCertFile: cert, TLSKeyFile: key, StopTimeout: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()

	migrate := []string{"migrate", "--clickhouse", srv.Addr(), "--database", "hfsec"}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no password", migrate, "--clickhouse-password-file"},
		{"wrong password", append(migrate, "--clickhouse-password-file", wrongPW), "--clickhouse-password-file"},
		{"wrong user", append(migrate, "--clickhouse-user", "hf", "--clickhouse-password-file", pwFile), "--clickhouse-user"},
		{"untrusted", []string{"migrate", "--clickhouse", srv.SecureAddr(), "--clickhouse-password-file", pwFile, "--clickhouse-ca", otherCA}, "--clickhouse-ca"},
		{"TLS to the plain port", append(migrate, "--clickhouse-password-file", pwFile, "--clickhouse-tls"), "--clickhouse-tls"},
	} {
		start := time.Now()
		code, _, stderr := prodRunCLI(t, ctx, "", c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) || time.Since(start) > 10*time.Second {
			t.Errorf("%s: exit %d after %v, want 2 at once and a message naming %s; stderr:\n%s", c.name, code, time.Since(start), c.want, stderr)
		}
	}

	// Flags: the password over plain TCP.
	code, out, stderr := prodRunCLI(t, ctx, "", append(migrate, "--clickhouse-password-file", pwFile)...)
	if code != 0 || !strings.Contains(out, "0001") {
		t.Fatalf("migrate with --clickhouse-password-file: exit %d; stdout:\n%s\nstderr:\n%s", code, out, stderr)
	}

	// Environment: the password over TLS, checked against the server's CA.
	t.Setenv("HF_CLICKHOUSE_USER", "default")
	t.Setenv("HF_CLICKHOUSE_PASSWORD_FILE", pwFile)
	t.Setenv("HF_CLICKHOUSE_CA", cert)
	code, out, stderr = prodRunCLI(t, ctx, "", "migrate", "--clickhouse", srv.SecureAddr(), "--database", "hfsec")
	if code != 0 || !strings.Contains(out, "0001") {
		t.Fatalf("migrate over TLS with HF_CLICKHOUSE_*: exit %d; stdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	code, out, stderr = prodRunCLI(t, ctx, "", "report", "--clickhouse", srv.SecureAddr(), "--database", "hfsec")
	if code == 2 {
		t.Fatalf("report over TLS with HF_CLICKHOUSE_*: exit %d; stdout:\n%s\nstderr:\n%s", code, out, stderr)
	}

	// A password file readable by others: exit 2 naming the flag and the chmod.
	if err := os.Chmod(pwFile, 0o640); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = prodRunCLI(t, ctx, "", "migrate", "--clickhouse", srv.SecureAddr(), "--database", "hfsec")
	if code != 2 || !strings.Contains(stderr, "chmod 600") || !strings.Contains(stderr, "--clickhouse-password-file") {
		t.Fatalf("loose password file: exit %d, stderr:\n%s", code, stderr)
	}
}

// TestSinkThroughSASLBrokerToPasswordClickHouse runs the sink between a
// broker that requires SCRAM over TLS and a ClickHouse whose default user
// has a password, served over TLS, every setting from HF_* variables: an
// attempt produced with the same settings lands in task_attempts. With a
// wrong ClickHouse password the sink exits at once naming the flag.
func TestSinkThroughSASLBrokerToPasswordClickHouse(t *testing.T) {
	t.Cleanup(func() { _ = kafkax.Configure(kafkax.Security{}); _ = chx.Configure(chx.Security{}) })
	ctx := prodCtx(t, 3*time.Minute)
	dir := t.TempDir()
	cert, key := writeCert(t, dir)
	users, kafkaPW, chPW, wrongPW := filepath.Join(dir, "users"), filepath.Join(dir, "kafka-pw"), filepath.Join(dir, "ch-pw"), filepath.Join(dir, "wrong")
	writeFile(t, users, "svc s3cret\n", 0o600)
	writeFile(t, kafkaPW, "s3cret\n", 0o600)
	writeFile(t, chPW, "ch s3cret\n", 0o600)
	writeFile(t, wrongPW, "guess\n", 0o600)
	addr := startSecuredBroker(t, users, cert, key)
	srv, err := chserver.Start(ctx, chserver.Config{DataDir: filepath.Join(dir, "ch"), Password: "ch s3cret",
		TLSCertFile: cert, TLSKeyFile: key, StopTimeout: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	for k, v := range map[string]string{"HF_KAFKA_SASL": "scram-sha-256", "HF_KAFKA_USER": "svc", "HF_KAFKA_PASSWORD_FILE": kafkaPW,
		"HF_KAFKA_CA": cert, "HF_CLICKHOUSE_PASSWORD_FILE": chPW, "HF_CLICKHOUSE_CA": cert} {
		t.Setenv(k, v)
	}
	sink := []string{"sink", "--brokers", addr, "--clickhouse", srv.SecureAddr(), "--database", "hfsink", "--listen", "127.0.0.1:0"}

	start := time.Now()
	code, _, stderr := prodRunCLI(t, ctx, "", append(sink, "--clickhouse-password-file", wrongPW)...)
	if code == 0 || !strings.Contains(stderr, "--clickhouse-password-file") || time.Since(start) > 15*time.Second {
		t.Fatalf("sink with a wrong ClickHouse password: exit %d after %v, want a failure at once naming --clickhouse-password-file; stderr:\n%s",
			code, time.Since(start), stderr)
	}

	sctx, stop := context.WithCancel(ctx)
	defer stop()
	type exit struct {
		code   int
		stderr string
	}
	done := make(chan exit, 1)
	go func() {
		code, _, stderr := prodRunCLI(t, sctx, "", sink...)
		done <- exit{code, stderr}
	}()
	line := prodJSONL(t, []schemas.Event{producerstest.TaskAttempt(1, "p")})[0]
	if code, _, stderr := prodRunCLI(t, ctx, line+"\n", "produce", "--brokers", addr); code != 0 {
		t.Fatalf("produce: exit %d; stderr:\n%s", code, stderr)
	}
	var n uint64
	for deadline := time.Now().Add(90 * time.Second); n == 0; {
		select {
		case e := <-done:
			t.Fatalf("sink exited with %d: %s", e.code, e.stderr)
		default:
		}
		if conn, err := chx.Open(ctx, srv.SecureAddr(), "hfsink"); err == nil {
			_ = conn.QueryRow(ctx, "SELECT count() FROM task_attempts").Scan(&n)
			conn.Close()
		}
		if n == 0 && time.Now().After(deadline) {
			t.Fatal("the attempt did not reach task_attempts within 90s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	stop()
	if e := <-done; e.code != 0 {
		t.Fatalf("sink: exit %d; stderr:\n%s", e.code, e.stderr)
	}
}
