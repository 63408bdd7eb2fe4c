package ingest

import (
	"fmt"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// budget is the gateway's in-flight byte budget: MaxInflight bytes for all
// the requests being read or delivered, and a share of MaxInflightPerToken
// bytes for each token, so that one tenant's slow uploads or large requests
// cannot take the whole budget from the others. Safe for concurrent use.
type budget struct {
	max, perToken int64
	all           *semaphore.Weighted
	tokens        []*tokenBudget // by token index (tokenSet)
	// reading and delivering count the requests holding bytes, by phase
	// (for the 503's message).
	reading, delivering atomic.Int64
}

// tokenBudget is one token's share.
type tokenBudget struct {
	sem      *semaphore.Weighted
	requests atomic.Int64
}

func newBudget(max, perToken int64, tokens int) *budget {
	b := &budget{max: max, perToken: perToken, all: semaphore.NewWeighted(max)}
	for i := 0; i < tokens; i++ {
		b.tokens = append(b.tokens, &tokenBudget{sem: semaphore.NewWeighted(perToken)})
	}
	return b
}

// lease is the bytes one request holds; release it once, when answered.
type lease struct {
	b          *budget
	tb         *tokenBudget
	n          int64
	delivering bool
}

// acquire takes n bytes for a request of token tok without waiting; when
// either the token's share or the whole budget is full it returns nil and
// the 503's message, which says which.
func (b *budget) acquire(tok int, n int64) (*lease, string) {
	tb := b.tokens[tok]
	if !tb.sem.TryAcquire(n) {
		return nil, fmt.Sprintf("busy: this token's in-flight budget (%d bytes) is full: %d requests of this token are being read or delivered; "+
			"retry after 1s, and send fewer requests at once with this token", b.perToken, tb.requests.Load())
	}
	if !b.all.TryAcquire(n) {
		tb.sem.Release(n)
		return nil, fmt.Sprintf("busy: the gateway's in-flight budget (%d bytes) is full: %d requests are being read from their clients and %d wait for the brokers to acknowledge their events; retry after 1s",
			b.max, b.reading.Load(), b.delivering.Load())
	}
	tb.requests.Add(1)
	b.reading.Add(1)
	return &lease{b: b, tb: tb, n: n}, ""
}

// deliver records that the request's body is read and its events wait for
// the brokers.
func (l *lease) deliver() {
	if !l.delivering {
		l.delivering = true
		l.b.reading.Add(-1)
		l.b.delivering.Add(1)
	}
}

// release gives the bytes back.
func (l *lease) release() {
	if l.delivering {
		l.b.delivering.Add(-1)
	} else {
		l.b.reading.Add(-1)
	}
	l.tb.requests.Add(-1)
	l.b.all.Release(l.n)
	l.tb.sem.Release(l.n)
}
