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
	"sync/atomic"
	"testing"
	"time"
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
	// arrived counts requests as they arrive, before they wait for mu.
	arrived atomic.Int32
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
	f.arrived.Add(1)
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
	_, srv := newFakeRegistry(t)
	ctx := context.Background()
	dec := &Decoder{Registry: NewRegistry(srv.URL, nil)}
	_, err := dec.Decode(ctx, []byte{0, 0, 0, 0, 99, 1, 2})
	var re *RegistryError
	var fe *FieldError
	if !errors.Is(err, ErrSchemaNotFound) || !errors.As(err, &re) || re.ErrorCode != 40403 || re.StatusCode != 404 ||
		!errors.As(err, &fe) || fe.Code != CodeUnknownSchemaID || errors.Is(err, ErrRegistryUnavailable) {
		t.Fatalf("unknown id: %v", err)
	}
	if want := "unknown schema id 99: get schema id 99: schema registry: HTTP 404, error_code 40403: Schema not found"; err.Error() != want {
		t.Fatalf("message %q, want %q", err.Error(), want)
	}
	_, err = (&Decoder{}).Decode(ctx, []byte{0, 0, 0, 0, 1, 2})
	if !errors.Is(err, ErrNoRegistry) || !errors.As(err, &fe) || fe.Code != CodeSchemaRegistry {
		t.Fatalf("no registry: %v", err)
	}
	if _, err := dec.Decode(ctx, []byte{0, 0, 1}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short frame: %v", err)
	}
	if _, err := dec.Decode(ctx, []byte("{}")); !errors.Is(err, ErrMalformed) {
		t.Fatalf("unframed: %v", err)
	}
	// A registry that is down, that fails, or a URL that is no registry
	// (a 404 without the registry's error code) is a transient error, not
	// a data error.
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(500)
		w.Write([]byte(`{"error_code":50001,"message":"Error in the backend data store"}`))
	}))
	defer failing.Close()
	notRegistry := httptest.NewServer(http.NotFoundHandler())
	defer notRegistry.Close()
	for name, url := range map[string]string{"down": down.URL, "failing": failing.URL, "not a registry": notRegistry.URL} {
		_, err = (&Decoder{Registry: NewRegistry(url, nil)}).Decode(ctx, []byte{0, 0, 0, 0, 1, 2})
		if !errors.Is(err, ErrRegistryUnavailable) || errors.Is(err, ErrMalformed) || errors.Is(err, ErrSchemaNotFound) || errors.As(err, &fe) {
			t.Fatalf("%s registry: %v", name, err)
		}
	}
	// A schema id of another schema type is permanent, not an event type.
	proto := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"schema":"syntax = \"proto3\";","schemaType":"PROTOBUF"}`))
	}))
	defer proto.Close()
	_, err = (&Decoder{Registry: NewRegistry(proto.URL, nil)}).Decode(ctx, []byte{0, 0, 0, 0, 1, 2})
	if !errors.Is(err, ErrUnknownType) || errors.Is(err, ErrRegistryUnavailable) {
		t.Fatalf("protobuf schema: %v", err)
	}
	// Registering against a server that refuses.
	_, err = NewRegistry(failing.URL, nil).EncodeConfluent(ctx, fixturesV1()[TypeCellFinished])
	if !errors.As(err, &re) || re.ErrorCode != 50001 || !strings.Contains(err.Error(), "register subject hf.cells-value") {
		t.Fatalf("backend error: %v", err)
	}
}

// TestRegistryFailover: with several comma-separated URLs, a registry that
// cannot be reached is skipped for the next one.
func TestRegistryFailover(t *testing.T) {
	t.Parallel()
	f, srv := newFakeRegistry(t)
	id := f.add(Subject(TypeTaskAttempt), Schema(TypeTaskAttempt))
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	single, _ := Encode(fixturesV1()[TypeTaskAttempt])
	msg := append(binary.BigEndian.AppendUint32([]byte{ConfluentMagic}, uint32(id)), single[10:]...)
	ev, err := (&Decoder{Registry: NewRegistry(down.URL+", "+srv.URL+"/", nil)}).Decode(context.Background(), msg)
	if err != nil || !reflect.DeepEqual(ev, fixturesV1()[TypeTaskAttempt]) {
		t.Fatalf("failover: %v", err)
	}
}

// TestRegistryConcurrentLookupsShareOneRequest: the first lookups of one id
// from many goroutines cost the registry one GET.
func TestRegistryConcurrentLookupsShareOneRequest(t *testing.T) {
	t.Parallel()
	f, srv := newFakeRegistry(t)
	id := f.add(Subject(TypeTaskAttempt), Schema(TypeTaskAttempt))
	single, _ := Encode(fixturesV1()[TypeTaskAttempt])
	msg := append(binary.BigEndian.AppendUint32([]byte{ConfluentMagic}, uint32(id)), single[10:]...)
	dec := &Decoder{Registry: NewRegistry(srv.URL, nil)}
	f.mu.Lock() // hold the registry until every goroutine waits on it
	var wg sync.WaitGroup
	var started atomic.Int32
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started.Add(1)
			_, err := dec.Decode(context.Background(), msg)
			errs <- err
		}()
	}
	// The first lookup's request is held at the registry, and every
	// goroutine has begun its lookup while it is.
	// (testenv.WaitFor cannot be used here: testenv imports schemas.)
	for deadline := time.Now().Add(30 * time.Second); f.arrived.Load() < 1 || started.Load() < 16; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			f.mu.Unlock()
			t.Fatalf("after 30 s: %d requests at the registry, %d lookups started", f.arrived.Load(), started.Load())
		}
	}
	f.mu.Unlock()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gets != 1 {
		t.Fatalf("%d GETs for one id, want 1", f.gets)
	}
}

func TestCheckRegistryURL(t *testing.T) {
	t.Parallel()
	for list, ok := range map[string]bool{
		"": true, "http://localhost:8081": true, "https://sr.example/api": true, "localhost:8081": true,
		"http://a:8081, http://b:8081": true, "http://user:pw@a:8081": true,
		"ftp://a": false, "http://": false, "http://a,,http://b": false, "http://a b": false,
	} {
		if err := CheckRegistryURL(list); (err == nil) != ok {
			t.Errorf("CheckRegistryURL(%q) = %v, want ok %v", list, err, ok)
		}
	}
}

// TestRegistryBasicAuthFromURL: credentials in the URL go as basic
// authentication, and errors do not show them.
func TestRegistryBasicAuthFromURL(t *testing.T) {
	t.Parallel()
	f, _ := newFakeRegistry(t)
	id := f.add(Subject(TypeTaskAttempt), Schema(TypeTaskAttempt))
	authed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "hf" || p != "s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error_code":40101,"message":"Unauthorized"}`))
			return
		}
		f.ServeHTTP(w, r)
	}))
	defer authed.Close()
	single, _ := Encode(fixturesV1()[TypeTaskAttempt])
	msg := append(binary.BigEndian.AppendUint32([]byte{ConfluentMagic}, uint32(id)), single[10:]...)
	withAuth := strings.Replace(authed.URL, "http://", "http://hf:s3cret@", 1)
	if _, err := (&Decoder{Registry: NewRegistry(withAuth, nil)}).Decode(context.Background(), msg); err != nil {
		t.Fatalf("with credentials: %v", err)
	}
	wrong := strings.Replace(authed.URL, "http://", "http://hf:wrong@", 1)
	_, err := (&Decoder{Registry: NewRegistry(wrong, nil)}).Decode(context.Background(), msg)
	if !errors.Is(err, ErrRegistryUnavailable) || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("wrong credentials: %v", err)
	}
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	_, err = (&Decoder{Registry: NewRegistry(strings.Replace(down.URL, "http://", "http://hf:s3cret@", 1), nil)}).Decode(context.Background(), msg)
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("unreachable registry: %v", err)
	}
}

// Records naming an id the registry does not have cost one request per id
// per refusedTTL, not one per record: a producer of one project cannot turn
// the shared processors into a flood of registry requests.
func TestRegistryRemembersUnknownIDs(t *testing.T) {
	t.Parallel()
	f, srv := newFakeRegistry(t)
	dec := &Decoder{Registry: NewRegistry(srv.URL, nil)}
	single, _ := Encode(fixturesV1()[TypeTaskAttempt])
	for range 50 {
		msg := append(binary.BigEndian.AppendUint32([]byte{ConfluentMagic}, 999), single[10:]...)
		if _, err := dec.Decode(context.Background(), msg); !errors.Is(err, ErrSchemaNotFound) {
			t.Fatalf("unknown id: %v, want ErrSchemaNotFound", err)
		}
	}
	f.mu.Lock()
	gets := f.gets
	f.mu.Unlock()
	if gets != 1 {
		t.Fatalf("%d GETs for 50 records of one unknown id, want 1", gets)
	}
	// Once the refusal has lapsed the registry is asked again: an id
	// registered meanwhile is found.
	reg := dec.Registry
	reg.mu.Lock()
	no := reg.refused[999]
	no.until = time.Now().Add(-time.Second)
	reg.refused[999] = no
	reg.mu.Unlock()
	msg := append(binary.BigEndian.AppendUint32([]byte{ConfluentMagic}, 999), single[10:]...)
	if _, err := dec.Decode(context.Background(), msg); !errors.Is(err, ErrSchemaNotFound) {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gets != 2 {
		t.Fatalf("%d GETs after the refusal lapsed, want 2", f.gets)
	}
}
