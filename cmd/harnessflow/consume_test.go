package main

import (
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
	b := testenv.Kafka(t)
	ctx := prodCtx(t, 60*time.Second)
	rej := &schemas.Rejected{
		Envelope: schemas.Envelope{EventID: "rej-1", EventTime: producerstest.Epoch, Project: "p", Source: "validate"},
		Stage:    schemas.StageSyntax, ReasonCode: schemas.CodeBadEnum, Message: `task_attempt.status: "exploded" is not one of ok, error, interrupted, timeout`,
		SourceTopic: schemas.TopicAttempts, Partition: 2, Offset: 41, Payload: []byte(`{"type":"task_attempt","status":"exploded"}`),
	}
	p, err := producers.New(producers.Config{Brokers: []string{b.Addr()}})
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
	if out != string(want)+"\n" {
		t.Fatalf("stdout:\n%s\nwant:\n%s", out, want)
	}
	if !strings.Contains(stderr, schemas.TopicDLQ+"/") || !strings.Contains(stderr, "@1: cannot decode") {
		t.Fatalf("stderr does not name the undecodable message's topic/partition@offset:\n%s", stderr)
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
	// Without the registry the same message is reported, not printed.
	code, out, stderr = prodRunCLI(t, ctx, "", "consume", "--brokers", b.Addr(), "--topic", schemas.TopicAttempts,
		"--from-beginning", "--idle-timeout", "1s")
	if code != 0 || out != "" || !strings.Contains(stderr, "cannot decode") {
		t.Fatalf("without registry: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}
