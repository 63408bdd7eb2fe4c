package chserver_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/chserver"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/testenv"
)

func TestStartKillRestartKeepsData(t *testing.T) {
	t.Parallel()
	ctx, cancel := testenv.Context(t)
	defer cancel()
	srv, err := chserver.Start(ctx, chserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if srv.Version() == "" || !strings.Contains(srv.Version(), ".") {
		t.Fatalf("Version() = %q", srv.Version())
	}
	// The server runs with the allocator setting, or the operator's own.
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", srv.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	want := "MALLOC_CONF=" + chserver.AllocatorConf
	if v, ok := os.LookupEnv("MALLOC_CONF"); ok {
		want = "MALLOC_CONF=" + v
	}
	if !slices.Contains(strings.Split(string(environ), "\x00"), want) {
		t.Fatalf("server environment lacks %s", want)
	}
	conn, err := chx.Open(ctx, srv.Addr(), "")
	if err != nil {
		t.Fatal(err)
	}
	v, err := chx.ServerVersion(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if v.Raw != srv.Version() || v.Major == 0 {
		t.Fatalf("chx.ServerVersion = %+v, server says %q", v, srv.Version())
	}
	for _, q := range []string{
		"CREATE DATABASE IF NOT EXISTS keep",
		"CREATE TABLE keep.t (x UInt64) ENGINE = MergeTree ORDER BY x",
		"INSERT INTO keep.t (x) SELECT number FROM system.numbers LIMIT 1000",
	} {
		if err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	conn.Close()

	cfg := srv.Config()
	srv.Kill()
	select {
	case <-srv.Done():
	default:
		t.Fatal("Kill returned before the process exited")
	}
	if err := srv.Stop(); err != nil {
		t.Fatalf("Stop after Kill: %v", err)
	}
	if c, err := net.DialTimeout("tcp", srv.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("port still accepts connections after Kill")
	}

	srv2, err := chserver.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("restart on the same data dir and ports: %v", err)
	}
	if srv2.Addr() != srv.Addr() || srv2.HTTPAddr() != srv.HTTPAddr() {
		t.Fatalf("restart moved: %s/%s -> %s/%s", srv.Addr(), srv.HTTPAddr(), srv2.Addr(), srv2.HTTPAddr())
	}
	conn2, err := chx.Open(ctx, srv2.Addr(), "keep")
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	if err := conn2.QueryRow(ctx, "SELECT count() FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	conn2.Close()
	if n != 1000 {
		t.Fatalf("rows after restart = %d, want 1000", n)
	}
	if err := srv2.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := srv2.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if c, err := net.DialTimeout("tcp", srv2.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("port still accepts connections after Stop")
	}
}

func TestStartFailsWithInstallHintWithoutBinary(t *testing.T) {
	t.Parallel()
	_, err := chserver.Start(context.Background(), chserver.Config{
		DataDir: t.TempDir(), Binary: "no-such-clickhouse-binary-for-harnessflow",
	})
	if !errors.Is(err, chserver.ErrNoBinary) {
		t.Fatalf("err = %v, want ErrNoBinary", err)
	}
	if !strings.Contains(err.Error(), "apt-get install clickhouse-server") {
		t.Fatalf("error does not say how to install: %v", err)
	}
}

func TestStartReportsServerErrorsWithLogTail(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port
	ctx, cancel := testenv.Context(t)
	defer cancel()
	srv, err := chserver.Start(ctx, chserver.Config{DataDir: t.TempDir(), TCPPort: busy})
	if err == nil {
		srv.Stop()
		t.Fatalf("started on a busy port %d", busy)
	}
	if !errors.Is(err, chserver.ErrExited) {
		t.Fatalf("err = %v, want ErrExited", err)
	}
	if !strings.Contains(err.Error(), "tail of") || !strings.Contains(strings.ToLower(err.Error()), "address already in use") {
		t.Fatalf("error lacks the server's log tail: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	c := chserver.Config{TCPPort: 70000, HTTPPort: -1}
	err := c.Validate()
	if err == nil || !errors.Is(err, chserver.ErrNoDataDir) || !strings.Contains(err.Error(), "TCPPort") || !strings.Contains(err.Error(), "HTTPPort") {
		t.Fatalf("Validate = %v, want every problem", err)
	}
	c = chserver.Config{DataDir: "d", TLSCertFile: "cert.pem"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "TLSKeyFile") {
		t.Fatalf("Validate(cert without key) = %v", err)
	}
}
