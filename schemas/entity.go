package schemas

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"strings"
)

// maxEntityID caps one id as Entity writes it (bytes, before quoting), so
// that a huge or garbage id cannot crowd the dead letter's message out.
const maxEntityID = 128

// maxEntityJSON caps how much of a JSON payload PayloadEntity scans.
const maxEntityJSON = 64 << 10

// Entity names the entity ev is about from its identifying fields, for
// messages meant for people (the dead letters' messages): "update u-17 (cell
// c-3)", "task t-1 attempt 2 (cell c-3)", "sample s-9 (update u-17, cell
// c-3)". Empty ids are left out; an event with none is named by its type and
// event id ("task_attempt e-1"), or its type alone. An id that is not plain
// (letters, digits, ._:/@+-) is quoted, and a long one cut. ev nil gives "".
// Safe for concurrent use.
func Entity(ev Event) string {
	if ev == nil {
		return ""
	}
	var n namer
	switch e := ev.(type) {
	case *CampaignDeclared:
		n.add("campaign", e.CampaignID)
	case *CellStarted:
		n.add("cell", e.CellID)
		n.ctx("campaign", e.CampaignID)
	case *CellFinished:
		n.add("cell", e.CellID)
	case *TaskAttempt:
		n.task(e.TaskID, e.Attempt)
		n.ctx("cell", e.CellID)
	case *SkillEvent:
		n.add("skill", e.SkillName)
		n.task(e.TaskID, e.Attempt)
		n.ctx("cell", e.CellID)
	case *AdherenceJudgment:
		n.add("judgment of skill", e.SkillName)
		n.task(e.TaskID, e.Attempt)
		n.ctx("cell", e.CellID)
	case *HarnessUpdate:
		n.add("update", e.UpdateID)
		n.ctx("cell", e.CellID)
	case *LabeledSample:
		n.add("sample", e.SampleID)
		n.ctx("update", e.UpdateID)
		n.ctx("cell", e.CellID)
	case *RoundMetrics:
		if e.CellID != "" {
			n.add("round", strconv.Itoa(int(e.Cycle)))
		}
		n.ctx("cell", e.CellID)
	case *Rejected:
		if e.SourceTopic != "" {
			n.add("dead letter of", e.SourceTopic+"/"+strconv.Itoa(int(e.Partition))+"@"+strconv.FormatInt(e.Offset, 10))
		}
	case *CheckpointPublished:
		n.add("checkpoint", e.ModelVersion)
	}
	return n.name(ev)
}

// namer builds an entity name: the main part, then the context in
// parentheses.
type namer struct {
	main, ctxs []string
}

func (n *namer) add(label, id string) {
	if id != "" {
		n.main = append(n.main, label+" "+plainID(id))
	}
}

// task adds "task T attempt N" (an attempt is 1-based: 0 is unknown).
func (n *namer) task(id string, attempt int32) {
	if id == "" {
		return
	}
	s := "task " + plainID(id)
	if attempt > 0 {
		s += " attempt " + strconv.Itoa(int(attempt))
	}
	n.main = append(n.main, s)
}

func (n *namer) ctx(label, id string) {
	if id != "" {
		n.ctxs = append(n.ctxs, label+" "+plainID(id))
	}
}

func (n *namer) name(ev Event) string {
	if len(n.main) == 0 && len(n.ctxs) == 0 {
		if id := ev.Header().EventID; id != "" {
			return string(ev.Type()) + " " + plainID(id)
		}
		return string(ev.Type())
	}
	if len(n.main) == 0 {
		return strings.Join(n.ctxs, ", ")
	}
	s := strings.Join(n.main, " on ")
	if len(n.ctxs) > 0 {
		s += " (" + strings.Join(n.ctxs, ", ") + ")"
	}
	return s
}

// plainID returns id as it is when it is plain, else quoted; cut at
// maxEntityID bytes (on a rune boundary) with "…" appended.
func plainID(id string) string {
	cut := false
	if len(id) > maxEntityID {
		id, cut = cutUTF8(id, maxEntityID), true
	}
	plain := id != ""
	for i := 0; i < len(id) && plain; i++ {
		c := id[i]
		plain = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:/@+-", c) >= 0
	}
	if !plain {
		id = strconv.Quote(id)
	}
	if cut {
		id += "…"
	}
	return id
}

// WithEntity returns msg prefixed with the entity's name ("update u-17 (cell
// c-3): msg"); msg as it is when name is empty.
func WithEntity(name, msg string) string {
	if name == "" {
		return msg
	}
	return name + ": " + msg
}

// PayloadEntity names, best-effort, the entity of message bytes read from
// topic that did not (or need not) decode. Single-object Avro of a
// compiled-in schema is read field by field up to the first field it cannot
// read, so a truncated or corrupt body still yields the ids before the
// damage. A body whose schema is not known here (an unknown fingerprint,
// Confluent framing, whose writer schema is in a registry) is read the same
// way as the current schema of the one event type that topic carries, when
// it carries one: every schema starts with the envelope and then the ids,
// and a compatible new version only adds fields. A JSON object's "type" and
// identifying fields are read up to the first syntax error (in its first
// 64 KiB), as the topic's one event type when "type" names none. It returns
// Entity of what was read, or "" when nothing names an entity. It never
// panics. Safe for concurrent use.
func PayloadEntity(topic string, b []byte) string {
	ev := partialEvent(topic, b)
	if ev == nil {
		return ""
	}
	return Entity(ev)
}

// partialEvent returns the event that b's readable prefix describes, or nil.
func partialEvent(topic string, b []byte) Event {
	switch {
	case len(b) >= 10 && b[0] == SingleObjectMagic[0] && b[1] == SingleObjectMagic[1]:
		// The ids lead every schema: no need to decode a whole (perhaps
		// oversized) message. An older version decodes whole.
		if sv := byFingerprint[binary.LittleEndian.Uint64(b[2:10])]; sv != nil {
			if !sv.current {
				ev, _ := Decode(b)
				return ev
			}
			return partialAvro(sv.info, b[10:])
		}
		return guessAvro(topic, b[10:])
	case len(b) >= 5 && b[0] == ConfluentMagic:
		return guessAvro(topic, b[5:])
	}
	if t := bytes.TrimLeft(b, " \t\r\n\ufeff"); len(t) > 0 && t[0] == '{' {
		return partialJSON(topic, t[:min(len(t), maxEntityJSON)])
	}
	return nil
}

// guessAvro reads body as the current schema of topicType(topic).
func guessAvro(topic string, body []byte) Event {
	ti := topicType(topic)
	if ti == nil {
		return nil
	}
	return partialAvro(ti, body)
}

// topicType returns the one event type topic carries; nil when it carries
// none or several (hf.cells).
func topicType(topic string) *typeInfo {
	var ti *typeInfo
	for _, t := range AllTypes {
		if TopicFor(t) != topic {
			continue
		}
		if ti != nil {
			return nil
		}
		ti = infos[t]
	}
	return ti
}

// partialAvro reads the envelope and then the scalar fields of a body of
// ti's current schema, in schema order, until a field does not read or the
// first non-scalar field (every identifying field precedes those); it
// returns nil when not even event_id reads.
func partialAvro(ti *typeInfo, body []byte) Event {
	r := &reader{b: body}
	ev := New(ti.typ)
	h := ev.Header()
	id := r.str()
	if r.err != "" {
		return nil
	}
	h.EventID = id
	if at := r.millis(); r.err == "" {
		h.EventTime = at
	}
	if p := r.str(); r.err == "" {
		h.Project = p
	}
	if s := r.str(); r.err == "" {
		h.Source = s
	}
	for i := 0; i < len(ti.fields) && r.err == ""; i++ {
		if !readScalar(r, &ti.fields[i], ev) {
			break
		}
	}
	return ev
}

// readScalar reads one scalar field of f's kind into ev; false for a kind
// it does not read (arrays, maps, bytes) or a value that does not read.
func readScalar(r *reader, f *field, ev Event) bool {
	switch f.kind {
	case kString:
		if s := r.str(); r.err == "" {
			*f.str(ev) = s
		}
	case kNullString:
		if r.present() {
			if s := r.str(); r.err == "" {
				*f.str(ev) = s
			}
		}
	case kEnum:
		if s := r.enum(f.symbols); r.err == "" {
			*f.str(ev) = s
		}
	case kInt:
		if v := r.int(); r.err == "" {
			*f.i32(ev) = v
		}
	case kLong:
		if v := r.long(); r.err == "" {
			*f.i64(ev) = v
		}
	case kTime:
		r.long()
	case kDouble:
		r.double()
	case kNullDouble:
		if r.present() {
			r.double()
		}
	case kBool:
		r.boolean()
	default:
		return false
	}
	return r.err == ""
}

// partialJSON reads the top-level members of a JSON object until the end or
// the first syntax error and returns the event its "type" names (else
// topicType(topic)) with the envelope's ids and the string and int fields
// that were read; nil when neither names a type.
func partialJSON(topic string, b []byte) Event {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	vals := map[string]any{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		key, _ := tok.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			break
		}
		if _, seen := vals[key]; !seen {
			vals[key] = v
		}
	}
	tname, _ := vals["type"].(string)
	ti := infos[Type(tname)]
	if ti == nil {
		ti = topicType(topic)
	}
	if ti == nil {
		return nil
	}
	ev := New(ti.typ)
	h := ev.Header()
	h.EventID, _ = vals["event_id"].(string)
	h.Project, _ = vals["project"].(string)
	for i := range ti.fields {
		f := &ti.fields[i]
		switch v := vals[f.name].(type) {
		case string:
			if f.kind == kString || f.kind == kNullString || f.kind == kEnum {
				*f.str(ev) = v
			}
		case json.Number:
			if n, err := strconv.ParseInt(string(v), 10, 32); err == nil && f.kind == kInt {
				*f.i32(ev) = int32(n)
			}
		}
	}
	return ev
}
