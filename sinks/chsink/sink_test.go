package chsink_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/broker"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chserver"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/sinks/chsink"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func fp(v float64) *float64 { return &v }

// campaignEvents returns a small but complete campaign: every event type,
// two agents, a baseline and two evolvers each, several rounds. It is the
// input of the idempotence test; every view has rows on it.
func campaignEvents() []schemas.Event {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	env := func(i int) schemas.Envelope {
		return schemas.Envelope{EventID: fmt.Sprintf("ev-%05d", i), EventTime: t0.Add(time.Duration(i) * time.Second), Project: "p", Source: "test"}
	}
	n := 0
	next := func() schemas.Envelope { n++; return env(n) }
	var out []schemas.Event
	out = append(out, &schemas.CampaignDeclared{Envelope: next(), CampaignID: "c1", Benchmarks: []string{"swe"},
		AnchorAgents: []string{"A1", "A2"}, AnchorEvolvers: []string{"E1", "E2"}, LabelEpsilon: 0.02, LabelAlpha: 0.05})
	for ai, agent := range []string{"A1", "A2"} {
		for ei, evolver := range []string{"", "E1", "E2"} {
			cell := fmt.Sprintf("%s-%s", agent, evolver)
			route := schemas.RouteInSitu
			if evolver == "" {
				route, cell = schemas.RouteBaseline, agent+"-base"
			}
			out = append(out, &schemas.CellStarted{Envelope: next(), CampaignID: "c1", CellID: cell, Benchmark: "swe",
				AgentModel: agent, EvolverModel: evolver, Seed: 1, Route: route, H0Version: "h0", BatchSize: 5,
				MaxAttempts: 2, TaskCount: 20})
			for task := 0; task < 20; task++ {
				tid := fmt.Sprintf("t%02d", task)
				cycle := int32(task/5 + 1)
				ok := (task*7+ai*3+ei*5)%10 < 4+2*ei+ai
				avail := int32(0)
				if evolver != "" {
					avail = 2
				}
				out = append(out, &schemas.TaskAttempt{Envelope: next(), CellID: cell, TaskID: tid, StreamIdx: int32(task),
					Cycle: cycle, Attempt: 1, HarnessVersion: "h0", Status: schemas.StatusOK, Score: map[bool]float64{true: 1, false: 0.25}[ok],
					Success: ok, Final: ok, SkillsAvailable: avail, SkillsLoaded: []string{}, InputTokens: 1000, OutputTokens: 200, DurationMs: 3000})
				if !ok {
					out = append(out, &schemas.TaskAttempt{Envelope: next(), CellID: cell, TaskID: tid, StreamIdx: int32(task),
						Cycle: cycle, Attempt: 2, HarnessVersion: "h0", Status: schemas.StatusOK, Score: 0.5,
						Success: task%3 == 0, Final: true, SkillsAvailable: avail, SkillsLoaded: []string{}})
				}
				if evolver != "" {
					status := schemas.SkillLoaded
					if task%4 == 1 {
						status = schemas.SkillRejectedMultikey
					}
					out = append(out, &schemas.SkillEvent{Envelope: next(), CellID: cell, TaskID: tid, Attempt: 1, Turn: 1,
						Tool: schemas.ToolLoadSkill, SkillName: "fix-tests", Status: status})
					out = append(out, &schemas.AdherenceJudgment{Envelope: next(), CellID: cell, TaskID: tid, Attempt: 1,
						SkillName: "fix-tests", JudgeModel: "judge", Followed: int32(task % 4), ViolatedCommission: 1,
						ViolatedOmission: int32(task % 2), HarnessLoaded: fp(0.9 - 0.1*float64(ai)), FirstAction: fp(0.8),
						Midpoint: fp(0.6), PreFinal: fp(0.5), FinalValidation: fp(0.4 + 0.01*float64(task))})
				}
			}
			if evolver != "" {
				for cycle := int32(1); cycle <= 4; cycle++ {
					uid := fmt.Sprintf("%s-u%d", cell, cycle)
					out = append(out, &schemas.HarnessUpdate{Envelope: next(), CellID: cell, UpdateID: uid, Cycle: cycle,
						FromVersion: fmt.Sprintf("h%d", cycle-1), ToVersion: fmt.Sprintf("h%d", cycle), EvolverModel: evolver,
						Artifacts: []schemas.Artifact{{Kind: schemas.KindSkill, Name: "fix-tests", Op: schemas.OpModify,
							Content: "---\nname: fix-tests\ndescription: d\n---\nrun tests", ContentSHA256: "abc"}},
						EvidenceTaskIDs: []string{"t00"}, Accepted: true})
					lift := float64(cycle)*2 - float64(ei) + float64(ai)
					out = append(out, &schemas.RoundMetrics{Envelope: next(), CellID: cell, CampaignID: "c1", Benchmark: "swe",
						AgentModel: agent, EvolverModel: evolver, Seed: 1, Cycle: cycle, NTasks: 5, PassRate: 40, MeanScore: 50,
						LiftVsBaseline: fp(lift), SkillLoadRate: fp(0.75)})
					for rep := 0; rep < 2; rep++ {
						label := []string{schemas.LabelPositive, schemas.LabelNegative, schemas.LabelNeutral}[(int(cycle)+rep*ei)%3]
						out = append(out, &schemas.LabeledSample{Envelope: next(), SampleID: fmt.Sprintf("%s-s%d", uid, rep),
							UpdateID: uid, CellID: cell, CampaignID: "c1", Benchmark: "swe", AgentModel: agent, EvolverModel: evolver,
							Cycle: cycle, Query: "q", Update: "u", ArtifactKind: schemas.KindSkill, Effect: 0.01 * float64(cycle),
							Label: label, NBefore: 5, NAfter: 5, Reason: "r", HarnessVersion: fmt.Sprintf("h%d", cycle),
							Seed: 1, Route: route, ProducedAt: t0.Add(time.Duration(rep) * time.Minute)})
					}
				}
			}
			out = append(out, &schemas.CellFinished{Envelope: next(), CellID: cell, Status: schemas.CellCompleted, Attempts: 25})
		}
	}
	out = append(out, &schemas.Rejected{Envelope: next(), Stage: schemas.StageSyntax, ReasonCode: schemas.CodeBadEnum,
		Message: "bad status", SourceTopic: schemas.TopicAttempts, Partition: 2, Offset: 7, Payload: []byte("{}")})
	out = append(out, &schemas.CheckpointPublished{Envelope: next(), ModelVersion: "m1", Step: 10, SamplesTrained: 40,
		Offsets: []schemas.TopicOffset{{Topic: schemas.TopicSamples, Partition: 0, Offset: 12}}, Metrics: map[string]float64{"loss": 0.5}})
	return out
}

// produce writes evs to their topics, keyed by partition key, plus raw
// (undecodable) messages to hf.attempts.
func produce(t *testing.T, brokers []string, evs []schemas.Event, garbage ...[]byte) {
	t.Helper()
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: brokers})
	defer w.Close()
	msgs := make([]kafka.Message, 0, len(evs)+len(garbage))
	for _, ev := range evs {
		b, err := schemas.Encode(ev)
		if err != nil {
			t.Fatalf("encode %T: %v", ev, err)
		}
		msgs = append(msgs, kafka.Message{Topic: schemas.TopicFor(ev.Type()), Key: []byte(ev.PartitionKey()), Value: b})
	}
	for i, g := range garbage {
		msgs = append(msgs, kafka.Message{Topic: schemas.TopicAttempts, Key: []byte(fmt.Sprintf("junk-%d", i)), Value: g})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// runSink starts a sink and returns it with a stop function that cancels it
// and returns Run's result.
func runSink(t *testing.T, cfg chsink.Config) (*chsink.Sink, func() error) {
	t.Helper()
	s, err := chsink.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once bool
	var res error
	stop := func() error {
		if !once {
			once = true
			cancel()
			select {
			case res = <-done:
			case <-time.After(90 * time.Second):
				res = errors.New("sink did not stop within 90s")
			}
		}
		return res
	}
	t.Cleanup(func() { _ = stop() })
	return s, stop
}

func count(conn driver.Conn, q string) (uint64, error) {
	var n uint64
	err := conn.QueryRow(context.Background(), q).Scan(&n)
	return n, err
}

var viewNames = []string{"v_cell_scores", "v_pair_gain", "v_update_gain", "v_benefit_gain",
	"v_skill_activation", "v_adherence", "v_round_stability", "v_label_summary"}

var eventTables = []string{"campaigns", "cells", "task_attempts", "skill_events", "harness_updates",
	"adherence_judgments", "labeled_samples", "round_metrics", "rejected_events", "checkpoints"}

// snapshot returns every view's sorted contents and every table's deduplicated
// row count.
func snapshot(t *testing.T, conn driver.Conn) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, v := range viewNames {
		_, rows, err := chx.QueryStrings(context.Background(), conn, "SELECT * FROM "+v)
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		lines := make([]string, len(rows))
		for i, r := range rows {
			lines[i] = strings.Join(r, "|")
		}
		sort.Strings(lines)
		out[v] = strings.Join(lines, "\n")
	}
	for _, tb := range eventTables {
		n, err := count(conn, "SELECT count() FROM "+tb+" FINAL")
		if err != nil {
			t.Fatal(err)
		}
		out[tb] = fmt.Sprint(n)
	}
	return out
}

func TestSinkWritesEveryTableAndRedeliveryChangesNoView(t *testing.T) {
	broker := testenv.Kafka(t)
	ch := testenv.ClickHouse(t)
	brokers := []string{broker.Addr()}
	evs := campaignEvents()
	garbage := [][]byte{[]byte("not avro at all"), {0xC3, 0x01, 1, 2, 3, 4, 5, 6, 7, 8, 9}}
	produce(t, brokers, evs, garbage...)
	total := uint64(len(evs) + len(garbage))

	cfg := chsink.Config{Brokers: brokers, ClickHouse: ch.Addr, Database: ch.Database, Group: "g1",
		MaxAge: 100 * time.Millisecond}
	s1, stop1 := runSink(t, cfg)
	select {
	case <-s1.Ready():
	case <-time.After(60 * time.Second):
		t.Fatal("the sink is not Ready after 60 s with ClickHouse and the broker up")
	}
	testenv.WaitFor(t, 60*time.Second, "the first sink to insert every message", func() (bool, string) {
		st := s1.Stats()
		return uint64(st.Rows) >= total, fmt.Sprintf("%+v of %d", st, total)
	})
	if err := stop1(); err != nil {
		t.Fatalf("first sink: %v", err)
	}
	if st := s1.Stats(); st.Rejected != int64(len(garbage)) || st.Commits == 0 {
		t.Fatalf("stats %+v: want %d rejected and commits", st, len(garbage))
	}

	// Every event is in its table, once.
	byTable := map[string]int{}
	for _, ev := range evs {
		tb := map[schemas.Type]string{
			schemas.TypeCampaignDeclared: "campaigns", schemas.TypeCellStarted: "cells", schemas.TypeCellFinished: "cells",
			schemas.TypeTaskAttempt: "task_attempts", schemas.TypeSkillEvent: "skill_events",
			schemas.TypeHarnessUpdate: "harness_updates", schemas.TypeAdherenceJudgment: "adherence_judgments",
			schemas.TypeLabeledSample: "labeled_samples", schemas.TypeRoundMetrics: "round_metrics",
			schemas.TypeRejected: "rejected_events", schemas.TypeCheckpointPublished: "checkpoints",
		}[ev.Type()]
		byTable[tb]++
	}
	byTable["rejected_events"] += len(garbage)
	before := snapshot(t, ch.Conn)
	for tb, n := range byTable {
		if before[tb] != fmt.Sprint(n) {
			t.Errorf("%s: %s rows, want %d", tb, before[tb], n)
		}
	}
	for _, v := range viewNames {
		if before[v] == "" {
			t.Errorf("%s is empty", v)
		}
	}
	// The sink recomputed the cell_scores summary of every cell it wrote
	// attempts of, and the summaries are what the live deduplication gives.
	attemptCells := map[string]bool{}
	for _, ev := range evs {
		if a, ok := ev.(*schemas.TaskAttempt); ok {
			attemptCells[a.CellID] = true
		}
	}
	if n, err := count(ch.Conn, "SELECT count() FROM cell_scores FINAL"); err != nil || n != uint64(len(attemptCells)) {
		t.Fatalf("cell_scores rows %d (%v), want %d", n, err, len(attemptCells))
	}
	assertSummariesLive(t, ch.Conn)
	// Undecodable messages are rows with their coordinates.
	_, rows, err := chx.QueryStrings(context.Background(), ch.Conn,
		"SELECT stage, reason_code, source_topic, source_offset >= 0, payload FROM rejected_events WHERE stage = 'decode' ORDER BY payload")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0][0] != "decode" || rows[0][1] != schemas.CodeMalformed || rows[0][2] != schemas.TopicAttempts ||
		rows[0][4] != "not avro at all" || rows[1][1] != schemas.CodeUnknownFingerprint {
		t.Fatalf("decode rejections: %v", rows)
	}
	// A field that round-trips through the sink's column mapping.
	_, rows, err = chx.QueryStrings(context.Background(), ch.Conn,
		"SELECT artifact_kind, artifact_op, evidence_task_ids, accepted FROM harness_updates WHERE update_id = 'A1-E1-u2'")
	if err != nil || len(rows) != 1 || strings.Join(rows[0], " ") != "[skill] [modify] [t00] 1" {
		t.Fatalf("harness update row: %v %v", rows, err)
	}

	// A second group replays every topic from offset 0 into the same
	// database: every row arrives a second time.
	s2, stop2 := runSink(t, chsink.Config{Brokers: brokers, ClickHouse: ch.Addr, Database: ch.Database, Group: "g2",
		MaxAge: 100 * time.Millisecond})
	testenv.WaitFor(t, 60*time.Second, "the replaying sink to insert every message again", func() (bool, string) {
		st := s2.Stats()
		return uint64(st.Rows) >= total, fmt.Sprintf("%+v of %d", st, total)
	})
	if err := stop2(); err != nil {
		t.Fatalf("replaying sink: %v", err)
	}
	raw, err := count(ch.Conn, "SELECT count() FROM task_attempts")
	if err != nil {
		t.Fatal(err)
	}
	if raw != 2*uint64(byTable["task_attempts"]) {
		t.Logf("raw task_attempts rows %d (merges may have collapsed some duplicates)", raw)
	}
	after := snapshot(t, ch.Conn)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s changed after a full replay:\nbefore:\n%s\nafter:\n%s", k, v, after[k])
		}
	}
	assertSummariesLive(t, ch.Conn)
	assertCommitted(t, brokers, "g1")
}

// assertSummariesLive checks that every cell_scores summary equals the live
// per-task deduplication of the cell's attempts (v_cell_scores' definition),
// a cell being (project, cell_id).
func assertSummariesLive(t *testing.T, conn driver.Conn) {
	t.Helper()
	const live = `SELECT project, cell_id, count(), 100 * avg(t_first), 100 * avg(t_final), 100 * avg(t_first_score), 100 * avg(t_final_score)
FROM (SELECT project, cell_id, task_id,
    argMaxIf(success = 1 AND status = 'ok', _version, attempt = 1) AS t_first,
    argMaxIf(if(status = 'ok', score, 0), _version, attempt = 1) AS t_first_score,
    argMaxIf(success = 1 AND status = 'ok', _version, final = 1) AS t_final,
    argMaxIf(if(status = 'ok', score, 0), _version, final = 1) AS t_final_score
  FROM task_attempts GROUP BY project, cell_id, task_id)
GROUP BY project, cell_id ORDER BY project, cell_id`
	const summary = `SELECT project, cell_id, argMax(n_tasks, _version), argMax(pass_rate, _version), argMax(pass_rate_final, _version),
    argMax(mean_score, _version), argMax(mean_score_final, _version)
FROM cell_scores GROUP BY project, cell_id ORDER BY project, cell_id`
	_, want, err := chx.QueryStrings(context.Background(), conn, live)
	if err != nil {
		t.Fatal(err)
	}
	_, got, err := chx.QueryStrings(context.Background(), conn, summary)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(want) == 0 {
		t.Fatalf("cell_scores:\n%v\nlive:\n%v", got, want)
	}
}

// assertCommitted checks that group has committed the end offset of every
// partition of the topics the sink reads.
func assertCommitted(t *testing.T, brokers []string, group string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	topics := chsink.DefaultTopics()
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		t.Fatal(err)
	}
	req := &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{}}
	lreq := map[string][]kafka.OffsetRequest{}
	for _, tp := range md.Topics {
		for _, p := range tp.Partitions {
			req.Topics[tp.Name] = append(req.Topics[tp.Name], p.ID)
			lreq[tp.Name] = append(lreq[tp.Name], kafka.LastOffsetOf(p.ID))
		}
	}
	committed, err := client.OffsetFetch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: lreq})
	if err != nil {
		t.Fatal(err)
	}
	for topic, parts := range ends.Topics {
		for _, p := range parts {
			if p.LastOffset == 0 {
				continue
			}
			var got int64 = -1
			for _, c := range committed.Topics[topic] {
				if c.Partition == p.Partition {
					got = c.CommittedOffset
				}
			}
			if got != p.LastOffset {
				t.Errorf("group %s %s/%d: committed %d, end %d", group, topic, p.Partition, got, p.LastOffset)
			}
		}
	}
}

func attempts(from, n int) []schemas.Event {
	out := make([]schemas.Event, n)
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for i := range out {
		k := from + i
		out[i] = &schemas.TaskAttempt{
			Envelope: schemas.Envelope{EventID: fmt.Sprintf("att-%07d", k), EventTime: t0.Add(time.Duration(k) * time.Millisecond), Project: "p", Source: "test"},
			CellID:   fmt.Sprintf("cell-%d", k%13), TaskID: fmt.Sprintf("task-%d", k), Attempt: 1, Status: schemas.StatusOK,
			Score: 1, Success: true, Final: true, SkillsLoaded: []string{},
		}
	}
	return out
}

func TestSinkSurvivesClickHouseOutageWithNothingLost(t *testing.T) {
	testenv.NoLeaks(t, "github.com/harnessflow/harnessflow/sinks/chsink")
	broker := testenv.Kafka(t)
	srv := testenv.StartClickHouse(t, "")
	brokers := []string{broker.Addr()}
	const db = "outage"
	ctx, cancel := testenv.Context(t)
	defer cancel()
	conn, err := chx.Open(ctx, srv.Addr(), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chddl.Migrate(ctx, chx.Session(conn), db); err != nil {
		t.Fatal(err)
	}
	conn.Close()

	s, stop := runSink(t, chsink.Config{Brokers: brokers, ClickHouse: srv.Addr(), Database: db, Group: "outage",
		MaxAge: 50 * time.Millisecond, RetryMaxInterval: 200 * time.Millisecond, InsertTimeout: 5 * time.Second})
	produce(t, brokers, attempts(0, 3000))
	testenv.WaitFor(t, 60*time.Second, "the first rows", func() (bool, string) {
		return s.Stats().Rows >= 3000, fmt.Sprintf("%+v", s.Stats())
	})

	// Outage: the server dies; more events arrive meanwhile.
	cfg := srv.Config()
	srv.Kill()
	produce(t, brokers, attempts(3000, 4000))
	testenv.WaitFor(t, 60*time.Second, "the sink to notice the outage and retry", func() (bool, string) {
		return s.Stats().Retries > 0, fmt.Sprintf("%+v", s.Stats())
	})
	produce(t, brokers, attempts(7000, 3000))

	// Back on the same data dir and port.
	srv2, err := chserver.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("restart clickhouse: %v", err)
	}
	defer srv2.Stop()
	conn2, err := chx.Open(ctx, srv2.Addr(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	testenv.WaitFor(t, 90*time.Second, "every produced attempt in ClickHouse", func() (bool, string) {
		n, err := count(conn2, "SELECT count() FROM task_attempts FINAL")
		return err == nil && n == 10000, fmt.Sprintf("%d rows, err %v, stats %+v", n, err, s.Stats())
	})
	if err := stop(); err != nil {
		t.Fatalf("sink: %v", err)
	}
	n, err := count(conn2, "SELECT count() FROM task_attempts FINAL")
	if err != nil || n != 10000 {
		t.Fatalf("after stop: %d rows (%v), want exactly 10000", n, err)
	}
	ids, err := count(conn2, "SELECT uniqExact(event_id) FROM task_attempts")
	if err != nil || ids != 10000 {
		t.Fatalf("distinct event ids %d (%v), want 10000", ids, err)
	}
	assertCommitted(t, brokers, "outage")
}

func TestConfigValidate(t *testing.T) {
	_, err := chsink.New(chsink.Config{MaxRows: -1, Topics: []string{"hf.nope"}})
	for _, want := range []error{chsink.ErrNoBrokers, chsink.ErrNoClickHouse, chsink.ErrBadLimits} {
		if !errors.Is(err, want) {
			t.Errorf("New: %v, want %v", err, want)
		}
	}
	if err == nil || !strings.Contains(err.Error(), "hf.nope") {
		t.Errorf("unknown topic not reported: %v", err)
	}
	for _, tp := range chsink.DefaultTopics() {
		if tp == schemas.TopicOutcomes {
			t.Fatal("default topics include hf.outcomes")
		}
	}
	if len(chsink.DefaultTopics()) != 10 {
		t.Fatalf("default topics %v", chsink.DefaultTopics())
	}
}

// TestSinkSurvivesBrokerRestart restarts the broker on its data dir while the
// sink inserts and commits: the sink's fetches and commits fail meanwhile,
// and it must start its consumer again from the committed offsets (not stop)
// and end with every row exactly once.
func TestSinkSurvivesBrokerRestart(t *testing.T) {
	testenv.NoLeaks(t, "github.com/harnessflow/harnessflow/sinks/chsink")
	dir := t.TempDir()
	b1 := testenv.Kafka(t, dir)
	addr := b1.Addr()
	brokers := []string{addr}
	ch := testenv.ClickHouse(t)
	s, stop := runSink(t, chsink.Config{Brokers: brokers, ClickHouse: ch.Addr, Database: ch.Database, Group: "restart",
		MaxAge: 20 * time.Millisecond, RetryMaxInterval: 200 * time.Millisecond, InsertTimeout: 5 * time.Second})
	produce(t, brokers, attempts(0, 2000))
	testenv.WaitFor(t, 60*time.Second, "the first rows", func() (bool, string) {
		return s.Stats().Rows >= 2000, fmt.Sprintf("%+v", s.Stats())
	})
	produce(t, brokers, attempts(2000, 2000))
	b1.Close() // while the sink inserts and commits those
	// The fault: the broker stays down 1.5 s (its length, not a wait for
	// an outcome).
	time.Sleep(1500 * time.Millisecond)
	var b2 *broker.Broker
	var err error
	for i := 0; i < 50; i++ {
		if b2, err = broker.Start(broker.Config{Listen: addr, DataDir: dir}); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("restart broker: %v", err)
	}
	t.Cleanup(b2.Close)
	produce(t, brokers, attempts(4000, 2000))
	testenv.WaitFor(t, 90*time.Second, "every produced attempt in ClickHouse", func() (bool, string) {
		n, err := count(ch.Conn, "SELECT count() FROM task_attempts FINAL")
		return err == nil && n == 6000, fmt.Sprintf("%d rows, err %v, stats %+v", n, err, s.Stats())
	})
	if err := stop(); err != nil {
		t.Fatalf("sink stopped with %v; a broker restart must not stop it", err)
	}
	assertCommitted(t, brokers, "restart")
}
