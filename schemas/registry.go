package schemas

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/linkedin/goavro/v2"
)

// ConfluentMagic is the first byte of the Confluent wire format:
// 0x00, a 4-byte big-endian schema id, the Avro binary body.
const ConfluentMagic byte = 0x00

// registryContentType is the Schema Registry REST API's media type.
const registryContentType = "application/vnd.schemaregistry.v1+json"

// Registry is a client of the Confluent Schema Registry REST API. It caches
// schema ids (per subject and schema) and writer schemas (per id) forever,
// since both are immutable in a registry. Safe for concurrent use.
type Registry struct {
	base string
	hc   *http.Client

	mu      sync.RWMutex
	ids     map[string]int32      // subject "\x00" fingerprint -> id
	writers map[int32]*writerInfo // id -> resolved writer schema
}

// writerInfo is a registry schema resolved to an event type.
type writerInfo struct {
	info  *typeInfo
	known *schemaVersion // non-nil when the schema is a compiled-in version
	codec *goavro.Codec  // otherwise: decode with the writer, then resolve
}

// NewRegistry returns a client for the registry at baseURL
// (e.g. "http://localhost:8081"). hc nil means an http.Client with a 10 s
// timeout.
func NewRegistry(baseURL string, hc *http.Client) *Registry {
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	return &Registry{
		base:    strings.TrimRight(baseURL, "/"),
		hc:      hc,
		ids:     map[string]int32{},
		writers: map[int32]*writerInfo{},
	}
}

// Subject returns the registry subject of event type t: "<topic>-value"
// (the TopicNameStrategy). hf.cells carries two record types (cell_started,
// cell_finished) under one subject, so on a real registry that subject needs
// compatibility NONE (the registry would otherwise refuse the second record
// as incompatible with the first).
func Subject(t Type) string { return TopicFor(t) + "-value" }

// SchemaByID fetches the schema text registered under id
// (GET /schemas/ids/{id}). An unknown id is a *RegistryError wrapping
// ErrSchemaNotFound.
func (r *Registry) SchemaByID(ctx context.Context, id int) (string, error) {
	var out struct {
		Schema     string `json:"schema"`
		SchemaType string `json:"schemaType"`
	}
	if err := r.do(ctx, http.MethodGet, "/schemas/ids/"+strconv.Itoa(id), nil, &out); err != nil {
		return "", fmt.Errorf("get schema id %d: %w", id, err)
	}
	if out.SchemaType != "" && out.SchemaType != "AVRO" {
		return "", fmt.Errorf("get schema id %d: schema type %s is not AVRO", id, out.SchemaType)
	}
	return out.Schema, nil
}

// Register registers schema under subject (POST /subjects/{subject}/versions)
// and returns its id; registering an already registered schema returns the
// existing id.
func (r *Registry) Register(ctx context.Context, subject, schema string) (int, error) {
	body, err := json.Marshal(map[string]string{"schema": schema})
	if err != nil {
		return 0, err
	}
	var out struct {
		ID *int `json:"id"`
	}
	if err := r.do(ctx, http.MethodPost, "/subjects/"+url.PathEscape(subject)+"/versions", body, &out); err != nil {
		return 0, fmt.Errorf("register subject %s: %w", subject, err)
	}
	if out.ID == nil {
		return 0, fmt.Errorf("register subject %s: answer has no id", subject)
	}
	return *out.ID, nil
}

func (r *Registry) do(ctx context.Context, method, path string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", registryContentType+", application/json")
	if body != nil {
		req.Header.Set("Content-Type", registryContentType)
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		re := &RegistryError{StatusCode: resp.StatusCode}
		var eb struct {
			ErrorCode int    `json:"error_code"`
			Message   string `json:"message"`
		}
		if json.Unmarshal(data, &eb) == nil && (eb.ErrorCode != 0 || eb.Message != "") {
			re.ErrorCode, re.Message = eb.ErrorCode, eb.Message
		} else {
			re.Message = strings.TrimSpace(string(data[:min(len(data), 200)]))
		}
		return re
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("schema registry: bad answer: %w", err)
	}
	return nil
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

// writer returns the resolved writer schema of id, fetching it once.
func (r *Registry) writer(ctx context.Context, id int32) (*writerInfo, error) {
	r.mu.RLock()
	w := r.writers[id]
	r.mu.RUnlock()
	if w != nil {
		return w, nil
	}
	text, err := r.SchemaByID(ctx, int(id))
	if err != nil {
		return nil, err
	}
	w, err = resolveWriter(text)
	if err != nil {
		return nil, fmt.Errorf("schema id %d: %w", id, err)
	}
	r.mu.Lock()
	r.writers[id] = w
	r.mu.Unlock()
	return w, nil
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
// schema id, body; the writer schema is fetched from Registry by id, mapped
// to an event type by its record name, and the body decoded with it and
// resolved to the current struct). Safe for concurrent use.
type Decoder struct {
	// Registry resolves Confluent schema ids. Default: nil, in which case
	// Confluent-framed bytes fail with ErrNoRegistry.
	Registry *Registry
}

// Decode decodes one message value. Errors wrapping ErrMalformed,
// ErrUnknownFingerprint, ErrUnknownType or ErrSchemaNotFound are permanent
// (the bytes will never decode); others (a registry that cannot be reached)
// are transient.
func (d *Decoder) Decode(ctx context.Context, b []byte) (Event, error) {
	switch {
	case len(b) >= 2 && b[0] == SingleObjectMagic[0] && b[1] == SingleObjectMagic[1]:
		return Decode(b)
	case len(b) >= 1 && b[0] == ConfluentMagic:
		if len(b) < 5 {
			return nil, &FieldError{Code: CodeMalformed, Msg: fmt.Sprintf("confluent frame of %d bytes is shorter than 5", len(b))}
		}
		if d == nil || d.Registry == nil {
			return nil, ErrNoRegistry
		}
		id := int32(binary.BigEndian.Uint32(b[1:5]))
		w, err := d.Registry.writer(ctx, id)
		if err != nil {
			return nil, err
		}
		if w.known != nil {
			return w.known.decode(b[5:])
		}
		return decodeWithCodec(w.info, w.codec, b[5:])
	}
	return nil, &FieldError{Code: CodeMalformed, Msg: fmt.Sprintf("neither single-object (0xC3 0x01) nor Confluent (0x00) framing (%d bytes)", len(b))}
}
