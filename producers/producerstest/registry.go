package producerstest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// Registry is an in-memory schema registry for tests: franz-go's srfake,
// which serves the Confluent Schema Registry REST API (schemas by id,
// subjects and their versions, per-subject config, compatibility checks
// that always pass) with the API's error bodies, so that third-party
// clients (npm's @kafkajs/confluent-schema-registry) work against it too.
// Its global compatibility is NONE: harnessflow registers two record types
// under the hf.cells-value subject (schemas.Subject).
type Registry struct {
	// URL is the registry's base URL, for schemas.NewRegistry.
	URL string
	// Fake is the registry itself, to seed or inspect schemas directly.
	Fake *srfake.Registry

	posts atomic.Int64
}

// NewRegistry starts a Registry on a loopback port; it stops when the test
// ends.
func NewRegistry(t testing.TB) *Registry {
	t.Helper()
	r := &Registry{Fake: srfake.NewRegistry(srfake.WithGlobalCompat(sr.CompatNone))}
	h := r.Fake.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost && strings.HasPrefix(req.URL.Path, "/subjects/") && strings.HasSuffix(req.URL.Path, "/versions") {
			r.posts.Add(1)
		}
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// Registrations counts the POST /subjects/{subject}/versions calls served.
func (r *Registry) Registrations() int { return int(r.posts.Load()) }
