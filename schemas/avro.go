package schemas

import (
	"embed"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"path"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/linkedin/goavro/v2"
)

// avroNamespace is the namespace of every record. It stays the same across
// compatible schema versions (Avro resolution matches records by full name).
const avroNamespace = "dev.harnessflow"

// Every schema version ever released: avro/v<N>/<type>.avsc. Compatible
// changes add a new directory v<N+1> holding the changed schemas; the old
// files stay so that bytes written with them still decode.
//
//go:embed avro
var avroFS embed.FS

// schemaVersion is one compiled-in schema of one event type.
type schemaVersion struct {
	info    *typeInfo
	version int
	path    string
	text    string // the .avsc as committed
	codec   *goavro.Codec
	fp      uint64 // CRC-64-AVRO of the Parsing Canonical Form
	current bool   // the newest version: encoded and decoded by the hand codec
}

var (
	byFingerprint = map[uint64]*schemaVersion{}
	byRecord      = map[string]*typeInfo{} // simple and full record name
	allVersions   []*schemaVersion
)

// SingleObjectMagic is the two-byte marker of Avro single-object encoding.
var SingleObjectMagic = [2]byte{0xC3, 0x01}

// loadSchemas parses every embedded .avsc, checks the current ones against the
// field table and registers every fingerprint. A mismatch is a programming
// error in this package and panics at init (every test would fail).
func loadSchemas() {
	err := fs.WalkDir(avroFS, "avro", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".avsc") {
			return err
		}
		dir := path.Base(path.Dir(p))
		v, err := strconv.Atoi(strings.TrimPrefix(dir, "v"))
		if err != nil || !strings.HasPrefix(dir, "v") {
			return fmt.Errorf("%s: directory must be v<N>", p)
		}
		ti := infos[Type(strings.TrimSuffix(path.Base(p), ".avsc"))]
		if ti == nil {
			return fmt.Errorf("%s: no event type of that name", p)
		}
		text, err := avroFS.ReadFile(p)
		if err != nil {
			return err
		}
		codec, err := goavro.NewCodec(string(text))
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		sv := &schemaVersion{info: ti, version: v, path: p, text: string(text), codec: codec, fp: codec.Rabin}
		if old := byFingerprint[sv.fp]; old != nil {
			return fmt.Errorf("%s: same canonical form as %s", p, old.path)
		}
		byFingerprint[sv.fp] = sv
		allVersions = append(allVersions, sv)
		if ti.current == nil || v > ti.current.version {
			ti.current = sv
		}
		return nil
	})
	if err != nil {
		panic("schemas: " + err.Error())
	}
	for _, t := range AllTypes {
		ti := infos[t]
		if ti.current == nil {
			panic("schemas: no .avsc for " + string(t))
		}
		ti.current.current = true
		if err := checkTable(ti, ti.current.text); err != nil {
			panic(fmt.Sprintf("schemas: %s does not match the field table: %v", ti.current.path, err))
		}
		byRecord[ti.record] = ti
		byRecord[avroNamespace+"."+ti.record] = ti
	}
	sort.Slice(allVersions, func(i, j int) bool {
		if allVersions[i].version != allVersions[j].version {
			return allVersions[i].version < allVersions[j].version
		}
		return allVersions[i].info.typ < allVersions[j].info.typ
	})
}

// avscField is the part of a schema's field this package checks.
type avscField struct {
	Name string          `json:"name"`
	Type json.RawMessage `json:"type"`
}

type avscRecord struct {
	Type      string      `json:"type"`
	Name      string      `json:"name"`
	Namespace string      `json:"namespace"`
	Fields    []avscField `json:"fields"`
}

// checkTable verifies that the current schema's fields are, in order, the
// envelope and then ti.fields, with the Avro types the hand codec writes.
func checkTable(ti *typeInfo, text string) error {
	var rec avscRecord
	if err := json.Unmarshal([]byte(text), &rec); err != nil {
		return err
	}
	if rec.Name != ti.record || rec.Namespace != avroNamespace {
		return fmt.Errorf("record %s.%s, want %s.%s", rec.Namespace, rec.Name, avroNamespace, ti.record)
	}
	want := []string{`"string"`, `{"type":"long","logicalType":"timestamp-millis"}`, `"string"`, `"string"`}
	if len(rec.Fields) != len(envelopeFields)+len(ti.fields) {
		return fmt.Errorf("%d fields, table has %d", len(rec.Fields), len(envelopeFields)+len(ti.fields))
	}
	for i, name := range envelopeFields {
		if rec.Fields[i].Name != name || compact(rec.Fields[i].Type) != want[i] {
			return fmt.Errorf("field %d: %s %s, want envelope %s", i, rec.Fields[i].Name, rec.Fields[i].Type, name)
		}
	}
	for i, f := range ti.fields {
		af := rec.Fields[len(envelopeFields)+i]
		if af.Name != f.name {
			return fmt.Errorf("field %d is %q, table has %q", i, af.Name, f.name)
		}
		got := compact(af.Type)
		if exp := avroTypeOf(f); exp != "" && got != exp {
			return fmt.Errorf("field %q has type %s, want %s", f.name, got, exp)
		}
		if f.kind == kEnum {
			var e struct {
				Type    string   `json:"type"`
				Symbols []string `json:"symbols"`
			}
			if err := json.Unmarshal(af.Type, &e); err != nil || e.Type != "enum" || !slices.Equal(e.Symbols, f.symbols) {
				return fmt.Errorf("field %q: enum %s, want symbols %v", f.name, got, f.symbols)
			}
		}
	}
	return nil
}

func compact(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	// Drop documentation and defaults; keep the structure.
	var strip func(any) any
	strip = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			delete(x, "doc")
			delete(x, "default")
			for k, e := range x {
				x[k] = strip(e)
			}
		case []any:
			for i, e := range x {
				x[i] = strip(e)
			}
		}
		return v
	}
	b, _ := json.Marshal(strip(v))
	// encoding/json sorts keys: normalise the logical type spelling order.
	return strings.Replace(string(b), `{"logicalType":"timestamp-millis","type":"long"}`, `{"type":"long","logicalType":"timestamp-millis"}`, -1)
}

// avroTypeOf is the compacted Avro type the hand codec writes for f ("" for
// enums, whose symbols are checked separately).
func avroTypeOf(f field) string {
	switch f.kind {
	case kString:
		return `"string"`
	case kNullString:
		return `["null","string"]`
	case kInt:
		return `"int"`
	case kLong:
		return `"long"`
	case kDouble:
		return `"double"`
	case kNullDouble:
		return `["null","double"]`
	case kBool:
		return `"boolean"`
	case kTime:
		return `{"type":"long","logicalType":"timestamp-millis"}`
	case kStrings:
		return `{"items":"string","type":"array"}`
	case kArtifacts:
		return `{"items":{"fields":[{"name":"kind","type":{"name":"ArtifactKind","symbols":["prompt","skill","memory","tool"],"type":"enum"}},{"name":"name","type":"string"},{"name":"op","type":{"name":"ArtifactOp","symbols":["add","modify","remove"],"type":"enum"}},{"name":"content","type":"string"},{"name":"content_sha256","type":"string"}],"name":"Artifact","type":"record"},"type":"array"}`
	case kOffsets:
		return `{"items":{"fields":[{"name":"topic","type":"string"},{"name":"partition","type":"int"},{"name":"offset","type":"long"}],"name":"TopicOffset","type":"record"},"type":"array"}`
	case kMetrics:
		return `{"type":"map","values":"double"}`
	case kBytes:
		return `"bytes"`
	}
	return ""
}

// Fingerprint returns the CRC-64-AVRO (Rabin) fingerprint of the Parsing
// Canonical Form of t's current schema, 0 for an unknown type.
func Fingerprint(t Type) uint64 {
	if ti := infos[t]; ti != nil {
		return ti.current.fp
	}
	return 0
}

// Schema returns the current Avro schema (.avsc text) of t, "" for an unknown
// type.
func Schema(t Type) string {
	if ti := infos[t]; ti != nil {
		return ti.current.text
	}
	return ""
}

// SchemaVersion describes one compiled-in schema version.
type SchemaVersion struct {
	// Type is the event type.
	Type Type
	// Version is the schema's version (the avro/v<N> directory).
	Version int
	// Fingerprint is the CRC-64-AVRO fingerprint of its canonical form.
	Fingerprint uint64
	// Current is true for the version Encode writes.
	Current bool
	// Schema is the .avsc text.
	Schema string
}

// Versions lists every compiled-in schema version, oldest first.
func Versions() []SchemaVersion {
	out := make([]SchemaVersion, 0, len(allVersions))
	for _, sv := range allVersions {
		out = append(out, SchemaVersion{Type: sv.info.typ, Version: sv.version, Fingerprint: sv.fp, Current: sv.current, Schema: sv.text})
	}
	return out
}

// lookup returns the type info of ev, or a *FieldError for nil or foreign
// events.
func lookup(ev Event) (*typeInfo, error) {
	if ev == nil {
		return nil, &FieldError{Code: CodeUnknownType, Msg: "nil event"}
	}
	if v := reflect.ValueOf(ev); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, &FieldError{Type: ev.Type(), Code: CodeMalformed, Msg: "nil event"}
	}
	ti := infos[ev.Type()]
	if ti == nil {
		return nil, fieldErr("", "type", CodeUnknownType, "%q is not a known event type", ev.Type())
	}
	return ti, nil
}

// ---- binary encoding (the hot path) ----

func appendLong(b []byte, v int64) []byte {
	u := uint64(v<<1) ^ uint64(v>>63)
	for u >= 0x80 {
		b = append(b, byte(u)|0x80)
		u >>= 7
	}
	return append(b, byte(u))
}

func appendString(b []byte, s string) []byte {
	b = appendLong(b, int64(len(s)))
	return append(b, s...)
}

func appendDouble(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func symbolIndex(symbols []string, s string) int {
	for i, x := range symbols {
		if x == s {
			return i
		}
	}
	return -1
}

func badEnum(t Type, field, v string, symbols []string) *FieldError {
	return fieldErr(t, field, CodeBadEnum, "%q is not one of %s", v, strings.Join(symbols, ", "))
}

func appendHeader(b []byte, ev Event) []byte {
	h := ev.Header()
	id := h.EventID
	if id == "" {
		id = DeriveEventID(ev)
	}
	b = appendString(b, id)
	b = appendLong(b, h.EventTime.UnixMilli())
	b = appendString(b, h.Project)
	return appendString(b, h.Source)
}

// appendBody writes the Avro binary body of ev with the current schema.
func appendBody(b []byte, ti *typeInfo, ev Event) ([]byte, error) {
	b = appendHeader(b, ev)
	for i := range ti.fields {
		f := &ti.fields[i]
		switch f.kind {
		case kString:
			b = appendString(b, *f.str(ev))
		case kNullString:
			if s := *f.str(ev); s == "" {
				b = append(b, 0)
			} else {
				b = appendString(append(b, 2), s)
			}
		case kEnum:
			s := *f.str(ev)
			j := symbolIndex(f.symbols, s)
			if j < 0 {
				return b, badEnum(ti.typ, f.name, s, f.symbols)
			}
			b = appendLong(b, int64(j))
		case kInt:
			b = appendLong(b, int64(*f.i32(ev)))
		case kLong:
			b = appendLong(b, *f.i64(ev))
		case kDouble:
			b = appendDouble(b, *f.f64(ev))
		case kNullDouble:
			if p := *f.pf64(ev); p == nil {
				b = append(b, 0)
			} else {
				b = appendDouble(append(b, 2), *p)
			}
		case kBool:
			b = appendBool(b, *f.bl(ev))
		case kTime:
			b = appendLong(b, f.tm(ev).UnixMilli())
		case kStrings:
			ss := *f.strs(ev)
			if len(ss) > 0 {
				b = appendLong(b, int64(len(ss)))
				for _, s := range ss {
					b = appendString(b, s)
				}
			}
			b = append(b, 0)
		case kArtifacts:
			as := *f.arts(ev)
			if len(as) > 0 {
				b = appendLong(b, int64(len(as)))
				for j := range as {
					a := &as[j]
					k := symbolIndex(artifactKinds, a.Kind)
					if k < 0 {
						return b, badEnum(ti.typ, fmt.Sprintf("artifacts[%d].kind", j), a.Kind, artifactKinds)
					}
					o := symbolIndex(artifactOps, a.Op)
					if o < 0 {
						return b, badEnum(ti.typ, fmt.Sprintf("artifacts[%d].op", j), a.Op, artifactOps)
					}
					b = appendLong(b, int64(k))
					b = appendString(b, a.Name)
					b = appendLong(b, int64(o))
					b = appendString(b, a.Content)
					b = appendString(b, a.ContentSHA256)
				}
			}
			b = append(b, 0)
		case kOffsets:
			os := *f.offs(ev)
			if len(os) > 0 {
				b = appendLong(b, int64(len(os)))
				for _, o := range os {
					b = appendString(b, o.Topic)
					b = appendLong(b, int64(o.Partition))
					b = appendLong(b, o.Offset)
				}
			}
			b = append(b, 0)
		case kMetrics:
			m := *f.mets(ev)
			if len(m) > 0 {
				keys := make([]string, 0, len(m))
				for k := range m {
					keys = append(keys, k)
				}
				sort.Strings(keys) // deterministic bytes
				b = appendLong(b, int64(len(keys)))
				for _, k := range keys {
					b = appendDouble(appendString(b, k), m[k])
				}
			}
			b = append(b, 0)
		case kBytes:
			p := *f.byts(ev)
			b = appendLong(b, int64(len(p)))
			b = append(b, p...)
		}
	}
	return b, nil
}

// ---- binary decoding ----

// reader decodes Avro binary with a sticky error; it never reads past its
// slice and never allocates more than the input can hold.
type reader struct {
	b   []byte
	i   int
	err string
}

func (r *reader) fail(msg string) {
	if r.err == "" {
		r.err = msg + " at body byte " + strconv.Itoa(r.i)
	}
}

func (r *reader) long() int64 {
	if r.err != "" {
		return 0
	}
	var u uint64
	for s := uint(0); s < 70; s += 7 {
		if r.i >= len(r.b) {
			r.fail("truncated varint")
			return 0
		}
		c := r.b[r.i]
		r.i++
		u |= uint64(c&0x7f) << s
		if c < 0x80 {
			return int64(u>>1) ^ -int64(u&1)
		}
	}
	r.fail("varint longer than 10 bytes")
	return 0
}

func (r *reader) int() int32 {
	v := r.long()
	if v < math.MinInt32 || v > math.MaxInt32 {
		r.fail("int out of 32-bit range")
		return 0
	}
	return int32(v)
}

func (r *reader) rawBytes() []byte {
	n := r.long()
	if r.err != "" {
		return nil
	}
	if n < 0 || n > int64(len(r.b)-r.i) {
		r.fail(fmt.Sprintf("length %d exceeds the %d bytes left", n, len(r.b)-r.i))
		return nil
	}
	p := r.b[r.i : r.i+int(n)]
	r.i += int(n)
	return p
}

func (r *reader) str() string {
	p := r.rawBytes()
	if len(p) == 0 {
		return ""
	}
	if !utf8.Valid(p) {
		r.fail("invalid UTF-8 in string")
		return ""
	}
	return string(p)
}

func (r *reader) double() float64 {
	if r.err != "" {
		return 0
	}
	if len(r.b)-r.i < 8 {
		r.fail("truncated double")
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(r.b[r.i:]))
	r.i += 8
	return v
}

func (r *reader) boolean() bool {
	if r.err != "" {
		return false
	}
	if r.i >= len(r.b) {
		r.fail("truncated boolean")
		return false
	}
	c := r.b[r.i]
	r.i++
	if c > 1 {
		r.fail("boolean byte is not 0 or 1")
	}
	return c == 1
}

// unionIndex reads a ["null", X] branch: false for null.
func (r *reader) present() bool {
	switch r.long() {
	case 0:
		return false
	case 1:
		return true
	}
	r.fail("union branch is not 0 or 1")
	return false
}

func (r *reader) enum(symbols []string) string {
	v := r.long()
	if r.err != "" {
		return ""
	}
	if v < 0 || v >= int64(len(symbols)) {
		r.fail(fmt.Sprintf("enum index %d out of range", v))
		return ""
	}
	return symbols[v]
}

// block reads an array or map block count: 0 ends the value. A negative
// count is followed by the block's size in bytes (Avro spec).
func (r *reader) block(minItem int) int {
	n := r.long()
	if r.err != "" || n == 0 {
		return 0
	}
	if n < 0 {
		n = -n
		if n < 0 {
			r.fail("bad block count")
			return 0
		}
		if sz := r.long(); sz < 0 {
			r.fail("negative block size")
			return 0
		}
	}
	if n > int64((len(r.b)-r.i)/minItem) {
		r.fail(fmt.Sprintf("block of %d items exceeds the bytes left", n))
		return 0
	}
	return int(n)
}

func (r *reader) millis() time.Time {
	return time.UnixMilli(r.long()).UTC()
}

// decodeBody decodes an Avro binary body written with ti's current schema.
func decodeBody(ti *typeInfo, b []byte) (Event, error) {
	r := &reader{b: b}
	ev := New(ti.typ)
	h := ev.Header()
	field := "event_id"
	h.EventID = r.str()
	if r.err == "" {
		field = "event_time"
		h.EventTime = r.millis()
	}
	if r.err == "" {
		field = "project"
		h.Project = r.str()
	}
	if r.err == "" {
		field = "source"
		h.Source = r.str()
	}
	for i := 0; i < len(ti.fields) && r.err == ""; i++ {
		f := &ti.fields[i]
		field = f.name
		switch f.kind {
		case kString:
			*f.str(ev) = r.str()
		case kNullString:
			if r.present() {
				*f.str(ev) = r.str()
			}
		case kEnum:
			*f.str(ev) = r.enum(f.symbols)
		case kInt:
			*f.i32(ev) = r.int()
		case kLong:
			*f.i64(ev) = r.long()
		case kDouble:
			*f.f64(ev) = r.double()
		case kNullDouble:
			if r.present() {
				v := r.double()
				*f.pf64(ev) = &v
			}
		case kBool:
			*f.bl(ev) = r.boolean()
		case kTime:
			*f.tm(ev) = r.millis()
		case kStrings:
			var ss []string
			for n := r.block(1); n > 0; n = r.block(1) {
				for ; n > 0 && r.err == ""; n-- {
					ss = append(ss, r.str())
				}
			}
			*f.strs(ev) = ss
		case kArtifacts:
			var as []Artifact
			for n := r.block(5); n > 0; n = r.block(5) {
				for ; n > 0 && r.err == ""; n-- {
					var a Artifact
					a.Kind = r.enum(artifactKinds)
					a.Name = r.str()
					a.Op = r.enum(artifactOps)
					a.Content = r.str()
					a.ContentSHA256 = r.str()
					as = append(as, a)
				}
			}
			*f.arts(ev) = as
		case kOffsets:
			var os []TopicOffset
			for n := r.block(3); n > 0; n = r.block(3) {
				for ; n > 0 && r.err == ""; n-- {
					var o TopicOffset
					o.Topic = r.str()
					o.Partition = r.int()
					o.Offset = r.long()
					os = append(os, o)
				}
			}
			*f.offs(ev) = os
		case kMetrics:
			var m map[string]float64
			for n := r.block(9); n > 0; n = r.block(9) {
				if m == nil {
					m = make(map[string]float64, n)
				}
				for ; n > 0 && r.err == ""; n-- {
					k := r.str()
					m[k] = r.double()
				}
			}
			*f.mets(ev) = m
		case kBytes:
			if p := r.rawBytes(); len(p) > 0 {
				*f.byts(ev) = append([]byte(nil), p...)
			}
		}
	}
	if r.err == "" && r.i != len(r.b) {
		field = ""
		r.fail(fmt.Sprintf("%d trailing bytes", len(r.b)-r.i))
	}
	if r.err != "" {
		return nil, &FieldError{Type: ti.typ, Field: field, Code: CodeMalformed, Msg: r.err}
	}
	return ev, nil
}
