package testenv

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// CutProxy forwards TCP connections to a target and cuts some of them in the
// middle: a connection on which the client has sent After bytes is closed
// (both ways) while cuts remain, as a server restarting in the middle of a
// session closes it. A cut is spent only by a connection that reaches After
// bytes, so a short connection (a ping, a pooled connection closed early)
// cannot use one up without being cut; once they are spent every
// connection passes untouched.
type CutProxy struct {
	// Addr is the proxy's host:port.
	Addr string

	ln     net.Listener
	target string
	after  int64
	left   atomic.Int64
	cut    atomic.Int64
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
}

// StartCutProxy starts a proxy to target that cuts the first cuts
// connections to carry after client bytes; it stops when the test ends.
func StartCutProxy(t testing.TB, target string, cuts int, after int64) *CutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &CutProxy{Addr: ln.Addr().String(), ln: ln, target: target, after: after, conns: map[net.Conn]bool{}}
	p.left.Store(int64(cuts))
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Cut is how many connections the proxy has cut so far.
func (p *CutProxy) Cut() int { return int(p.cut.Load()) }

func (p *CutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *CutProxy) track(c net.Conn, on bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on && p.closed {
		return false
	}
	if on {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *CutProxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(client, true) || !p.track(server, true) {
		client.Close()
		server.Close()
		return
	}
	defer func() {
		client.Close()
		server.Close()
		p.track(client, false)
		p.track(server, false)
	}()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(client, server); done <- struct{}{} }()
	go func() {
		defer func() { done <- struct{}{} }()
		if p.left.Load() > 0 {
			if n, err := io.CopyN(server, client, p.after); err != nil || n < p.after {
				return
			}
			if p.take() {
				p.cut.Add(1)
				return
			}
		}
		_, _ = io.Copy(server, client)
	}()
	<-done // either way ending ends the connection
}

// take spends one cut if any is left.
func (p *CutProxy) take() bool {
	for {
		n := p.left.Load()
		if n <= 0 {
			return false
		}
		if p.left.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

func (p *CutProxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}
