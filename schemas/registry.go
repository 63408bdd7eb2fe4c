package schemas

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/linkedin/goavro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"golang.org/x/sync/singleflight"
)

// ConfluentMagic is the first byte of the Confluent wire format:
// 0x00, a 4-byte big-endian schema id, the Avro binary body.
const ConfluentMagic byte = 0x00

// registryContentType is the Schema Registry REST API's media type.
const registryContentType = "application/vnd.schemaregistry.v1+json"

// Registry is a client of the Confluent Schema Registry REST API, built on
// franz-go's sr.Client (github.com/twmb/franz-go/pkg/sr), which speaks the
// HTTP. It caches schema ids (per subject and schema) and writer schemas
// (per id) forever, since both are immutable in a registry; concurrent
// lookups of one id share one request. Safe for concurrent use.
type Registry struct {
	cl *sr.Client

	mu      sync.RWMutex
	ids     map[string]int32      // subject "\x00" fingerprint -> id
	writers map[int32]*writerInfo // id -> resolved writer schema
	fetches singleflight.Group    // writer schema fetches by id
	// refused remembers, for refusedTTL, the ids the registry does not
	// have (or whose schema does not resolve), so that a stream of records
	// naming unknown ids (one hostile or broken producer of one project,
	// on a processor every project shares) costs one registry request per
	// id per refusedTTL, not one per record. At most maxRefused ids.
	refused map[int32]refusal
}

// refusal is a remembered permanent lookup failure of one id.
type refusal struct {
	err   error
	until time.Time
}

// refusedTTL is how long an id the registry refused stays refused without
// asking again (an id registered meanwhile is seen after it); maxRefused
// bounds the ids remembered (beyond it the memory starts afresh).
const (
	refusedTTL = time.Minute
	maxRefused = 4096
)

// writerInfo is a registry schema resolved to an event type.
type writerInfo struct {
	info  *typeInfo
	known *schemaVersion // non-nil when the schema is a compiled-in version
	codec *goavro.Codec  // otherwise: decode with the writer, then resolve
}

// NewRegistry returns a client for the registry at baseURL
// (e.g. "http://localhost:8081"; several, comma-separated, are tried in
// turn when one cannot be reached; a user:password@ in the first URL that
// has one is sent as basic authentication to every URL, and never appears
// in errors). hc nil means an http.Client with a 10 s timeout.
func NewRegistry(baseURL string, hc *http.Client) *Registry {
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	var urls []string
	var auth *url.Userinfo
	for _, u := range strings.Split(baseURL, ",") {
		u = strings.TrimRight(strings.TrimSpace(u), "/")
		if u == "" {
			continue
		}
		if pu, err := url.Parse(u); err == nil && pu.User != nil {
			if auth == nil {
				auth = pu.User
			}
			pu.User = nil
			u = pu.String()
		}
		urls = append(urls, u)
	}
	if len(urls) == 0 {
		urls = []string{""} // every request fails: an unusable URL, not a panic
	}
	opts := []sr.ClientOpt{sr.URLs(urls...), sr.HTTPClient(hc), sr.UserAgent("harnessflow")}
	if auth != nil {
		pw, _ := auth.Password()
		opts = append(opts, sr.BasicAuth(auth.Username(), pw))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		// NewClient fails only without URLs or with an incompatible TLS
		// option, neither of which is given here.
		panic(fmt.Sprintf("schemas: sr.NewClient: %v", err))
	}
	return &Registry{
		cl:      cl,
		ids:     map[string]int32{},
		writers: map[int32]*writerInfo{},
	}
}

// CheckRegistryURL reports what is wrong with a schema registry base URL
// list as NewRegistry takes it (comma-separated; "" is no registry and
// fine): each must be http:// or https:// with a host (a bare host:port
// means http://).
func CheckRegistryURL(list string) error {
	if strings.TrimSpace(list) == "" {
		return nil
	}
	for _, raw := range strings.Split(list, ",") {
		u := strings.TrimSpace(raw)
		if u == "" {
			return fmt.Errorf("schema registry URL list %q has an empty entry", list)
		}
		if !strings.Contains(u, "://") {
			u = "http://" + u
		}
		pu, err := url.Parse(u)
		if err != nil {
			return fmt.Errorf("schema registry URL %q: %w", raw, err)
		}
		if (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			return fmt.Errorf("schema registry URL %q: want http(s)://host[:port][/path]", raw)
		}
	}
	return nil
}

// Subject returns the registry subject of event type t: "<topic>-value"
// (the TopicNameStrategy). hf.cells carries two record types (cell_started,
// cell_finished) under one subject, so on a real registry that subject needs
// compatibility NONE (the registry would otherwise refuse the second record
// as incompatible with the first).
func Subject(t Type) string { return TopicFor(t) + "-value" }

// SchemaByID fetches the schema text registered under id
// (GET /schemas/ids/{id}). An unknown id is a *RegistryError wrapping
// ErrSchemaNotFound; a schema that is not Avro a *FieldError (unknown_type).
func (r *Registry) SchemaByID(ctx context.Context, id int) (string, error) {
	s, err := r.cl.SchemaByID(ctx, id)
	if err != nil {
		return "", fmt.Errorf("get schema id %d: %w", id, registryErr(err))
	}
	if s.Type != sr.TypeAvro {
		return "", fieldErr("", "type", CodeUnknownType, "schema id %d is a %s schema, not Avro", id, s.Type)
	}
	return s.Schema, nil
}

// Register registers schema under subject (POST /subjects/{subject}/versions)
// and returns its id; registering an already registered schema returns the
// existing id.
func (r *Registry) Register(ctx context.Context, subject, schema string) (int, error) {
	id, err := r.cl.RegisterSchema(ctx, subject, sr.Schema{Schema: schema}, -1, -1)
	if err != nil {
		return 0, fmt.Errorf("register subject %s: %w", subject, registryErr(err))
	}
	if id <= 0 {
		return 0, fmt.Errorf("register subject %s: answer has no id", subject)
	}
	return id, nil
}

// registryErr turns an error answer of the registry (*sr.ResponseError) into
// a *RegistryError; other errors (the registry cannot be reached) are
// returned as they are.
func registryErr(err error) error {
	var re *sr.ResponseError
	if !errors.As(err, &re) {
		return err
	}
	out := &RegistryError{StatusCode: re.StatusCode, ErrorCode: re.ErrorCode, Message: re.Message}
	if out.ErrorCode == 0 && (out.Message == "" || out.Message == "no response") {
		out.Message = strings.TrimSpace(string(re.Raw[:min(len(re.Raw), 200)]))
	}
	return out
}

// idFor returns the registry id of ti's current schema, registering it under
// Subject(ti.typ) on first use.
func (r *Registry) idFor(ctx context.Context, ti *typeInfo) (int32, error) {
	subject := Subject(ti.typ)
	key := subject + "\x00" + strconv.FormatUint(ti.current.fp, 16)
	r.mu.RLock()
	id, ok := r.ids[key]
	r.mu.RUnlock()
	if ok {
		return id, nil
	}
	n, err := r.Register(ctx, subject, ti.current.text)
	if err != nil {
		return 0, err
	}
	if n < 0 || n > 1<<31-1 {
		return 0, fmt.Errorf("register subject %s: id %d out of range", subject, n)
	}
	r.mu.Lock()
	r.ids[key] = int32(n)
	r.writers[int32(n)] = &writerInfo{info: ti, known: ti.current}
	r.mu.Unlock()
	return int32(n), nil
}

// EncodeConfluent returns ev in the Confluent wire format: 0x00, the 4-byte
// big-endian id of its current schema under Subject(ev.Type()) (registered on
// first use, then cached), the Avro binary body.
func (r *Registry) EncodeConfluent(ctx context.Context, ev Event) ([]byte, error) {
	return r.AppendEncodeConfluent(ctx, make([]byte, 0, 256), ev)
}

// AppendEncodeConfluent is EncodeConfluent appending to dst.
func (r *Registry) AppendEncodeConfluent(ctx context.Context, dst []byte, ev Event) ([]byte, error) {
	ti, err := lookup(ev)
	if err != nil {
		return dst, err
	}
	id, err := r.idFor(ctx, ti)
	if err != nil {
		return dst, err
	}
	n := len(dst)
	dst = append(dst, ConfluentMagic)
	dst = binary.BigEndian.AppendUint32(dst, uint32(id))
	out, err := appendBody(dst, ti, ev)
	if err != nil {
		return out[:n], err
	}
	return out, nil
}

// writer returns the resolved writer schema of id, fetching it once
// (concurrent first lookups of one id share one request).
func (r *Registry) writer(ctx context.Context, id int32) (*writerInfo, error) {
	r.mu.RLock()
	w := r.writers[id]
	no, refused := r.refused[id]
	r.mu.RUnlock()
	if w != nil {
		return w, nil
	}
	if refused && time.Now().Before(no.until) {
		return nil, no.err
	}
	v, err, _ := r.fetches.Do(strconv.FormatInt(int64(id), 10), func() (any, error) {
		text, err := r.SchemaByID(ctx, int(id))
		if err != nil {
			if errors.Is(err, ErrSchemaNotFound) {
				r.refuse(id, err)
			}
			return nil, err
		}
		w, err := resolveWriter(text)
		if err != nil {
			err = fmt.Errorf("schema id %d: %w", id, err)
			r.refuse(id, err)
			return nil, err
		}
		r.mu.Lock()
		r.writers[id] = w
		r.mu.Unlock()
		return w, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*writerInfo), nil
}

// refuse remembers that id was refused with err (see Registry.refused).
func (r *Registry) refuse(id int32, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refused == nil || len(r.refused) >= maxRefused {
		r.refused = map[int32]refusal{}
	}
	r.refused[id] = refusal{err: err, until: time.Now().Add(refusedTTL)}
}

// resolveWriter finds the event type of a writer schema: a compiled-in
// version by fingerprint, else by record name (full, then simple).
func resolveWriter(text string) (*writerInfo, error) {
	codec, err := goavro.NewCodec(text)
	if err != nil {
		return nil, &FieldError{Code: CodeMalformed, Msg: "writer schema does not parse: " + err.Error()}
	}
	if sv := byFingerprint[codec.Rabin]; sv != nil {
		return &writerInfo{info: sv.info, known: sv}, nil
	}
	var rec struct {
		Type      string `json:"type"`
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	}
	if err := json.Unmarshal([]byte(text), &rec); err != nil || rec.Type != "record" {
		return nil, &FieldError{Field: "type", Code: CodeUnknownType, Msg: "writer schema is not a record"}
	}
	full, simple := rec.Name, rec.Name
	if i := strings.LastIndexByte(rec.Name, '.'); i >= 0 {
		simple = rec.Name[i+1:]
	} else if rec.Namespace != "" {
		full = rec.Namespace + "." + rec.Name
	}
	ti := byRecord[full]
	if ti == nil {
		ti = byRecord[simple]
	}
	if ti == nil {
		return nil, fieldErr("", "type", CodeUnknownType, "writer schema record %q is not an event type", full)
	}
	return &writerInfo{info: ti, codec: codec}, nil
}

// Decoder decodes both framings harnessflow reads: Avro single-object
// (0xC3 0x01, fingerprint, body; needs no registry) and Confluent (0x00,
// schema id, body; the writer schema is fetched from Registry by id once and
// cached, mapped to an event type by its record name, and the body decoded
// with it and resolved to the current struct). Safe for concurrent use.
type Decoder struct {
	// Registry resolves Confluent schema ids. Default: nil, in which case
	// Confluent-framed bytes fail with a *FieldError of code
	// CodeSchemaRegistry (wrapping ErrNoRegistry).
	Registry *Registry
}

// IsConfluent reports whether b starts with the Confluent wire format's
// magic byte (what Decoder.Decode reads with its Registry).
func IsConfluent(b []byte) bool { return len(b) > 0 && b[0] == ConfluentMagic }

// Decode decodes one message value. Its errors are permanent (the bytes
// will never decode here: they wrap ErrMalformed, ErrUnknownFingerprint,
// ErrUnknownType, ErrSchemaNotFound with a *FieldError of code
// CodeUnknownSchemaID, or ErrNoRegistry with code CodeSchemaRegistry), or
// they wrap ErrRegistryUnavailable: the registry could not be asked (down,
// an error answer other than "not found", ctx ended), and the same bytes
// may decode later. As with Decode, an event that decodes but breaks a
// schema rule comes back with the validation error.
func (d *Decoder) Decode(ctx context.Context, b []byte) (Event, error) {
	switch {
	case len(b) >= 2 && b[0] == SingleObjectMagic[0] && b[1] == SingleObjectMagic[1]:
		return Decode(b)
	case len(b) >= 1 && b[0] == ConfluentMagic:
		if len(b) < 5 {
			return nil, &FieldError{Code: CodeMalformed, Msg: fmt.Sprintf("confluent frame of %d bytes is shorter than 5", len(b))}
		}
		id := int32(binary.BigEndian.Uint32(b[1:5]))
		if d == nil || d.Registry == nil {
			return nil, &FieldError{Code: CodeSchemaRegistry, Msg: fmt.Sprintf("Confluent-framed message (schema id %d) needs a schema registry", id)}
		}
		w, err := d.Registry.writer(ctx, id)
		if err != nil {
			return nil, writerErr(id, err)
		}
		if w.known != nil {
			return w.known.decode(b[5:])
		}
		return decodeWithCodec(w.info, w.codec, b[5:])
	}
	return nil, &FieldError{Code: CodeMalformed, Msg: fmt.Sprintf("neither single-object (0xC3 0x01) nor Confluent (0x00) framing (%d bytes)", len(b))}
}

// writerErr classifies an error of Registry.writer for id: the registry
// does not know the id (permanent, CodeUnknownSchemaID), a writer schema
// that is no event (permanent, its *FieldError), or the registry could not
// be asked (ErrRegistryUnavailable).
func writerErr(id int32, err error) error {
	var fe *FieldError
	switch {
	case errors.Is(err, ErrSchemaNotFound):
		return fmt.Errorf("%w: %w", &FieldError{Code: CodeUnknownSchemaID, Msg: fmt.Sprintf("unknown schema id %d", id)}, err)
	case errors.As(err, &fe):
		return err
	}
	return fmt.Errorf("%w: %w", ErrRegistryUnavailable, err)
}
