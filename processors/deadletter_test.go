package processors

import (
	"context"
	"math"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/producers/gen"
	"github.com/harnessflow/harnessflow/schemas"
)

// TestDeadLetterNamesEntityForEveryCode: one bad input per reason code the
// processors write (their own codes and the schemas codes an Avro input can
// fail with) goes through both stages without Kafka; its dead letter has
// that code and a message that starts with the entity ("update u-17 (cell
// c-3): ..."), decode and limit rejections included. A new Code* constant in
// errors.go fails the test until a case covers it.
func TestDeadLetterNamesEntityForEveryCode(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	now := time.Now()
	l := newLocal(t, Config{PendingTimeout: time.Minute, Limits: schemas.Limits{Event: 16 << 10, TaskInput: 8 << 10}})
	env := func(id string) schemas.Envelope {
		return schemas.Envelope{EventID: id, EventTime: t0, Project: "p", Source: "test"}
	}
	enc := func(ev schemas.Event) []byte {
		t.Helper()
		b, err := schemas.Encode(ev)
		if err != nil {
			t.Fatalf("encode %s: %v", ev.Type(), err)
		}
		return b
	}
	started := func(id string) *schemas.CellStarted {
		return &schemas.CellStarted{Envelope: env(id), CampaignID: "k", CellID: "c-3", Benchmark: "b", AgentModel: "a",
			EvolverModel: "e", Seed: 1, Route: schemas.RouteInSitu, H0Version: "h0", BatchSize: 1, MaxAttempts: 1, TaskCount: 2}
	}
	attempt := func(task, version string) *schemas.TaskAttempt {
		return &schemas.TaskAttempt{Envelope: env("e-" + task), CellID: "c-3", TaskID: task, Cycle: 1, Attempt: 2,
			HarnessVersion: version, Status: schemas.StatusOK, Score: 0.5}
	}
	skill := func(name, body string) []schemas.Artifact {
		c := gen.SkillContent(name, body)
		return []schemas.Artifact{{Kind: schemas.KindSkill, Name: name, Op: schemas.OpAdd, Content: c, ContentSHA256: gen.SHA256(c)}}
	}
	update := func(id, from string, arts []schemas.Artifact, evidence ...string) *schemas.HarnessUpdate {
		return &schemas.HarnessUpdate{Envelope: env("e-" + id), CellID: "c-3", UpdateID: id, Cycle: 1, FromVersion: from,
			ToVersion: from + "+", EvolverModel: "e", Artifacts: arts, EvidenceTaskIDs: evidence, Accepted: true}
	}
	var derived []kafka.Message
	feed := func(topic string, b []byte) {
		l.feed(topic, kafka.Message{Key: []byte("c-3"), Value: b, Time: t0}, now, &derived)
	}
	// The cell, and an accepted update h0 -> h0+ whose content is then known.
	feed(schemas.TopicCells, enc(started("start")))
	feed(schemas.TopicUpdates, enc(update("u-1", "h0", skill("first", "one"), "t-1")))

	nan := attempt("t-nan", "h0")
	nan.Score = math.NaN()
	big := attempt("t-big", "h0")
	big.TaskInput = strings.Repeat("x", 10<<10)
	huge := attempt("t-huge", "h0")
	huge.TaskInput = strings.Repeat("x", 8<<10)
	hugeB := append(enc(huge), make([]byte, 16<<10)...) // over Limits.Event: not even decoded
	whole := enc(attempt("t-cut", "h0"))
	hashBad := skill("hash", "bad hash")
	hashBad[0].ContentSHA256 = gen.SHA256("other")
	noFrom := update("u-nofrom", "", skill("nofrom", "x"), "t-1")
	ghost := attempt("t-ghost", "h0")
	ghost.CellID = "ghost"
	wrongTopic := &schemas.SkillEvent{Envelope: env("e-skill"), CellID: "c-3", TaskID: "t-1", Attempt: 2, Turn: 1,
		Tool: schemas.ToolLoadSkill, SkillName: "git", Status: schemas.SkillLoaded}
	tool := []schemas.Artifact{{Kind: schemas.KindTool, Name: "tools.yaml", Op: schemas.OpAdd, Content: "tools: nope\n"}}
	const cell = " (cell c-3): "
	cases := []struct {
		code, topic string
		value       []byte
		want        string
	}{
		{schemas.CodeMalformed, schemas.TopicAttempts, whole[:len(whole)-12], "task t-cut attempt 2" + cell},
		{schemas.CodeUnknownFingerprint, schemas.TopicAttempts, append([]byte{0xC3, 0x01, 9, 9, 9, 9, 9, 9, 9, 9}, whole[10:]...), "task t-cut attempt 2" + cell},
		{CodePayloadTooLarge, schemas.TopicAttempts, hugeB, "task t-huge attempt 2" + cell},
		{schemas.CodeOutOfRange, schemas.TopicAttempts, enc(nan), "task t-nan attempt 2" + cell},
		{schemas.CodeTooLarge, schemas.TopicAttempts, enc(big), "task t-big attempt 2" + cell},
		{schemas.CodeMissingField, schemas.TopicUpdates, enc(noFrom), "update u-nofrom" + cell},
		{CodeWrongTopic, schemas.TopicJudgments, enc(wrongTopic), "skill git on task t-1 attempt 2" + cell},
		{CodeBadFrontMatter, schemas.TopicUpdates, enc(update("u-fm", "h0+", []schemas.Artifact{{Kind: schemas.KindSkill, Name: "fm", Op: schemas.OpAdd, Content: "no front matter"}}, "t-1")), "update u-fm" + cell},
		{CodeBadToolRegistry, schemas.TopicUpdates, enc(update("u-tool", "h0+", tool, "t-1")), "update u-tool" + cell},
		{CodeContentHashMismatch, schemas.TopicUpdates, enc(update("u-hash", "h0+", hashBad, "t-1")), "update u-hash" + cell},
		{CodeVersionChain, schemas.TopicUpdates, enc(update("u-chain", "h-nope", skill("chain", "x"), "t-1")), "update u-chain" + cell},
		{CodeDuplicateContent, schemas.TopicUpdates, enc(update("u-dup", "h0+", skill("first", "one"), "t-1")), "update u-dup" + cell},
		{CodeNoEvidence, schemas.TopicUpdates, enc(update("u-noev", "h0+", skill("noev", "x"))), "update u-noev" + cell},
		{CodeDuplicateCell, schemas.TopicCells, enc(started("start-2")), "cell c-3 (campaign k): "},
		// These two wait for what never comes; the pending timeout ends the wait.
		{CodeUnknownVersion, schemas.TopicAttempts, enc(attempt("t-ver", "h-missing")), "task t-ver attempt 2" + cell},
		{CodeUnknownCell, schemas.TopicAttempts, enc(ghost), "task t-ghost attempt 2 (cell ghost): "},
	}
	seen := map[string]bool{}
	for _, c := range cases {
		seen[c.code] = true
		derived = derived[:0]
		feed(c.topic, c.value)
		if c.code == CodeUnknownVersion || c.code == CodeUnknownCell {
			var out sink
			l.a.tick(&out, now.Add(2*time.Minute))
			derived = append(derived, out.msgs...)
		}
		checkDeadLetter(t, c.code, derived, c.want)
	}

	// Stage B: the scorer refuses a cell_started under another pairing key.
	seen[CodeScoreRejected] = true
	om := &inMsg{topic: schemas.TopicOutcomes, key: []byte("p/k/other/a/1"), ts: t0, value: enc(started("start-b"))}
	decodeAll(context.Background(), []*inMsg{om}, l.cfg.Limits, l.cache, nil)
	var out sink
	l.b.process(om, true, &out, now)
	checkDeadLetter(t, CodeScoreRejected, out.msgs, "cell c-3 (campaign k): ")

	// The state bounds (stage limit), each on a processor state of its own
	// with a small cap.
	bounded := func(cfg Config) (*local, func(topic string, b []byte, at time.Time) []kafka.Message) {
		cfg.PendingTimeout = time.Minute
		bl := newLocal(t, cfg)
		return bl, func(topic string, b []byte, at time.Time) []kafka.Message {
			var d []kafka.Message
			bl.feed(topic, kafka.Message{Key: []byte("c-3"), Value: b, Time: at}, now, &d)
			return d
		}
	}
	seen[CodeOpenCellsCap] = true
	_, bfeed := bounded(Config{MaxOpenCells: 1})
	bfeed(schemas.TopicCells, enc(started("start")), t0)
	second := started("start-4")
	second.CellID = "c-4"
	checkDeadLetter(t, CodeOpenCellsCap, bfeed(schemas.TopicCells, enc(second), t0), "cell c-4 (campaign k): ")

	seen[CodeStateBytesCap] = true
	_, bfeed = bounded(Config{MaxStateBytes: cellCharge + eventCharge + int64(len(enc(started("start"))))})
	bfeed(schemas.TopicCells, enc(started("start")), t0)
	checkDeadLetter(t, CodeStateBytesCap, bfeed(schemas.TopicAttempts, enc(attempt("t-sb", "h0")), t0), "task t-sb attempt 2"+cell)

	seen[CodeCellIdle] = true
	bl, bfeed := bounded(Config{CellIdle: time.Hour})
	bfeed(schemas.TopicCells, enc(started("start")), t0)
	out = sink{}
	bl.a.tick(&out, now.Add(2*time.Hour))
	checkDeadLetter(t, CodeCellIdle, out.msgs, "cell c-3: ")

	// A finished cell is forgotten --grace after its finish: a later
	// attempt of it is late_beyond_window (not unknown_cell).
	seen[CodeLateBeyondWindow] = true
	_, bfeed = bounded(Config{Grace: time.Minute, FinishHold: -1})
	bfeed(schemas.TopicCells, enc(started("start")), t0)
	fin := &schemas.CellFinished{Envelope: env("fin"), CellID: "c-3", Status: schemas.CellCompleted}
	bfeed(schemas.TopicCells, enc(fin), t0)
	later := started("start-other")
	later.CellID = "c-other"
	bfeed(schemas.TopicCells, enc(later), t0.Add(2*time.Minute)) // the log clock passes the grace
	checkDeadLetter(t, CodeLateBeyondWindow, bfeed(schemas.TopicAttempts, enc(attempt("t-late", "h0")), t0.Add(2*time.Minute)), "task t-late attempt 2"+cell)

	src, err := os.ReadFile("errors.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^\s*(Code[A-Za-z]+) = "`).FindAllStringSubmatch(string(src), -1) {
		if code := codeOf(m[1]); !seen[code] {
			t.Errorf("reason code %s (%q) has no case", m[1], code)
		}
	}
}

// codeOf returns the value of the processors reason-code constant name.
func codeOf(name string) string {
	return map[string]string{
		"CodeWrongTopic": CodeWrongTopic, "CodeBadFrontMatter": CodeBadFrontMatter, "CodeBadToolRegistry": CodeBadToolRegistry,
		"CodeContentHashMismatch": CodeContentHashMismatch, "CodeUnknownCell": CodeUnknownCell, "CodeVersionChain": CodeVersionChain,
		"CodeDuplicateContent": CodeDuplicateContent, "CodeNoEvidence": CodeNoEvidence, "CodeUnknownVersion": CodeUnknownVersion,
		"CodeDuplicateCell": CodeDuplicateCell, "CodeScoreRejected": CodeScoreRejected, "CodePayloadTooLarge": CodePayloadTooLarge,
		"CodeOpenCellsCap": CodeOpenCellsCap, "CodeStateBytesCap": CodeStateBytesCap, "CodeCellIdle": CodeCellIdle,
		"CodeLateBeyondWindow": CodeLateBeyondWindow,
	}[name]
}

// checkDeadLetter asserts that msgs hold exactly one dead letter, with
// code, whose message starts with prefix.
func checkDeadLetter(t *testing.T, code string, msgs []kafka.Message, prefix string) {
	t.Helper()
	var dead []*schemas.Rejected
	for _, m := range msgs {
		if m.Topic != schemas.TopicDLQ {
			continue
		}
		ev, err := schemas.Decode(m.Value)
		if err != nil {
			t.Fatalf("%s: dead letter does not decode: %v", code, err)
		}
		dead = append(dead, ev.(*schemas.Rejected))
	}
	if len(dead) != 1 {
		t.Errorf("%s: %d dead letters, want 1", code, len(dead))
		for _, r := range dead {
			t.Logf("  %s/%s: %s", r.Stage, r.ReasonCode, r.Message)
		}
		return
	}
	t.Logf("%s/%s: %s", dead[0].Stage, dead[0].ReasonCode, dead[0].Message)
	if r := dead[0]; r.ReasonCode != code || !strings.HasPrefix(r.Message, prefix) {
		t.Errorf("%s: dead letter %s/%s %q, want the code and a message starting %q", code, r.Stage, r.ReasonCode, r.Message, prefix)
	}
}

// TestDeadLetterIDIsTheEvents: an event sent twice (a retried OTLP export:
// the same event id in two messages) for a cell that never starts is
// dead-lettered twice, at two offsets, with one dead-letter id, so
// rejected_events (a ReplacingMergeTree on project and event_id) keeps
// one row of it; another event's, another reason's and two undecodable
// messages' dead letters keep ids of their own.
func TestDeadLetterIDIsTheEvents(t *testing.T) {
	l := newLocal(t, Config{PendingTimeout: time.Minute})
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	attempt := func(id string) []byte {
		a := &schemas.TaskAttempt{Envelope: schemas.Envelope{EventID: id, EventTime: t0, Project: "p", Source: "ingest:otlp"},
			CellID: "never-started", TaskID: "t", Cycle: 1, Attempt: 1, Status: schemas.StatusOK, Score: 1, Success: true}
		b, err := schemas.Encode(a)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var derived []kafka.Message
	now := time.Now()
	feed := func(b []byte, at time.Time) {
		l.feed(schemas.TopicAttempts, kafka.Message{Key: []byte("never-started"), Value: b, Time: at}, now, &derived)
	}
	feed(attempt("span-1"), t0)
	feed(attempt("span-1"), t0.Add(time.Second)) // the retry
	feed(attempt("span-2"), t0.Add(2*time.Second))
	feed([]byte("not avro"), t0.Add(3*time.Second))
	feed([]byte("not avro"), t0.Add(4*time.Second))
	feed(attempt("tick"), t0.Add(5*time.Minute)) // the log clock passes the timeout
	// "reason_code event_id" -> the offsets dead-lettered under it
	ids := map[string][]int64{}
	for _, m := range derived {
		ev, err := schemas.Decode(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		r := ev.(*schemas.Rejected)
		key := r.ReasonCode + " " + r.EventID
		ids[key] = append(ids[key], r.Offset)
	}
	if len(derived) != 5 || len(ids) != 4 {
		t.Fatalf("%d dead letters with ids %v, want 5 with 4 ids (span-1's two share one)", len(derived), ids)
	}
	span1 := CodeUnknownCell + " " + eventDeadLetterID("p", "span-1", schemas.StageSemantic, CodeUnknownCell)
	if offs := ids[span1]; len(offs) != 2 || offs[0] == offs[1] {
		t.Errorf("span-1's dead letters %v, want %s at offsets 0 and 1", ids, span1)
	}
	malformed := 0
	for k, offs := range ids {
		if strings.HasPrefix(k, schemas.CodeMalformed+" ") {
			malformed++
		}
		if k != span1 && len(offs) != 1 {
			t.Errorf("%s: %d dead letters, want 1", k, len(offs))
		}
	}
	if malformed != 2 {
		t.Errorf("dead letters %v, want two malformed ones with ids of their own (their coordinates)", ids)
	}
	if eventDeadLetterID("p", "span-1", schemas.StageSemantic, CodeUnknownVersion) == eventDeadLetterID("p", "span-1", schemas.StageSemantic, CodeUnknownCell) ||
		eventDeadLetterID("q", "span-1", schemas.StageSemantic, CodeUnknownCell) == eventDeadLetterID("p", "span-1", schemas.StageSemantic, CodeUnknownCell) {
		t.Error("another reason code or project gives the same dead-letter id")
	}
}
