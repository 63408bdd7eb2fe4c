package trainer

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
	"github.com/harnessflow/harnessflow/internal/secret"
)

// Ready is closed once the trainer serves: it has restored its checkpoint
// and its HTTP API listens (Addr is then valid), or, with the API off
// (Listen "off" and no WithListener), it starts consuming.
func (t *Trainer) Ready() <-chan struct{} { return t.ready }

// Addr is the address the trainer's HTTP API listens on; "" before Ready,
// and with the API off.
func (t *Trainer) Addr() string {
	a, _ := t.addr.Load().(string)
	return a
}

// markReady records the API's address and closes Ready (once).
func (t *Trainer) markReady(addr string) {
	t.readyOnce.Do(func() {
		t.addr.Store(addr)
		close(t.ready)
	})
}

// servesHTTP says whether the trainer serves its HTTP API.
func (t *Trainer) servesHTTP() bool { return t.cfg.Listen != "off" || t.ln != nil }

// serveHTTP serves the HTTP API on WithListener's listener or Config.Listen
// until ctx ends; Ready is closed once it listens.
func (t *Trainer) serveHTTP(ctx context.Context) error {
	ln := t.ln
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", t.cfg.Listen); err != nil {
			return fmt.Errorf("http %s: %w", t.cfg.Listen, err)
		}
	}
	addr := ln.Addr().String()
	t.markReady(addr)
	if err := t.serveOn(ctx, ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http %s: %w", addr, err)
	}
	return nil
}

// serveOn serves the HTTP API on ln until ctx ends: over TLS when the
// configuration has a certificate (HTTPS only), with deadlines on headers,
// bodies and idle connections.
func (t *Trainer) serveOn(ctx context.Context, ln net.Listener) error {
	if t.tlsCert != nil {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{*t.tlsCert}, MinVersion: tls.VersionTLS12})
	}
	srv := &http.Server{Handler: t.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: 120 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	return obs.ServeServer(ctx, ln, srv, 5*time.Second)
}

// Handler returns the trainer's HTTP handler: /v1/score and /v1/rewards
// (behind the bearer token when one is configured; answered only from a
// published checkpoint, 503 before the first: serving.go), /metrics, /healthz (liveness: 200 while
// the process serves) and /readyz (503 until Ready, while the checkpoint is
// restored, and while no Kafka broker or ClickHouse answers).
func (t *Trainer) Handler() http.Handler {
	// Run opens ClickHouse before it serves the API; a handler built
	// before that (a test's) reports ClickHouse as not connected.
	ch := t.ch
	mux := obs.Mux(t.served, nil, obs.WithReady("trainer", t.Ready()),
		obs.WithCheck("checkpoint", func(context.Context) error {
			if !t.restoreDone.Load() {
				return errors.New("restoring checkpoint")
			}
			return nil
		}),
		obs.WithCheck("kafka", func(ctx context.Context) error { return kafkax.Ping(ctx, t.cfg.Brokers) }),
		obs.WithCheck("clickhouse", func(ctx context.Context) error {
			if ch == nil {
				return errors.New("not connected yet")
			}
			return ch.Ping(ctx)
		}))
	mux.Handle("/v1/score", t.requireScoreToken(http.HandlerFunc(t.handleScore)))
	mux.Handle("/v1/rewards", t.requireScoreToken(http.HandlerFunc(t.handleRewards)))
	return mux
}

// requireScoreToken answers 401 to a request without "Authorization:
// Bearer <token>" (scheme in any case) naming the configured token; with
// no token configured it is next itself. The token is compared in constant
// time (hashes of equal length, so its length does not leak either).
func (t *Trainer) requireScoreToken(next http.Handler) http.Handler {
	if t.scoreToken == "" {
		return next
	}
	want := sha256.Sum256([]byte(t.scoreToken))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := bearer(r.Header.Get("Authorization"))
		sum := sha256.Sum256([]byte(got))
		if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 || !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="harnessflow-trainer"`)
			writeJSONError(w, http.StatusUnauthorized, errors.New("missing or wrong bearer token: send the header Authorization: Bearer <token> (train --score-token-file)"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearer returns the credentials of an "Authorization: Bearer X" header,
// the scheme matched in any case (RFC 9110 §11.1).
func bearer(h string) (string, bool) {
	scheme, cred, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	cred = strings.TrimSpace(cred)
	return cred, cred != ""
}

// loadHTTPSecurity loads the TLS certificate and the /v1/score token the
// configuration names (New calls it).
func (t *Trainer) loadHTTPSecurity() error {
	if t.cfg.TLSCert != "" {
		c, err := tls.LoadX509KeyPair(t.cfg.TLSCert, t.cfg.TLSKey)
		if err != nil {
			return fmt.Errorf("%w: trainer TLS: load the certificate %s and key %s (PEM files): %w", ErrConfig, t.cfg.TLSCert, t.cfg.TLSKey, err)
		}
		t.tlsCert = &c
	}
	t.scoreToken = t.cfg.ScoreToken
	if t.cfg.ScoreTokenFile != "" {
		tok, err := secret.FirstLine(t.cfg.ScoreTokenFile, "score token file")
		if err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
		t.scoreToken = tok
	}
	return nil
}
