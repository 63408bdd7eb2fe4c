package ingest

import (
	"fmt"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// budget is the gateway's in-flight byte budget: MaxInflight bytes for all
// the requests being read or delivered, and a share of MaxInflightPerProject
// bytes for each project, taken by all the tokens of that project together,
// so that one tenant's slow uploads or large requests cannot take the whole
// budget from the others however many tokens it holds. A request takes at
// least MinHold bytes of both (Server.hold), so that the number of requests
// in flight is bounded too: at most MaxInflightPerProject/MinHold of one
// project, MaxInflight/MinHold in all. Safe for concurrent use.
type budget struct {
	max, perProject int64
	all             *semaphore.Weighted
	byToken         []*projectBudget // by token index (tokenSet); tokens of one project share one
	projects        []*projectBudget
	// reading and delivering count the requests holding bytes, by phase
	// (for the 503's message).
	reading, delivering atomic.Int64
}

// projectBudget is one project's share.
type projectBudget struct {
	sem      *semaphore.Weighted
	requests atomic.Int64
}

// newBudget makes the budget of the projects of a token set: projects[i] is
// token i's project.
func newBudget(max, perProject int64, projects []string) *budget {
	b := &budget{max: max, perProject: perProject, all: semaphore.NewWeighted(max)}
	byName := map[string]*projectBudget{}
	for _, p := range projects {
		pb, ok := byName[p]
		if !ok {
			pb = &projectBudget{sem: semaphore.NewWeighted(perProject)}
			byName[p] = pb
			b.projects = append(b.projects, pb)
		}
		b.byToken = append(b.byToken, pb)
	}
	return b
}

// lease is the bytes one request holds; release it once, when answered.
type lease struct {
	b          *budget
	pb         *projectBudget
	n          int64
	delivering bool
}

// acquire takes n bytes for a request of token tok without waiting; when
// either its project's share or the whole budget is full it returns nil and
// the 503's message, which says which.
func (b *budget) acquire(tok int, n int64) (*lease, string) {
	pb := b.byToken[tok]
	if !pb.sem.TryAcquire(n) {
		return nil, fmt.Sprintf("busy: this project's in-flight budget (%d bytes, shared by all its tokens) is full: %d requests of this project are being read or delivered; "+
			"retry after 1s, and send fewer requests at once for this project", b.perProject, pb.requests.Load())
	}
	if !b.all.TryAcquire(n) {
		pb.sem.Release(n)
		return nil, fmt.Sprintf("busy: the gateway's in-flight budget (%d bytes) is full: %d requests are being read from their clients and %d wait for the brokers to acknowledge their events; retry after 1s",
			b.max, b.reading.Load(), b.delivering.Load())
	}
	pb.requests.Add(1)
	b.reading.Add(1)
	return &lease{b: b, pb: pb, n: n}, ""
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
	l.pb.requests.Add(-1)
	l.b.all.Release(l.n)
	l.pb.sem.Release(l.n)
}
