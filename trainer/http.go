package trainer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/harnessflow/harnessflow/internal/obs"
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
	if err := obs.ServeListener(ctx, ln, t.Handler()); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http %s: %w", addr, err)
	}
	return nil
}

// Handler returns the trainer's HTTP handler: /v1/score, /metrics, /healthz
// (503 while the checkpoint is restored) and /readyz (503 until Ready, then
// as /healthz).
func (t *Trainer) Handler() http.Handler {
	mux := obs.Mux(t.served, func() error {
		if !t.restoreDone.Load() {
			return errors.New("restoring checkpoint")
		}
		return nil
	}, obs.WithReady("trainer", t.Ready()))
	mux.HandleFunc("/v1/score", t.handleScore)
	return mux
}
