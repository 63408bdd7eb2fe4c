package processors

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/producers/gen"
	"github.com/harnessflow/harnessflow/schemas"
)

type badInput struct {
	name, topic, key string
	value            []byte
	at               time.Time
	stage, code      string
	msgHas           string // a fragment the dead letter's message must contain
}

// TestBadInputCorpus mixes one bad input of each kind into the test
// campaign. Each must land in hf.dlq with its stage and reason code, and the
// good events around them must derive exactly what the clean campaign does.
func TestBadInputCorpus(t *testing.T) {
	want := reference(t)
	c := testCampaign()
	cell := c.Cells[1] // agent-0's first evolver
	var finishedAt, started time.Time
	var firstUpdate *schemas.HarnessUpdate
	var lastVersion string
	for _, r := range c.Records {
		switch ev := r.Event.(type) {
		case *schemas.CellStarted:
			if ev.CellID == cell {
				started = r.Time
			}
		case *schemas.HarnessUpdate:
			if ev.CellID == cell {
				if firstUpdate == nil {
					firstUpdate = ev
				}
				lastVersion = ev.ToVersion
			}
		case *schemas.CellFinished:
			if ev.CellID == cell {
				finishedAt = r.Time
			}
		}
	}
	mid := started.Add(finishedAt.Sub(started) / 2).Truncate(time.Millisecond)
	enc := func(ev schemas.Event) []byte {
		t.Helper()
		b, err := schemas.Encode(ev)
		if err != nil {
			t.Fatalf("encode %s: %v", ev.Type(), err)
		}
		return b
	}
	env := func(id string) schemas.Envelope {
		return schemas.Envelope{EventID: id, EventTime: mid, Project: c.Config.Project, Source: "corpus"}
	}
	update := func(id, from, to string, arts []schemas.Artifact, evidence []string) *schemas.HarnessUpdate {
		return &schemas.HarnessUpdate{Envelope: env(id), CellID: cell, UpdateID: id, Cycle: 3, FromVersion: from, ToVersion: to,
			EvolverModel: "evolver-0", Artifacts: arts, EvidenceTaskIDs: evidence, Accepted: true}
	}
	art := func(kind, name, content string) []schemas.Artifact {
		return []schemas.Artifact{{Kind: kind, Name: name, Op: schemas.OpAdd, Content: content, ContentSHA256: gen.SHA256(content)}}
	}
	attempt := func(id, task, version string, score float64) *schemas.TaskAttempt {
		return &schemas.TaskAttempt{Envelope: env(id), CellID: cell, TaskID: task, Cycle: 1, Attempt: 1, HarnessVersion: version,
			Status: schemas.StatusOK, Score: score, Final: true}
	}
	ev := []string{"task-000"}
	hashBad := art(schemas.KindSkill, "hash-skill", gen.SkillContent("hash-skill", "check hashes"))
	hashBad[0].ContentSHA256 = gen.SHA256("something else")
	ghost := attempt("ghost:attempt", "task-ghost", "h0", 0.5)
	ghost.CellID = "ghost-cell"
	wrongTopic := &schemas.SkillEvent{Envelope: env("wrong-topic"), CellID: cell, TaskID: "task-000", Attempt: 1, Turn: 1,
		Tool: schemas.ToolLoadSkill, SkillName: "x", Status: schemas.SkillLoaded}
	dupStart := &schemas.CellStarted{Envelope: env("dup-start"), CampaignID: c.Config.Campaign, CellID: cell, Benchmark: "swe",
		AgentModel: "agent-0", EvolverModel: "evolver-0", Seed: int32(c.Config.Seed), Route: schemas.RouteInSitu, H0Version: "h0",
		BatchSize: 5, MaxAttempts: 2, TaskCount: 15}
	oversized := append(enc(attempt("big", "task-big", "h0", 0.5))[:0:0], make([]byte, 40<<10)...)
	copy(oversized, enc(attempt("big", "task-big", "h0", 0.5)))
	corpus := []badInput{
		{name: "malformed bytes", topic: schemas.TopicAttempts, key: cell, value: []byte("definitely not avro"), at: mid,
			stage: schemas.StageDecode, code: schemas.CodeMalformed},
		{name: "unknown fingerprint", topic: schemas.TopicAttempts, key: cell,
			value: append([]byte{0xC3, 0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, "body"...), at: mid,
			stage: schemas.StageDecode, code: schemas.CodeUnknownFingerprint},
		{name: "oversized payload", topic: schemas.TopicAttempts, key: cell, value: oversized, at: mid,
			stage: schemas.StageLimit, code: CodePayloadTooLarge, msgHas: "task task-big attempt 1 (cell " + cell + "): "},
		{name: "NaN score", topic: schemas.TopicAttempts, key: cell, value: enc(attempt("nan", "task-nan", "h0", math.NaN())), at: mid,
			stage: schemas.StageSyntax, code: schemas.CodeOutOfRange},
		{name: "wrong topic", topic: schemas.TopicJudgments, key: cell, value: enc(wrongTopic), at: mid,
			stage: schemas.StageSyntax, code: CodeWrongTopic},
		{name: "broken front matter", topic: schemas.TopicUpdates, key: cell, at: mid,
			value: enc(update("u-fm", "h-x", "h-y", art(schemas.KindSkill, "debug-tips", "---\nname: debug-tips\n---\nbody\n"), ev)),
			stage: schemas.StageSyntax, code: CodeBadFrontMatter, msgHas: "update u-fm (cell " + cell + `): skill "debug-tips": front matter lacks "description"`},
		{name: "bad tool registry", topic: schemas.TopicUpdates, key: cell, at: mid,
			value: enc(update("u-tool", "h-x", "h-y", art(schemas.KindTool, "tools.yaml", "tools: nope\n"), ev)),
			stage: schemas.StageSyntax, code: CodeBadToolRegistry},
		{name: "content hash mismatch", topic: schemas.TopicUpdates, key: cell, at: mid,
			value: enc(update("u-hash", "h-x", "h-y", hashBad, ev)),
			stage: schemas.StageSyntax, code: CodeContentHashMismatch},
		{name: "version does not chain", topic: schemas.TopicUpdates, key: cell, at: mid,
			value: enc(update("u-chain", "h-nope", "h-next", art(schemas.KindSkill, "chain", gen.SkillContent("chain", "chain")), ev)),
			stage: schemas.StageSemantic, code: CodeVersionChain, msgHas: "update u-chain (cell " + cell + `): from_version "h-nope" does not chain`},
		{name: "duplicate content", topic: schemas.TopicUpdates, key: cell, at: finishedAt,
			value: enc(update("u-dup", lastVersion, "h-dup", art(schemas.KindSkill, firstUpdate.Artifacts[0].Name, firstUpdate.Artifacts[0].Content), ev)),
			stage: schemas.StageSemantic, code: CodeDuplicateContent},
		{name: "no evidence", topic: schemas.TopicUpdates, key: cell, at: finishedAt,
			value: enc(update("u-noev", lastVersion, "h-noev", art(schemas.KindSkill, "noev", gen.SkillContent("noev", "no evidence")), nil)),
			stage: schemas.StageSemantic, code: CodeNoEvidence, msgHas: "update u-noev (cell " + cell + "): the update names no evidence task ids"},
		{name: "unknown version", topic: schemas.TopicAttempts, key: cell, value: enc(attempt("ghostver", "task-ghostver", "h-missing", 0.5)), at: mid,
			stage: schemas.StageSemantic, code: CodeUnknownVersion},
		{name: "duplicate cell", topic: schemas.TopicCells, key: cell, value: enc(dupStart), at: mid,
			stage: schemas.StageSemantic, code: CodeDuplicateCell},
		{name: "unknown cell", topic: schemas.TopicAttempts, key: "ghost-cell", value: enc(ghost), at: mid,
			stage: schemas.StageSemantic, code: CodeUnknownCell, msgHas: "task task-ghost attempt 1 (cell ghost-cell): "},
	}
	msgs, err := c.Messages()
	if err != nil {
		t.Fatal(err)
	}
	// Insert each bad input into its topic in timestamp order.
	for _, b := range corpus {
		ms := msgs[b.topic]
		i := 0
		for i < len(ms) && !ms[i].Time.After(b.at) {
			i++
		}
		ms = append(ms[:i], append([]kafka.Message{{Key: []byte(b.key), Value: b.value, Time: b.at}}, ms[i:]...)...)
		msgs[b.topic] = ms
	}
	addr := startBroker(t)
	produce(t, addr, msgs)
	cfg := testConfig(addr, "corpus")
	cfg.PendingTimeout = 500 * time.Millisecond
	cfg.Limits = schemas.Limits{Event: 32 << 10}
	reg := prometheus.NewRegistry()
	_, errc := startProc(t, cfg, WithRegisterer(reg))
	waitCaughtUp(t, addr, "corpus", 90*time.Second, errc)

	// Poll the DLQ until every bad input is there (the unknown cell waits
	// for PendingTimeout), and the derived events until as many as the clean
	// campaign's are there: the unknown version's dead letter releases the
	// cell_finished held behind it, whose samples stage B writes after it.
	deadline := time.After(30 * time.Second)
	var got map[string][]byte
	for {
		got, _ = readDerived(t, addr)
		dlq := countPrefix(got, schemas.TopicDLQ)
		if dlq >= len(corpus) && len(got)-dlq >= len(want)-countPrefix(want, schemas.TopicDLQ) {
			break
		}
		select {
		case err := <-errc:
			t.Fatalf("processor stopped with %d dead letters and %d other derived events read: %v", dlq, len(got)-dlq, err)
		case <-deadline:
			t.Fatalf("after 30s: %d dead letters of %d, %d other derived events of %d", dlq, len(corpus),
				len(got)-dlq, len(want)-countPrefix(want, schemas.TopicDLQ))
		case <-time.After(50 * time.Millisecond): // the next read of the topics
		}
	}
	var dead []*schemas.Rejected
	rest := map[string][]byte{}
	for k, v := range got {
		if strings.HasPrefix(k, schemas.TopicDLQ+"/") {
			ev, err := schemas.Decode(v)
			if err != nil {
				t.Fatal(err)
			}
			dead = append(dead, ev.(*schemas.Rejected))
			continue
		}
		rest[k] = v
	}
	for _, b := range corpus {
		var match *schemas.Rejected
		for _, r := range dead {
			if bytes.Equal(r.Payload, b.value) {
				match = r
			}
		}
		if match == nil {
			t.Errorf("%s: no dead letter", b.name)
			continue
		}
		if match.Stage != b.stage || match.ReasonCode != b.code || match.SourceTopic != b.topic {
			t.Errorf("%s: dead letter %s/%s from %s, want %s/%s from %s (%s)", b.name, match.Stage, match.ReasonCode,
				match.SourceTopic, b.stage, b.code, b.topic, match.Message)
		}
		if match.Message == "" || (b.msgHas != "" && !strings.Contains(match.Message, b.msgHas)) {
			t.Errorf("%s: message %q, want it to contain %q", b.name, match.Message, b.msgHas)
		}
		// About an event: its id, stage and code; about bytes that did
		// not decode: the coordinates.
		wantID := deadLetterID(match.Project, match.SourceTopic, int(match.Partition), match.Offset)
		if wantID == "" {
			wantID = schemas.DeriveEventID(match)
		}
		if ev, err := schemas.Decode(b.value); err == nil && ev.Header().EventID != "" && match.Stage != schemas.StageDecode {
			wantID = eventDeadLetterID(match.Project, ev.Header().EventID, match.Stage, match.ReasonCode)
		}
		if match.EventID != wantID {
			t.Errorf("%s: event id %q is not derived", b.name, match.EventID)
		}
	}
	if len(dead) != len(corpus) {
		for _, r := range dead {
			t.Logf("dead letter: %s/%s %s", r.Stage, r.ReasonCode, r.Message)
		}
		t.Errorf("%d dead letters, want %d", len(dead), len(corpus))
	}
	// The good events derive exactly what the clean campaign does.
	diffSets(t, want, rest)
	// Every rejection is counted by stage and code.
	for _, b := range corpus {
		if n := promRejected(t, reg, b.stage, b.code); n < 1 {
			t.Errorf("%s: hf_process_rejected_total{stage=%q,code=%q} = %v", b.name, b.stage, b.code, n)
		}
	}
	// Fetches are counted with their records: every raw message processed
	// was fetched, and hf.outcomes' batched records hold several events each.
	for _, topic := range append(append([]string(nil), CellTopics...), schemas.TopicOutcomes) {
		l := map[string]string{"topic": topic}
		fetches, recs := promCounter(t, reg, "hf_process_fetches_total", l), promCounter(t, reg, "hf_process_fetched_records_total", l)
		in := promCounter(t, reg, "hf_process_events_in_total", l)
		if fetches < 1 || recs < 1 || in < 1 {
			t.Errorf("%s: %v fetches, %v records, %v events in; want each counted", topic, fetches, recs, in)
		}
		if topic == schemas.TopicOutcomes && recs >= in {
			t.Errorf("%s: %v records for %v events; want several events a record", topic, recs, in)
		}
		if topic != schemas.TopicOutcomes && recs < in {
			t.Errorf("%s: %v records fetched, %v events processed", topic, recs, in)
		}
	}
}

// promRejected returns the value of hf_process_rejected_total{stage, code}.
func promRejected(t *testing.T, reg *prometheus.Registry, stage, code string) float64 {
	t.Helper()
	return promCounter(t, reg, "hf_process_rejected_total", map[string]string{"stage": stage, "code": code})
}

// promCounter returns the value of the counter name{want} (0 when absent).
func promCounter(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
