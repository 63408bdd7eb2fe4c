package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/producers/producerstest"
	"github.com/harnessflow/harnessflow/schemas"
)

func consumeLines(out string) []string {
	out = strings.TrimSuffix(out, "\n")
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

func TestConsumeMaxIdleAndStartAtEnd(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	ctx := prodCtx(t, 60*time.Second)
	p, err := producers.New(producers.Config{Brokers: []string{b.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	var evs []schemas.Event
	for i := 0; i < 10; i++ {
		evs = append(evs, producerstest.TaskAttempt(i, "p"))
	}
	if err := p.EmitSync(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, l := range prodJSONL(t, evs) {
		want[l] = true
	}

	// --max: exactly that many events, whatever else is stored.
	code, out, stderr := prodRunCLI(t, ctx, "", "consume", "--brokers", b.Addr(), "--topic", schemas.TopicAttempts, "--from-beginning", "--max", "4")
	if code != 0 {
		t.Fatalf("--max: exit %d; stderr:\n%s", code, stderr)
	}
	if got := consumeLines(out); len(got) != 4 {
		t.Fatalf("--max 4 printed %d lines:\n%s", len(got), out)
	}

	// --idle-timeout: every event of every partition, then exit.
	code, out, stderr = prodRunCLI(t, ctx, "", "consume", "--brokers", b.Addr(), "--topic", schemas.TopicAttempts, "--from-beginning", "--idle-timeout", "1s")
	if code != 0 {
		t.Fatalf("--idle-timeout: exit %d; stderr:\n%s", code, stderr)
	}
	got := consumeLines(out)
	if len(got) != len(evs) {
		t.Fatalf("printed %d events, want %d:\n%s", len(got), len(evs), out)
	}
	for _, l := range got {
		if !want[l] {
			t.Errorf("unexpected line %s", l)
		}
	}

	// Without --from-beginning it starts at the end: nothing old is printed.
	code, out, _ = prodRunCLI(t, ctx, "", "consume", "--brokers", b.Addr(), "--topic", schemas.TopicAttempts, "--idle-timeout", "500ms")
	if code != 0 || out != "" {
		t.Fatalf("from the end: exit %d, printed %q; want nothing", code, out)
	}

	// Usage errors.
	if code, _, _ := prodRunCLI(t, ctx, "", "consume", "--brokers", b.Addr()); code != 2 {
		t.Fatalf("no --topic: exit %d, want 2", code)
	}
	if code, _, _ := prodRunCLI(t, ctx, "", "consume", "--brokers", b.Addr(), "--topic", "no.such.topic", "--idle-timeout", "100ms"); code != 2 {
		t.Fatalf("unknown topic: exit %d, want 2", code)
	}
}

func TestConsumeDecodesDLQAndReportsUndecodable(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	ctx := prodCtx(t, 60*time.Second)
	rej := &schemas.Rejected{
		Envelope: schemas.Envelope{EventID: "rej-1", EventTime: producerstest.Epoch, Project: "p", Source: "validate"},
		Stage:    schemas.StageSyntax, ReasonCode: schemas.CodeBadEnum, Message: `task_attempt.status: "exploded" is not one of ok, error, interrupted, timeout`,
		SourceTopic: schemas.TopicAttempts, Partition: 2, Offset: 41, Payload: []byte(`{"type":"task_attempt","status":"exploded"}`),
	}
	// A dead letter is the pipeline's own type: only an SDK made
	// WithInternalTypes writes one.
	p, err := producers.New(producers.Config{Brokers: []string{b.Addr()}}, producers.WithInternalTypes())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	if err := p.EmitSync(ctx, rej); err != nil {
		t.Fatal(err)
	}
	// A message that is not an event at all, on the same partition (same key).
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: []string{b.Addr()}, Topic: schemas.TopicDLQ})
	defer w.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte(schemas.TopicAttempts), Value: []byte("not avro")}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := prodRunCLI(t, ctx, "", "consume", "--brokers", b.Addr(), "--topic", schemas.TopicDLQ, "--from-beginning", "--idle-timeout", "1s")
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	want, err := schemas.MarshalJSON(rej)
	if err != nil {
		t.Fatal(err)
	}
	// The dead letter's JSON form, then its payload: JSON text that is not
	// a valid event, so an error and the text.
	lines := consumeLines(out)
	if len(lines) != 1 || !strings.HasPrefix(lines[0], string(want[:len(want)-1])+`,"payload_error":"JSON text: task_attempt: `) ||
		!strings.HasSuffix(lines[0], `,"payload_text":"{\"type\":\"task_attempt\",\"status\":\"exploded\"}"}`) {
		t.Fatalf("stdout:\n%s\nwant:\n%s + payload_error, payload_text", out, want)
	}
	if !strings.Contains(stderr, schemas.TopicDLQ+"/") || !strings.Contains(stderr, "@1: cannot decode") {
		t.Fatalf("stderr does not name the undecodable message's topic/partition@offset:\n%s", stderr)
	}

	// A topic where nothing decodes: nothing printed, exit 1 saying so
	// (it used to exit 0, as if the topic were empty).
	w2 := kafkax.NewWriter(kafkax.WriterConfig{Brokers: []string{b.Addr()}, Topic: schemas.TopicOutcomes})
	defer w2.Close()
	if err := w2.WriteMessages(ctx, kafka.Message{Key: []byte("k"), Value: []byte("HFB\x01 not an event")}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = prodRunCLI(t, ctx, "", "consume", "--brokers", b.Addr(), "--topic", schemas.TopicOutcomes, "--from-beginning", "--idle-timeout", "1s")
	if code != 1 || out != "" || !strings.Contains(stderr, "no message read could be decoded") {
		t.Fatalf("nothing decodable: exit %d, stdout %q, stderr:\n%s\nwant exit 1 saying no message could be decoded", code, out, stderr)
	}
}

// consumeRegistry serves the two Schema Registry calls harnessflow makes:
// POST /subjects/{subject}/versions and GET /schemas/ids/{id}.
type consumeRegistry struct {
	mu      sync.Mutex
	schemas []string
}

func (f *consumeRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/versions"):
		var body struct {
			Schema string `json:"schema"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			w.WriteHeader(http.StatusUnprocessableEntity)
			fmt.Fprint(w, `{"error_code":42201,"message":"Invalid schema"}`)
			return
		}
		for i, s := range f.schemas {
			if s == body.Schema {
				fmt.Fprintf(w, `{"id":%d}`, i+1)
				return
			}
		}
		f.schemas = append(f.schemas, body.Schema)
		fmt.Fprintf(w, `{"id":%d}`, len(f.schemas))
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/schemas/ids/"):
		id, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/schemas/ids/"))
		if err != nil || id < 1 || id > len(f.schemas) {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"error_code":40403,"message":"Schema not found"}`)
			return
		}
		json.NewEncoder(w).Encode(map[string]string{"schema": f.schemas[id-1]})
	default:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error_code":404,"message":"HTTP 404 Not Found"}`)
	}
}

func TestConsumeConfluentFramingWithSchemaRegistry(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	ctx := prodCtx(t, 60*time.Second)
	reg := httptest.NewServer(&consumeRegistry{})
	defer reg.Close()
	ev := producerstest.TaskAttempt(1, "p")
	val, err := schemas.NewRegistry(reg.URL, nil).EncodeConfluent(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: []string{b.Addr()}, Topic: schemas.TopicAttempts})
	defer w.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte(ev.CellID), Value: val}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := prodRunCLI(t, ctx, "", "consume", "--brokers", b.Addr(), "--topic", schemas.TopicAttempts,
		"--from-beginning", "--max", "1", "--idle-timeout", "10s", "--schema-registry", reg.URL)
	want := prodJSONL(t, []schemas.Event{ev})[0] + "\n"
	if code != 0 || out != want {
		t.Fatalf("exit %d, stdout %q, want %q; stderr:\n%s", code, out, want, stderr)
	}
	// Without the registry the same message is reported, not printed, and
	// with nothing else decodable the run exits 1.
	code, out, stderr = prodRunCLI(t, ctx, "", "consume", "--brokers", b.Addr(), "--topic", schemas.TopicAttempts,
		"--from-beginning", "--idle-timeout", "1s")
	if code != 1 || out != "" || !strings.Contains(stderr, "cannot decode") || !strings.Contains(stderr, "needs a schema registry") {
		t.Fatalf("without registry: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

// TestConsumeShowsDeadLetterPayload writes dead letters to a real broker as
// the processors do and reads them with consume: an Avro payload is shown
// decoded (payload_event, the event's JSON form) beside the raw payload, a
// Confluent one too with --schema-registry (without: payload_error says to
// pass it), and a payload cut short gives payload_error, with the entity
// still named in the message.
func TestConsumeShowsDeadLetterPayload(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	ctx := prodCtx(t, 60*time.Second)
	reg := producerstest.NewRegistry(t)
	upd := producerstest.Event(schemas.TypeHarnessUpdate, 3, "p").(*schemas.HarnessUpdate)
	updB, err := schemas.Encode(upd)
	if err != nil {
		t.Fatal(err)
	}
	att := producerstest.TaskAttempt(4, "p")
	attB, err := schemas.NewRegistry(reg.URL, nil).EncodeConfluent(ctx, att)
	if err != nil {
		t.Fatal(err)
	}
	origin := func(topic string, off int64, payload []byte, ev schemas.Event) schemas.Origin {
		return schemas.Origin{Topic: topic, Partition: 1, Offset: off, Time: producerstest.Epoch, Payload: payload, Event: ev, Project: "p"}
	}
	whole := schemas.NewRejected("harnessflow-process", schemas.StageSemantic, "version_chain", `from_version "h3" does not chain`,
		origin(schemas.TopicUpdates, 5, updB, upd), 0)
	cut := schemas.NewRejected("sink", schemas.StageDecode, schemas.CodeMalformed, "truncated",
		origin(schemas.TopicUpdates, 6, updB[:len(updB)-10], nil), 0)
	framed := schemas.NewRejected("sink", schemas.StageSyntax, schemas.CodeOutOfRange, "score",
		origin(schemas.TopicAttempts, 7, attB, att), 0)
	p, err := producers.New(producers.Config{Brokers: []string{b.Addr()}}, producers.WithInternalTypes())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	if err := p.EmitSync(ctx, whole, cut, framed); err != nil {
		t.Fatal(err)
	}
	consume := func(args ...string) map[string]map[string]json.RawMessage {
		t.Helper()
		args = append([]string{"consume", "--brokers", b.Addr(), "--topic", schemas.TopicDLQ, "--from-beginning", "--idle-timeout", "1s"}, args...)
		code, out, stderr := prodRunCLI(t, ctx, "", args...)
		if code != 0 || stderr != "" {
			t.Fatalf("exit %d; stderr:\n%s", code, stderr)
		}
		byID := map[string]map[string]json.RawMessage{}
		for _, l := range consumeLines(out) {
			var m map[string]json.RawMessage
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("not a JSON object: %v\n%s", err, l)
			}
			var id string
			json.Unmarshal(m["event_id"], &id)
			byID[id] = m
		}
		if len(byID) != 3 {
			t.Fatalf("%d dead letters printed, want 3:\n%s", len(byID), out)
		}
		return byID
	}
	str := func(raw json.RawMessage) string {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatalf("not a string: %s", raw)
		}
		return s
	}
	wantJSON := func(ev schemas.Event) string {
		j, err := schemas.MarshalJSON(ev)
		if err != nil {
			t.Fatal(err)
		}
		return string(j)
	}

	got := consume("--schema-registry", reg.URL)
	w := got[whole.EventID]
	if string(w["payload_event"]) != wantJSON(upd) || w["payload_error"] != nil {
		t.Fatalf("Avro payload: payload_event %s, payload_error %s; want %s", w["payload_event"], w["payload_error"], wantJSON(upd))
	}
	var ev struct {
		Type      string `json:"type"`
		UpdateID  string `json:"update_id"`
		CellID    string `json:"cell_id"`
		Artifacts []struct {
			Name string `json:"name"`
		} `json:"artifacts"`
	}
	if err := json.Unmarshal(w["payload_event"], &ev); err != nil || ev.Type != "harness_update" || ev.UpdateID != upd.UpdateID ||
		ev.CellID != upd.CellID || len(ev.Artifacts) != 1 || ev.Artifacts[0].Name != upd.Artifacts[0].Name {
		t.Fatalf("payload_event fields %+v (%v)", ev, err)
	}
	if raw := str(w["payload"]); raw != base64.StdEncoding.EncodeToString(updB) {
		t.Fatalf("the raw payload is not kept: %q", raw)
	}
	entity := "update " + upd.UpdateID + " (cell " + upd.CellID + "): "
	if msg := str(w["message"]); !strings.HasPrefix(msg, entity+"from_version") {
		t.Fatalf("message %q does not name the update", msg)
	}
	c := got[cut.EventID]
	if c["payload_event"] != nil || !strings.Contains(str(c["payload_error"]), "harness_update") || c["payload"] == nil {
		t.Fatalf("cut payload: payload_event %s, payload_error %s", c["payload_event"], c["payload_error"])
	}
	if msg := str(c["message"]); msg != entity+"truncated" {
		t.Fatalf("cut payload: message %q, want %q", msg, entity+"truncated")
	}
	if f := got[framed.EventID]; string(f["payload_event"]) != wantJSON(att) {
		t.Fatalf("Confluent payload with the registry: payload_event %s, payload_error %s", f["payload_event"], f["payload_error"])
	}

	// Without the registry the Confluent payload is explained, not decoded.
	got = consume()
	if f := got[framed.EventID]; f["payload_event"] != nil || !strings.Contains(str(f["payload_error"]), "--schema-registry") {
		t.Fatalf("Confluent payload without the registry: payload_event %s, payload_error %s", f["payload_event"], f["payload_error"])
	}
	if string(got[whole.EventID]["payload_event"]) != wantJSON(upd) {
		t.Fatal("the Avro payload is not decoded without a registry")
	}
}
