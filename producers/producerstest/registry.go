package producerstest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Registry is an in-memory schema registry for tests: it serves the two
// calls of the Confluent Schema Registry REST API that harnessflow makes,
// POST /subjects/{subject}/versions (registering a schema already known
// returns its id) and GET /schemas/ids/{id}, with the API's error bodies.
type Registry struct {
	// URL is the registry's base URL, for schemas.NewRegistry.
	URL string

	mu      sync.Mutex
	schemas []string // id-1 -> schema text
	posts   int
}

// NewRegistry starts a Registry on a loopback port; it stops when the test
// ends.
func NewRegistry(t testing.TB) *Registry {
	t.Helper()
	r := &Registry{}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// Registrations counts the POST /subjects/{subject}/versions calls served.
func (r *Registry) Registrations() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.posts
}

// ServeHTTP answers one registry call.
func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	fail := func(status, code int, msg string) {
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error_code":%d,"message":%q}`, code, msg)
	}
	switch {
	case req.Method == http.MethodPost && strings.HasPrefix(req.URL.Path, "/subjects/") && strings.HasSuffix(req.URL.Path, "/versions"):
		r.posts++
		var body struct {
			Schema string `json:"schema"`
		}
		if err := json.NewDecoder(req.Body).Decode(&body); err != nil || body.Schema == "" {
			fail(http.StatusUnprocessableEntity, 42201, "Invalid schema")
			return
		}
		for i, s := range r.schemas {
			if s == body.Schema {
				fmt.Fprintf(w, `{"id":%d}`, i+1)
				return
			}
		}
		r.schemas = append(r.schemas, body.Schema)
		fmt.Fprintf(w, `{"id":%d}`, len(r.schemas))
	case req.Method == http.MethodGet && strings.HasPrefix(req.URL.Path, "/schemas/ids/"):
		id, err := strconv.Atoi(strings.TrimPrefix(req.URL.Path, "/schemas/ids/"))
		if err != nil || id < 1 || id > len(r.schemas) {
			fail(http.StatusNotFound, 40403, "Schema not found")
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"schema": r.schemas[id-1]})
	default:
		fail(http.StatusNotFound, 404, "HTTP 404 Not Found")
	}
}
