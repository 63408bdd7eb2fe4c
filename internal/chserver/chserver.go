// Package chserver runs a local clickhouse-server as a child process with a data
// dir of its own, on loopback ports: the embedded ClickHouse of `harnessflow up`
// and of the tests (docs/design.md §2).
//
// It works with Debian's clickhouse-server 18.16 and with current single-binary
// releases (`clickhouse server`). The config it writes uses only options both
// understand, under the `<yandex>` root element that 18.16 requires and newer
// versions still accept.
package chserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Config configures a managed server.
type Config struct {
	// DataDir holds the config files, the data, the logs and the child's stderr.
	// It is created when missing. Required.
	DataDir string
	// Binary is the server executable: a `clickhouse-server` or a single
	// `clickhouse` binary (run as `clickhouse server`).
	// Default: the first of clickhouse-server, clickhouse found on PATH (then in
	// /usr/sbin and /usr/bin, where Debian's package installs them).
	Binary string
	// TCPPort is the native-protocol port on 127.0.0.1. Default: 0 (a free port).
	TCPPort int
	// HTTPPort is the HTTP port on 127.0.0.1. Default: 0 (a free port).
	HTTPPort int
	// StartTimeout bounds the wait until the server answers. Default: 60s.
	StartTimeout time.Duration
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL. Default: 30s.
	StopTimeout time.Duration
	// Password is the password of the server's one user, `default`,
	// stored as its SHA-256 (password_sha256_hex). Default: none.
	Password string
	// TLSCertFile and TLSKeyFile are the PEM certificate and key of a secure
	// native port (tcp_port_secure) on 127.0.0.1, served beside the plain
	// one. Default: none (no secure port).
	TLSCertFile, TLSKeyFile string
	// TCPPortSecure is the secure native port when TLSCertFile is set.
	// Default: 0 (a free port).
	TCPPortSecure int
	// MaxServerMemory caps the server's memory (max_server_memory_usage, ignored
	// by versions that lack it) and each query's (max_memory_usage).
	// Default: 4 GiB.
	MaxServerMemory int64
	// ExtraConfig is XML added inside config.xml's root element as it is:
	// a cluster node's remote_servers, macros, zookeeper, distributed_ddl
	// and interserver settings (internal/chcluster writes them). Default: none.
	ExtraConfig string
}

// AllocatorConf is the MALLOC_CONF the server runs with unless the
// environment sets one: its jemalloc (Debian's package links the system's
// libjemalloc, which reads MALLOC_CONF) keeps the pages it frees for reuse
// instead of handing them back to the kernel. By default jemalloc returns
// freed pages over 10 s and allocations of 8 MiB or more at once; every
// insert and merge then takes its buffers back as fresh pages, each a page
// fault and a zeroed page. In a bench e2e throughput run that was 385 000
// faults in 20 s and about a third of the server's CPU (perf: page-fault
// handling and clear_page); with this setting 90 000. The cost is that the
// server's resident memory stays at its peak (bounded by MaxServerMemory)
// rather than shrinking when idle. Other allocators ignore the variable.
const AllocatorConf = "dirty_decay_ms:-1,muzzy_decay_ms:-1,oversize_threshold:0"

// childEnv is the server's environment: env with MALLOC_CONF=AllocatorConf
// added unless env sets MALLOC_CONF (an operator's choice wins).
func childEnv(env []string) []string {
	for _, kv := range env {
		if strings.HasPrefix(kv, "MALLOC_CONF=") {
			return env
		}
	}
	return append(env[:len(env):len(env)], "MALLOC_CONF="+AllocatorConf)
}

func (c *Config) setDefaults() {
	if c.StartTimeout == 0 {
		c.StartTimeout = 60 * time.Second
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = 30 * time.Second
	}
	if c.MaxServerMemory == 0 {
		c.MaxServerMemory = 4 << 30
	}
}

// Validate reports every problem of the config.
func (c *Config) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, ErrNoDataDir)
	}
	if c.TCPPort < 0 || c.TCPPort > 65535 {
		errs = append(errs, fmt.Errorf("chserver: TCPPort %d out of range", c.TCPPort))
	}
	if c.HTTPPort < 0 || c.HTTPPort > 65535 {
		errs = append(errs, fmt.Errorf("chserver: HTTPPort %d out of range", c.HTTPPort))
	}
	if c.TCPPort != 0 && c.TCPPort == c.HTTPPort {
		errs = append(errs, fmt.Errorf("chserver: TCPPort and HTTPPort are both %d", c.TCPPort))
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		errs = append(errs, errors.New("chserver: TLSCertFile and TLSKeyFile go together"))
	}
	if c.TCPPortSecure < 0 || c.TCPPortSecure > 65535 {
		errs = append(errs, fmt.Errorf("chserver: TCPPortSecure %d out of range", c.TCPPortSecure))
	}
	return errors.Join(errs...)
}

// Server is a running clickhouse-server child process. Its methods are safe for
// concurrent use.
type Server struct {
	cfg     Config // resolved: absolute DataDir, Binary and ports filled in
	args    []string
	version string

	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	werr error         // the process's exit status, valid after done

	stopOnce sync.Once
	stopErr  error
}

// FindBinary returns the server executable to run: bin when it is not empty
// (looked up on PATH when it has no slash), else the first of
// clickhouse-server and clickhouse found on PATH or in Debian's install
// directories. The error wraps ErrNoBinary.
func FindBinary(bin string) (string, error) {
	if bin != "" {
		p, err := exec.LookPath(bin)
		if err != nil {
			return "", fmt.Errorf("%w: %s: %w", ErrNoBinary, bin, err)
		}
		return p, nil
	}
	for _, name := range []string{"clickhouse-server", "clickhouse"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	for _, dir := range []string{"/usr/sbin", "/usr/bin", "/usr/local/bin"} {
		for _, name := range []string{"clickhouse-server", "clickhouse"} {
			p := filepath.Join(dir, name)
			if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
				return p, nil
			}
		}
	}
	return "", ErrNoBinary
}

// Start writes a config into cfg.DataDir, starts the server and waits until it
// answers queries, bounded by cfg.StartTimeout and ctx. ctx governs the start
// only; the server runs until Stop or Kill. Starting again with the Config that
// Server.Config returns reuses the same data dir and ports (after Kill or Stop).
func Start(ctx context.Context, cfg Config) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	bin, err := FindBinary(cfg.Binary)
	if err != nil {
		return nil, err
	}
	cfg.Binary = bin
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("chserver: data dir: %w", err)
	}
	cfg.DataDir = dir
	for _, f := range []*string{&cfg.TLSCertFile, &cfg.TLSKeyFile} {
		if *f != "" {
			if *f, err = filepath.Abs(*f); err != nil {
				return nil, fmt.Errorf("chserver: tls: %w", err)
			}
		}
	}
	for _, sub := range []string{"data", "tmp", "user_files", "format_schemas", "log"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, fmt.Errorf("chserver: %w", err)
		}
	}
	// Free ports are picked by binding and releasing them, which can race with
	// another process; when the server then fails to bind, try new ports.
	secure := cfg.TLSCertFile != ""
	autoPorts := cfg.TCPPort == 0 || cfg.HTTPPort == 0 || (secure && cfg.TCPPortSecure == 0)
	tries := 1
	if autoPorts {
		tries = 3
	}
	var lastErr error
	for i := 0; i < tries; i++ {
		c := cfg
		if autoPorts {
			ports, err := freePorts(3)
			if err != nil {
				return nil, fmt.Errorf("chserver: free ports: %w", err)
			}
			if c.TCPPort == 0 {
				c.TCPPort = ports[0]
			}
			if c.HTTPPort == 0 {
				c.HTTPPort = ports[1]
			}
			if secure && c.TCPPortSecure == 0 {
				c.TCPPortSecure = ports[2]
			}
		}
		s, err := start(ctx, c)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if !errors.Is(err, ErrExited) || ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func start(ctx context.Context, cfg Config) (*Server, error) {
	if err := writeConfig(cfg); err != nil {
		return nil, err
	}
	confPath := filepath.Join(cfg.DataDir, "config.xml")
	var args []string
	if filepath.Base(cfg.Binary) == "clickhouse" {
		args = append(args, "server")
	}
	args = append(args, "--config-file="+confPath)
	stderrPath := filepath.Join(cfg.DataDir, "log", "stderr.log")
	errFile, err := os.OpenFile(stderrPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("chserver: %w", err)
	}
	fmt.Fprintf(errFile, "--- %s start %s %s\n", time.Now().UTC().Format(time.RFC3339), cfg.Binary, strings.Join(args, " "))
	cmd := exec.Command(cfg.Binary, args...)
	cmd.Dir = cfg.DataDir
	cmd.Env = childEnv(os.Environ())
	cmd.Stdout = errFile
	cmd.Stderr = errFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		errFile.Close()
		return nil, fmt.Errorf("chserver: run %s: %w", cfg.Binary, err)
	}
	s := &Server{cfg: cfg, args: args, cmd: cmd, done: make(chan struct{})}
	go func() {
		s.werr = cmd.Wait()
		errFile.Close()
		close(s.done)
	}()
	if err := s.waitReady(ctx); err != nil {
		s.Kill()
		return nil, fmt.Errorf("%w\n%s", err, s.logTail())
	}
	return s, nil
}

// waitReady polls the HTTP interface with `SELECT version()` and the native
// port with a TCP dial until both answer.
func (s *Server) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(s.cfg.StartTimeout)
	client := &http.Client{Timeout: 2 * time.Second}
	q := "http://" + s.HTTPAddr() + "/?query=" + url.QueryEscape("SELECT version()")
	delay := 20 * time.Millisecond
	for {
		select {
		case <-s.done:
			return fmt.Errorf("%w (%w) on tcp %d / http %d", ErrExited, s.werr, s.cfg.TCPPort, s.cfg.HTTPPort)
		default:
		}
		if v, err := httpGet(ctx, client, q, s.cfg.Password); err == nil {
			if c, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
				c.Close()
				ok := true
				if sa := s.SecureAddr(); sa != "" {
					c, err := net.DialTimeout("tcp", sa, time.Second)
					if ok = err == nil; ok {
						c.Close()
					}
				}
				if ok {
					s.version = strings.TrimSpace(v)
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: no answer on %s within %s", ErrNotReady, s.HTTPAddr(), s.cfg.StartTimeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("chserver: start: %w", ctx.Err())
		case <-s.done:
		case <-time.After(delay):
		}
		if delay < 250*time.Millisecond {
			delay *= 2
		}
	}
}

func httpGet(ctx context.Context, client *http.Client, u, password string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	if password != "" {
		req.SetBasicAuth("default", password)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("http %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	return string(b), nil
}

// Addr is the native-protocol address, 127.0.0.1:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.cfg.TCPPort)) }

// SecureAddr is the secure native-protocol (TLS) address, 127.0.0.1:port,
// or "" when the server has no TLS certificate.
func (s *Server) SecureAddr() string {
	if s.cfg.TLSCertFile == "" {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.cfg.TCPPortSecure))
}

// HTTPAddr is the HTTP interface's address, 127.0.0.1:port.
func (s *Server) HTTPAddr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.cfg.HTTPPort))
}

// Version is the server's version string, e.g. "18.16.1".
func (s *Server) Version() string { return s.version }

// DataDir is the server's data dir (absolute).
func (s *Server) DataDir() string { return s.cfg.DataDir }

// Pid returns the server process's id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Config returns the resolved config (absolute data dir, binary path and the
// ports in use): pass it to Start to run the server again on the same data dir
// and ports.
func (s *Server) Config() Config { return s.cfg }

// Done is closed when the server process has exited.
func (s *Server) Done() <-chan struct{} { return s.done }

// Stop sends SIGTERM, waits up to Config.StopTimeout for a clean exit, then
// sends SIGKILL. It is idempotent; later calls return the first call's result.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		select {
		case <-s.done:
			return
		default:
		}
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
			var ee *exec.ExitError
			if s.werr != nil && !errors.As(s.werr, &ee) {
				s.stopErr = fmt.Errorf("chserver: stop: %w", s.werr)
			}
		case <-time.After(s.cfg.StopTimeout):
			_ = s.cmd.Process.Kill()
			<-s.done
			s.stopErr = fmt.Errorf("chserver: stop: no exit %s after SIGTERM, killed", s.cfg.StopTimeout)
		}
	})
	return s.stopErr
}

// Kill sends SIGKILL and waits for the process to exit, as a crash or an
// outage would. Stop after Kill is a no-op.
func (s *Server) Kill() {
	s.stopOnce.Do(func() {})
	_ = s.cmd.Process.Kill()
	<-s.done
}

// logTail returns the end of the child's stderr and of the server's error log.
func (s *Server) logTail() string {
	var b strings.Builder
	for _, name := range []string{"stderr.log", "clickhouse-server.err.log"} {
		p := filepath.Join(s.cfg.DataDir, "log", name)
		fmt.Fprintf(&b, "--- tail of %s:\n%s\n", p, tail(p, 4096))
	}
	return b.String()
}

func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "(" + err.Error() + ")"
	}
	off := st.Size() - n
	if off < 0 {
		off = 0
	}
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return "(" + err.Error() + ")"
	}
	return strings.TrimSpace(string(b))
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func xmlText(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// writeConfig writes config.xml and users.xml into the data dir. Only options
// that 18.16 and current releases both understand are used; the root element
// is <yandex>, which 18.16 requires and current releases accept.
func writeConfig(cfg Config) error {
	d := cfg.DataDir
	p := func(sub string) string { return xmlText(filepath.Join(d, sub) + "/") }
	conf := fmt.Sprintf(`<?xml version="1.0"?>
<!-- Written by harnessflow (internal/chserver) at every start; edits are overwritten. -->
<yandex>
    <logger>
        <level>warning</level>
        <log>%s</log>
        <errorlog>%s</errorlog>
        <size>100M</size>
        <count>3</count>
    </logger>
    <listen_host>127.0.0.1</listen_host>
    <tcp_port>%d</tcp_port>
    <http_port>%d</http_port>
%s    <path>%s</path>
    <tmp_path>%s</tmp_path>
    <user_files_path>%s</user_files_path>
    <format_schema_path>%s</format_schema_path>
    <users_config>users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <max_concurrent_queries>100</max_concurrent_queries>
    <mark_cache_size>67108864</mark_cache_size>
    <uncompressed_cache_size>67108864</uncompressed_cache_size>
    <max_server_memory_usage>%d</max_server_memory_usage>
%s</yandex>
`, xmlText(filepath.Join(d, "log", "clickhouse-server.log")), xmlText(filepath.Join(d, "log", "clickhouse-server.err.log")),
		cfg.TCPPort, cfg.HTTPPort, secureConfig(cfg), p("data"), p("tmp"), p("user_files"), p("format_schemas"), cfg.MaxServerMemory, cfg.ExtraConfig)
	users := fmt.Sprintf(`<?xml version="1.0"?>
<!-- Written by harnessflow (internal/chserver): one local user, loopback only. -->
<yandex>
    <profiles>
        <default>
            <max_memory_usage>%d</max_memory_usage>
        </default>
    </profiles>
    <users>
        <default>
            %s
            <networks>
                <ip>::1</ip>
                <ip>127.0.0.1</ip>
            </networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
    </users>
    <quotas>
        <default>
            <interval>
                <duration>3600</duration>
                <queries>0</queries>
                <errors>0</errors>
                <result_rows>0</result_rows>
                <read_rows>0</read_rows>
                <execution_time>0</execution_time>
            </interval>
        </default>
    </quotas>
</yandex>
`, cfg.MaxServerMemory, passwordConfig(cfg.Password))
	if err := os.WriteFile(filepath.Join(d, "config.xml"), []byte(conf), 0o644); err != nil {
		return fmt.Errorf("chserver: write config: %w", err)
	}
	if err := os.WriteFile(filepath.Join(d, "users.xml"), []byte(users), 0o600); err != nil {
		return fmt.Errorf("chserver: write users: %w", err)
	}
	return nil
}

// passwordConfig is the users.xml element of the default user's password:
// its SHA-256 when there is one (18.16 and current releases read
// password_sha256_hex), else an empty password.
func passwordConfig(password string) string {
	if password == "" {
		return "<password></password>"
	}
	sum := sha256.Sum256([]byte(password))
	return "<password_sha256_hex>" + hex.EncodeToString(sum[:]) + "</password_sha256_hex>"
}

// secureConfig is the config.xml part of the secure native port: the port
// and the server's certificate (openSSL.server, which 18.16's Poco and
// current releases read); "" without a certificate.
func secureConfig(cfg Config) string {
	if cfg.TLSCertFile == "" {
		return ""
	}
	return fmt.Sprintf(`    <tcp_port_secure>%d</tcp_port_secure>
    <openSSL>
        <server>
            <certificateFile>%s</certificateFile>
            <privateKeyFile>%s</privateKeyFile>
            <verificationMode>none</verificationMode>
            <loadDefaultCAFile>false</loadDefaultCAFile>
            <cacheSessions>true</cacheSessions>
            <disableProtocols>sslv2,sslv3,tlsv1,tlsv1_1</disableProtocols>
            <preferServerCiphers>true</preferServerCiphers>
        </server>
    </openSSL>
`, cfg.TCPPortSecure, xmlText(cfg.TLSCertFile), xmlText(cfg.TLSKeyFile))
}
