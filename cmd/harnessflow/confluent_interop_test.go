package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers/gen"
	"github.com/harnessflow/harnessflow/producers/producerstest"
	"github.com/harnessflow/harnessflow/schemas"
)

// TestConfluentSerializerInterop: a producer harnessflow did not write
// (npm's @kafkajs/confluent-schema-registry registering the project's
// schemas through the registry's REST API and encoding with avsc, kafkajs
// producing, with the events' times as message timestamps) sends a
// campaign in the Confluent wire format, plus one attempt whose schema id
// the registry does not have. With
// --schema-registry, consume prints every event as harnessflow encoded it
// itself, replay (the processors) derives every sample and round metric
// with the unknown id as its only dead letter (decode/unknown_schema_id)
// and every cell event on hf.outcomes (which consume prints with no
// registry: single-object, batched), and the sink writes every attempt to ClickHouse, rejecting the same
// message alone.
func TestConfluentSerializerInterop(t *testing.T) {
	t.Parallel()
	node, nodePath := testenv.Node(t, "kafkajs", "@kafkajs/confluent-schema-registry")
	b := testenv.Kafka(t)
	reg := producerstest.NewRegistry(t)
	ctx := prodCtx(t, 4*time.Minute)

	// 2 agents x (baseline + 2 evolvers), 3 rounds of 5 tasks: 12 samples
	// (2 agents x 2 evolvers x 3 updates), 18 round metrics.
	c := gen.Generate(gen.Config{Seed: 11, Agents: 2, Evolvers: 2, Rounds: 3, TasksPerRound: 5})
	type event struct {
		Topic string          `json:"topic"`
		Key   string          `json:"key"`
		Type  schemas.Type    `json:"type"`
		Time  int64           `json:"time"`
		Value json.RawMessage `json:"value"`
	}
	type subjectSchema struct {
		Subject string `json:"subject"`
		Schema  string `json:"schema"`
	}
	in := struct {
		Brokers   []string                       `json:"brokers"`
		Registry  string                         `json:"registry"`
		Schemas   map[schemas.Type]subjectSchema `json:"schemas"`
		Events    []event                        `json:"events"`
		UnknownID int                            `json:"unknown_id"`
		UnknownOf int                            `json:"unknown_of"`
	}{Brokers: []string{b.Addr()}, Registry: reg.URL, Schemas: map[schemas.Type]subjectSchema{}, UnknownID: 99999}
	var attempts, cellEvents []schemas.Event
	for _, r := range c.Records {
		typ := r.Event.Type()
		j, err := schemas.MarshalJSON(r.Event)
		if err != nil {
			t.Fatal(err)
		}
		in.Events = append(in.Events, event{Topic: r.Topic, Key: r.Event.PartitionKey(), Type: typ, Time: r.Time.UnixMilli(), Value: j})
		in.Schemas[typ] = subjectSchema{Subject: schemas.Subject(typ), Schema: schemas.Schema(typ)}
		if r.Topic != schemas.TopicCampaigns {
			cellEvents = append(cellEvents, r.Event)
		}
		if typ == schemas.TypeTaskAttempt {
			attempts = append(attempts, r.Event)
			in.UnknownOf = len(in.Events) - 1 // the unknown id: a copy of the last attempt
		}
	}
	dir := t.TempDir()
	inFile := filepath.Join(dir, "in.json")
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(inFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "confluent_produce.js"), inFile)
	cmd.Env = append(os.Environ(), "NODE_PATH="+nodePath)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node confluent_produce.js: %v\n%s", err, stderr.String())
	}
	var res struct {
		IDs      map[string]int `json:"ids"`
		Produced int            `json:"produced"`
	}
	if err := json.Unmarshal(out, &res); err != nil || res.Produced != len(in.Events)+1 || len(res.IDs) != len(in.Schemas) {
		t.Fatalf("node answered %q (%v), want %d produced and %d schema ids", out, err, len(in.Events)+1, len(in.Schemas))
	}

	// consume: every attempt, as harnessflow's own JSON form; the unknown
	// id reported on stderr.
	wantAttempts := prodJSONL(t, attempts)
	sort.Strings(wantAttempts)
	code, stdout, errOut := prodRunCLI(t, ctx, "", "consume", "--brokers", b.Addr(), "--topic", schemas.TopicAttempts,
		"--from-beginning", "--idle-timeout", "2s", "--schema-registry", reg.URL)
	got := consumeLines(stdout)
	sort.Strings(got)
	if code != 0 || strings.Join(got, "\n") != strings.Join(wantAttempts, "\n") {
		t.Fatalf("consume: exit %d, %d lines, want the %d attempts; stderr:\n%s", code, len(got), len(wantAttempts), errOut)
	}
	if !strings.Contains(errOut, "unknown schema id 99999") {
		t.Fatalf("consume does not report the unknown schema id; stderr:\n%s", errOut)
	}

	// replay: the processors from offset 0 until caught up.
	code, stdout, errOut = prodRunCLI(t, ctx, "", "replay", "--brokers", b.Addr(), "--group", "interop", "--generation", "1",
		"--until-caught-up", "--schema-registry", reg.URL, "--min-pairs", "2",
		"--merge-idle", "200ms", "--finish-hold", "200ms", "--fetch-wait", "50ms")
	if code != 0 {
		t.Fatalf("replay: exit %d, stdout %q; stderr:\n%s", code, stdout, errOut)
	}
	derived := func(topic string) []map[string]any {
		t.Helper()
		code, stdout, errOut := prodRunCLI(t, ctx, "", "consume", "--brokers", b.Addr(), "--topic", topic,
			"--from-beginning", "--idle-timeout", "2s")
		if code != 0 && stdout != "" {
			t.Fatalf("consume %s: exit %d; stderr:\n%s", topic, code, errOut)
		}
		var out []map[string]any
		for _, l := range consumeLines(stdout) {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("consume %s: %v\n%s", topic, err, l)
			}
			out = append(out, m)
		}
		return out
	}
	dead := derived(schemas.TopicDLQ)
	if len(dead) != 1 || dead[0]["stage"] != schemas.StageDecode || dead[0]["reason_code"] != schemas.CodeUnknownSchemaID ||
		dead[0]["source_topic"] != schemas.TopicAttempts {
		t.Fatalf("dead letters %v, want the unknown schema id's alone", dead)
	}
	if n := len(derived(schemas.TopicSamples)); n != 12 {
		t.Errorf("%d labeled samples, want 12", n)
	}
	if n := len(derived(schemas.TopicRoundMetrics)); n != 18 {
		t.Errorf("%d round metrics, want 18", n)
	}
	// hf.outcomes holds every cell event, admitted and re-encoded
	// single-object: consume reads it without a registry.
	code, stdout, errOut = prodRunCLI(t, ctx, "", "consume", "--brokers", b.Addr(), "--topic", schemas.TopicOutcomes,
		"--from-beginning", "--idle-timeout", "2s")
	got = consumeLines(stdout)
	sort.Strings(got)
	wantOutcomes := prodJSONL(t, cellEvents)
	sort.Strings(wantOutcomes)
	if code != 0 || errOut != "" || strings.Join(got, "\n") != strings.Join(wantOutcomes, "\n") {
		t.Fatalf("consume hf.outcomes: exit %d, %d events, want the %d cell events; stderr:\n%s", code, len(got), len(wantOutcomes), errOut)
	}

	// sink: every attempt in ClickHouse; its own rejection of the unknown
	// id beside the processors' dead letter, nothing else rejected.
	ch := testenv.ClickHouse(t)
	sctx, stopSink := context.WithCancel(ctx)
	sinkDone := make(chan string, 1)
	go func() {
		code, _, errOut := prodRunCLI(t, sctx, "", "sink", "--brokers", b.Addr(), "--clickhouse", ch.Addr, "--database", ch.Database,
			"--group", "interop-sink", "--listen", "127.0.0.1:0", "--max-age", "100ms", "--schema-registry", reg.URL)
		if code != 0 {
			errOut = fmt.Sprintf("exit %d\n%s", code, errOut)
		} else {
			errOut = ""
		}
		sinkDone <- errOut
	}()
	defer func() {
		stopSink()
		if msg := <-sinkDone; msg != "" {
			t.Errorf("sink: %s", msg)
		}
	}()
	testenv.WaitFor(t, 90*time.Second, "the sink to write every attempt and both rejections", func() (bool, string) {
		var n, r uint64
		err := ch.Conn.QueryRow(ctx, "SELECT count() FROM task_attempts FINAL").Scan(&n)
		if err == nil {
			err = ch.Conn.QueryRow(ctx, "SELECT count() FROM rejected_events FINAL").Scan(&r)
		}
		return err == nil && n == uint64(len(attempts)) && r >= 2, fmt.Sprintf("%d attempts, %d rejections, err %v", n, r, err)
	})
	_, rows, err := chx.QueryStrings(ctx, ch.Conn, "SELECT source, stage, reason_code, source_topic FROM rejected_events FINAL ORDER BY source")
	if err != nil || len(rows) != 2 {
		t.Fatalf("rejections %v (%v), want 2", rows, err)
	}
	for _, r := range rows {
		if r[1] != schemas.StageDecode || r[2] != schemas.CodeUnknownSchemaID || r[3] != schemas.TopicAttempts {
			t.Fatalf("rejection %v, want decode/%s on %s", r, schemas.CodeUnknownSchemaID, schemas.TopicAttempts)
		}
	}
}
