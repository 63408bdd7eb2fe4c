package trainer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/harnessflow/harnessflow/internal/broker"
	"github.com/harnessflow/harnessflow/internal/testenv"
)

// httpTrainer builds a trainer on the CPU (no network I/O) with cfg's HTTP
// settings and publishes a first checkpoint of its (untrained) weights, so
// that /v1/score answers.
func httpTrainer(t testing.TB, cfg Config) (*Trainer, error) {
	t.Helper()
	tr, err := freshTrainer(t, cfg)
	if err == nil {
		publishCheckpoint(t, tr)
	}
	return tr, err
}

// freshTrainer is httpTrainer without a checkpoint: /v1/score answers 503.
func freshTrainer(t testing.TB, cfg Config) (*Trainer, error) {
	t.Helper()
	if len(cfg.Brokers) == 0 {
		cfg.Brokers = []string{"127.0.0.1:1"}
	}
	if cfg.CheckpointDir == "" {
		cfg.CheckpointDir = t.TempDir()
	}
	cfg.ClickHouse, cfg.Device, cfg.Model = "127.0.0.1:1", "cpu", smallModel()
	return New(cfg)
}

// publishCheckpoint saves tr's live state as its next checkpoint, streaming
// the tensors from the live models as checkpoint() does, and publishes it
// (it becomes the served checkpoint; there is no Kafka writer in tests).
func publishCheckpoint(t testing.TB, tr *Trainer) *Checkpoint {
	t.Helper()
	idx := max(tr.index, tr.store.MaxIndex()) + 1
	ck := &Checkpoint{Index: idx, ModelVersion: fmt.Sprintf("%s-v%d", tr.cfg.Name, idx), Step: tr.step, Topic: tr.cfg.Topic,
		Offsets: map[int32]int64{0: idx}, CreatedAt: time.Now().UTC()}
	tr.mu.Lock()
	for _, m := range tr.models {
		ck.Models = append(ck.Models, m.Shape())
	}
	tr.mu.Unlock()
	var buf []float32
	ck.tensor = func(model, param, which int) []float32 {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return tr.models[model].Tensor(param, which, &buf)
	}
	if _, err := tr.store.Save(ck); err != nil {
		t.Fatal(err)
	}
	tr.mu.Lock()
	tr.modelVersion = ck.ModelVersion
	tr.mu.Unlock()
	tr.index = idx
	tr.publish(context.Background(), ck)
	return ck
}

func do(t *testing.T, client *http.Client, method, url, auth string) (int, string) {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{"update":"use a checklist","kind":"skill"}`)
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestScoreTokenRequired: with --score-token-file, POST /v1/score answers
// 401 (a JSON error) without the token, with a wrong one, a prefix of it or
// another scheme, and 200 with it under any case of "Bearer"; /metrics and
// /healthz stay open. A token file readable by others, or empty, is
// refused by New; without a token file /v1/score is open.
func TestScoreTokenRequired(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "score-token")
	if err := os.WriteFile(file, []byte("\xef\xbb\xbfs3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tr, err := httpTrainer(t, Config{ScoreTokenFile: file})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(tr.Handler())
	defer srv.Close()
	c := srv.Client()
	for _, auth := range []string{"", "Bearer wrong", "Bearer s3cret", "Bearer s3cret-token-and-more", "Basic s3cret-token", "s3cret-token", "Bearer "} {
		code, body := do(t, c, http.MethodPost, srv.URL+"/v1/score", auth)
		var e struct{ Error string }
		if code != http.StatusUnauthorized || json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error, "bearer token") {
			t.Fatalf("score with Authorization %q = %d %q, want 401 with a JSON error", auth, code, body)
		}
	}
	for _, auth := range []string{"Bearer s3cret-token", "bearer s3cret-token", "BEARER  s3cret-token "} {
		if code, body := do(t, c, http.MethodPost, srv.URL+"/v1/score", auth); code != 200 || !strings.Contains(body, "reward") {
			t.Fatalf("score with Authorization %q = %d %q, want 200", auth, code, body)
		}
	}
	for _, p := range []string{"/metrics", "/healthz"} {
		if code, _ := do(t, c, http.MethodGet, srv.URL+p, ""); code != 200 {
			t.Fatalf("%s without a token = %d, want 200 (open)", p, code)
		}
	}

	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := httpTrainer(t, Config{ScoreTokenFile: file}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("token file mode 644: %v, want a config error saying chmod 600", err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := httpTrainer(t, Config{ScoreTokenFile: empty}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty token file: %v", err)
	}

	open, err := httpTrainer(t, Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv2 := httptest.NewServer(open.Handler())
	defer srv2.Close()
	if code, body := do(t, srv2.Client(), http.MethodPost, srv2.URL+"/v1/score", ""); code != 200 {
		t.Fatalf("score without a configured token = %d %q, want 200", code, body)
	}
}

// writeCert writes a self-signed certificate for 127.0.0.1 and its key
// (PEM) under dir and returns their paths and a pool trusting it.
func writeCert(t *testing.T, dir string) (string, string, *x509.CertPool) {
	c := testenv.SelfSignedCert(t, dir)
	return c.Cert, c.Key, c.Pool
}

// TestTrainerServesTLS: with --tls-cert and --tls-key the HTTP API answers
// over HTTPS (scores and health alike) and refuses plain HTTP; a
// certificate without its key, or an unreadable pair, is a config error.
func TestTrainerServesTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile, pool := writeCert(t, dir)
	if _, err := httpTrainer(t, Config{TLSCert: certFile}); !errors.Is(err, ErrConfig) {
		t.Fatalf("a certificate without its key: %v, want a config error", err)
	}
	if _, err := httpTrainer(t, Config{TLSCert: keyFile, TLSKey: keyFile}); !errors.Is(err, ErrConfig) {
		t.Fatalf("a key given as the certificate: %v, want a config error", err)
	}
	tr, err := httpTrainer(t, Config{TLSCert: certFile, TLSKey: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- tr.serveOn(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	secure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
	if code, body := do(t, secure, http.MethodGet, "https://"+addr+"/healthz", ""); code != 200 || body != "ok\n" {
		t.Fatalf("https /healthz = %d %q", code, body)
	}
	if code, body := do(t, secure, http.MethodPost, "https://"+addr+"/v1/score", ""); code != 200 || !strings.Contains(body, "reward") {
		t.Fatalf("https /v1/score = %d %q", code, body)
	}
	plain := &http.Client{Timeout: 10 * time.Second}
	if code, body := do(t, plain, http.MethodGet, "http://"+addr+"/healthz", ""); code == 200 {
		t.Fatalf("plain http /healthz = %d %q, want no answer over plain HTTP", code, body)
	}
}

// pingConn is a ClickHouse connection whose Ping fails while down is set.
type pingConn struct {
	driver.Conn
	down atomic.Bool
}

func (c *pingConn) Ping(context.Context) error {
	if c.down.Load() {
		return errors.New("dial tcp 127.0.0.1:9000: connection refused")
	}
	return nil
}

// TestTrainerReadyzFollowsBrokerAndClickHouse: the trainer's /readyz is 503
// naming kafka while its broker is down and recovers after the broker
// restarts on the same address, 503 naming clickhouse while ClickHouse
// does not answer its ping; /healthz stays 200.
func TestTrainerReadyzFollowsBrokerAndClickHouse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b1 := testenv.Kafka(t, dir)
	addr := b1.Addr()
	tr, err := httpTrainer(t, Config{Brokers: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	ch := &pingConn{}
	tr.ch = ch
	tr.restoreDone.Store(true)
	tr.markReady("")
	srv := httptest.NewServer(tr.Handler())
	defer srv.Close()
	c := srv.Client()
	readyz := func(code int, has string) func() bool {
		return func() bool {
			got, body := do(t, c, http.MethodGet, srv.URL+"/readyz", "")
			return got == code && strings.Contains(body, has)
		}
	}
	testenv.Eventually(t, 10*time.Second, "/readyz 200 with broker and ClickHouse up", readyz(200, "ready"))
	b1.Close()
	testenv.Eventually(t, 15*time.Second, "/readyz 503 naming kafka with the broker down", readyz(503, "kafka: no Kafka broker answers"))
	if code, _ := do(t, c, http.MethodGet, srv.URL+"/healthz", ""); code != 200 {
		t.Fatalf("/healthz with the broker down = %d, want 200", code)
	}
	var b2 *broker.Broker
	testenv.Eventually(t, 10*time.Second, "the broker restarts on "+addr, func() bool {
		b2, err = broker.Start(broker.Config{Listen: addr, DataDir: dir})
		return err == nil
	})
	t.Cleanup(b2.Close)
	testenv.Eventually(t, 15*time.Second, "/readyz 200 after the broker restart", readyz(200, "ready"))
	ch.down.Store(true)
	testenv.Eventually(t, 10*time.Second, "/readyz 503 naming clickhouse", readyz(503, "clickhouse: dial tcp 127.0.0.1:9000: connection refused"))
	if code, _ := do(t, c, http.MethodGet, srv.URL+"/healthz", ""); code != 200 {
		t.Fatalf("/healthz with ClickHouse down = %d, want 200", code)
	}
	ch.down.Store(false)
	testenv.Eventually(t, 10*time.Second, "/readyz 200 after ClickHouse is back", readyz(200, "ready"))
}
