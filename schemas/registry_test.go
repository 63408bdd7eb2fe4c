package schemas

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeRegistry serves the documented subset of the Confluent Schema Registry
// REST API: POST /subjects/{subject}/versions and GET /schemas/ids/{id}, with
// its media type and error bodies.
type fakeRegistry struct {
	mu       sync.Mutex
	schemas  []string       // id-1 -> schema
	bySchema map[string]int // schema -> id
	subjects map[string][]int
	gets     int
	posts    int
}

func newFakeRegistry(t testing.TB) (*fakeRegistry, *httptest.Server) {
	f := &fakeRegistry{bySchema: map[string]int{}, subjects: map[string][]int{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeRegistry) add(subject, schema string) int {
	id, ok := f.bySchema[schema]
	if !ok {
		f.schemas = append(f.schemas, schema)
		id = len(f.schemas)
		f.bySchema[schema] = id
	}
	f.subjects[subject] = append(f.subjects[subject], id)
	return id
}

func (f *fakeRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("Content-Type", registryContentType)
	fail := func(status, code int, msg string) {
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error_code":%d,"message":%q}`, code, msg)
	}
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/schemas/ids/"):
		f.gets++
		id, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/schemas/ids/"))
		if err != nil || id < 1 || id > len(f.schemas) {
			fail(404, 40403, "Schema not found")
			return
		}
		json.NewEncoder(w).Encode(map[string]string{"schema": f.schemas[id-1]})
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/subjects/") && strings.HasSuffix(r.URL.Path, "/versions"):
		f.posts++
		if ct := r.Header.Get("Content-Type"); ct != registryContentType {
			fail(415, 415, "unsupported content type "+ct)
			return
		}
		var body struct {
			Schema string `json:"schema"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Schema == "" {
			fail(422, 42201, "Invalid schema")
			return
		}
		subject := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/subjects/"), "/versions")
		fmt.Fprintf(w, `{"id":%d}`, f.add(subject, body.Schema))
	default:
		fail(404, 404, "HTTP 404 Not Found")
	}
}

func TestRegistryEncodeDecodeConfluent(t *testing.T) {
	f, srv := newFakeRegistry(t)
	ctx := context.Background()
	enc := NewRegistry(srv.URL+"/", nil)
	for _, typ := range AllTypes {
		ev := fixturesV1()[typ]
		b, err := enc.EncodeConfluent(ctx, ev)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if b[0] != 0 {
			t.Fatalf("%s: magic %x", typ, b[0])
		}
		id := binary.BigEndian.Uint32(b[1:5])
		// hf.cells carries cell_started and cell_finished: two schemas, one subject.
		if got := f.subjects[TopicFor(typ)+"-value"]; len(got) == 0 || got[len(got)-1] != int(id) {
			t.Fatalf("%s: subject registrations %v, id %d", typ, got, id)
		}
		single, _ := Encode(ev)
		if string(b[5:]) != string(single[10:]) {
			t.Fatalf("%s: Confluent body differs from the single-object body", typ)
		}
		// A fresh decoder fetches the writer schema by id.
		dec := &Decoder{Registry: NewRegistry(srv.URL, srv.Client())}
		got, err := dec.Decode(ctx, b)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if !reflect.DeepEqual(got, ev) {
			t.Fatalf("%s: decoded %#v", typ, got)
		}
		// Single-object bytes go through the same Decoder.
		if got, err := dec.Decode(ctx, single); err != nil || !reflect.DeepEqual(got, ev) {
			t.Fatalf("%s: single-object via Decoder: %v", typ, err)
		}
	}
	posts := f.posts
	if _, err := enc.EncodeConfluent(ctx, fixturesV1()[TypeTaskAttempt]); err != nil || f.posts != posts {
		t.Fatalf("schema id not cached: %d posts after %d (%v)", f.posts, posts, err)
	}
	dec := &Decoder{Registry: NewRegistry(srv.URL, nil)}
	b, _ := enc.EncodeConfluent(ctx, fixturesV1()[TypeCellFinished])
	gets := f.gets
	for i := 0; i < 3; i++ {
		if _, err := dec.Decode(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if f.gets != gets+1 {
		t.Fatalf("writer schema not cached: %d GETs", f.gets-gets)
	}
}

func TestRegistryWriterSchemaResolution(t *testing.T) {
	f, srv := newFakeRegistry(t)
	id := f.add("hf.attempts-value", v0TaskAttempt)
	w, err := resolveWriter(v0TaskAttempt)
	if err != nil {
		t.Fatal(err)
	}
	body, err := w.codec.BinaryFromNative(nil, map[string]any{"event_id": "e", "event_time": fixtureTime, "project": "p", "source": "s",
		"cell_id": "c", "task_id": "t", "stream_idx": int32(0), "cycle": int32(0), "attempt": int32(3),
		"harness_version": "h", "status": "timeout", "score": float32(0.25), "success": false, "final": false,
		"skills_available": int32(0), "skills_loaded": []any{}, "input_tokens": int32(1), "output_tokens": int32(2),
		"duration_ms": int64(3), "legacy_note": ""})
	if err != nil {
		t.Fatal(err)
	}
	msg := append(binary.BigEndian.AppendUint32([]byte{0}, uint32(id)), body...)
	ev, err := (&Decoder{Registry: NewRegistry(srv.URL, nil)}).Decode(context.Background(), msg)
	if err != nil {
		t.Fatal(err)
	}
	a := ev.(*TaskAttempt)
	if a.Attempt != 3 || a.Status != StatusTimeout || a.Score != 0.25 || a.TaskInput != "" || a.DurationMs != 3 {
		t.Fatalf("resolved %+v", a)
	}
}

func TestRegistryErrors(t *testing.T) {
	_, srv := newFakeRegistry(t)
	ctx := context.Background()
	dec := &Decoder{Registry: NewRegistry(srv.URL, nil)}
	_, err := dec.Decode(ctx, []byte{0, 0, 0, 0, 99, 1, 2})
	var re *RegistryError
	if !errors.Is(err, ErrSchemaNotFound) || !errors.As(err, &re) || re.ErrorCode != 40403 || re.StatusCode != 404 {
		t.Fatalf("unknown id: %v", err)
	}
	if want := "get schema id 99: schema registry: HTTP 404, error_code 40403: Schema not found"; err.Error() != want {
		t.Fatalf("message %q, want %q", err.Error(), want)
	}
	if _, err := (&Decoder{}).Decode(ctx, []byte{0, 0, 0, 0, 1, 2}); !errors.Is(err, ErrNoRegistry) {
		t.Fatalf("no registry: %v", err)
	}
	if _, err := dec.Decode(ctx, []byte{0, 0, 1}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short frame: %v", err)
	}
	if _, err := dec.Decode(ctx, []byte("{}")); !errors.Is(err, ErrMalformed) {
		t.Fatalf("unframed: %v", err)
	}
	// A registry that is down is a transient error, not a data error.
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	_, err = (&Decoder{Registry: NewRegistry(down.URL, nil)}).Decode(ctx, []byte{0, 0, 0, 0, 1, 2})
	if err == nil || errors.Is(err, ErrMalformed) || errors.Is(err, ErrSchemaNotFound) {
		t.Fatalf("unreachable registry: %v", err)
	}
	// Registering against a server that refuses.
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(500)
		w.Write([]byte(`{"error_code":50001,"message":"Error in the backend data store"}`))
	}))
	defer bad.Close()
	_, err = NewRegistry(bad.URL, nil).EncodeConfluent(ctx, fixturesV1()[TypeCellFinished])
	if !errors.As(err, &re) || re.ErrorCode != 50001 || !strings.Contains(err.Error(), "register subject hf.cells-value") {
		t.Fatalf("backend error: %v", err)
	}
}
