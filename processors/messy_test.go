package processors

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/processors/score"
	"github.com/harnessflow/harnessflow/producers/gen"
	"github.com/harnessflow/harnessflow/schemas"
)

// The messy-campaign tests of issue 42, the processors' part: natural-key
// deduplication with one winner (the greatest (event_time ms, event_id)),
// derived figures that are a function of the events and not of their
// arrival order (late attempts and late cycles correct the round metrics
// under the same event id), late_beyond_window past the retention window,
// and an empty harness_version read alike by the validator and the scorer.
// Every expected figure is computed by hand from docs/metrics.md.

var messyT0 = time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)

// messy builds raw messages of one pairing key (project p, campaign k,
// benchmark swe, agent a, seed 1); each message's time is its event time.
type messy struct {
	t    testing.TB
	recs []rec
}

func (b *messy) env(id string, sec int) schemas.Envelope {
	return schemas.Envelope{EventID: id, EventTime: messyT0.Add(time.Duration(sec) * time.Second), Project: "p", Source: "t"}
}

func (b *messy) add(ev schemas.Event) {
	b.t.Helper()
	b.recs = append(b.recs, rec{schemas.TopicFor(ev.Type()), encodeMsg(b.t, ev, ev.Header().EventTime)})
}

func (b *messy) start(cell, route, evolver string, sec int) {
	b.add(&schemas.CellStarted{Envelope: b.env(cell+":start", sec), CampaignID: "k", CellID: cell, Benchmark: "swe",
		AgentModel: "a", EvolverModel: evolver, Seed: 1, Route: route, H0Version: "h0", BatchSize: 4, MaxAttempts: 1, TaskCount: 8})
}

func (b *messy) attempt(id, cell, task string, cycle int32, version string, score float64, sec int) *schemas.TaskAttempt {
	a := &schemas.TaskAttempt{Envelope: b.env(id, sec), CellID: cell, TaskID: task, StreamIdx: cycle*10 + int32(len(task)), Cycle: cycle, Attempt: 1,
		HarnessVersion: version, Status: schemas.StatusOK, Score: score, Success: score == 1, Final: true}
	b.add(a)
	return a
}

func (b *messy) finish(cell string, attempts int64, sec int) {
	b.add(&schemas.CellFinished{Envelope: b.env(cell+":finish", sec), CellID: cell, Status: schemas.CellCompleted, Attempts: attempts})
}

// baseline adds the key's baseline cell "b": cycle 1, t1 1, t2 0, t3 1, t4 0.
func (b *messy) baseline() {
	b.start("b", schemas.RouteBaseline, "", 0)
	for i, sc := range []float64{1, 0, 1, 0} {
		task := "t" + itoa(i+1)
		b.attempt("b:"+task, "b", task, 1, "h0", sc, 1+i)
	}
	b.finish("b", 4, 10)
}

// messyRun feeds recs through both stages (no finish hold) and returns the
// final derived events: per topic and event id, the last emitted (a
// correction replaces what it corrects, as in the ReplacingMergeTree).
func messyRun(t *testing.T, cfg Config, recs []rec) (rounds map[string]*schemas.RoundMetrics, samples map[string]*schemas.LabeledSample, dead []*schemas.Rejected, emitted int) {
	t.Helper()
	if cfg.FinishHold == 0 {
		cfg.FinishHold = -1
	}
	cfg.MinPairs = 2
	l := newLocal(t, cfg)
	var derived []kafka.Message
	now := time.Now()
	for _, r := range recs {
		l.feed(r.topic, r.msg, now, &derived)
	}
	l.end(now, &derived)
	// The wall clock passes every wait: what waited for nothing is
	// dead-lettered, with its reason.
	l.outA.reset()
	l.a.tick(&l.outA, now.Add(time.Hour))
	l.route(now, &derived)
	rounds, samples = map[string]*schemas.RoundMetrics{}, map[string]*schemas.LabeledSample{}
	for _, m := range derived {
		ev, err := schemas.Decode(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		switch e := ev.(type) {
		case *schemas.RoundMetrics:
			rounds[e.CellID+"/"+itoa(int(e.Cycle))] = e
			emitted++
		case *schemas.LabeledSample:
			samples[e.UpdateID] = e
			emitted++
		case *schemas.Rejected:
			dead = append(dead, e)
		}
	}
	return rounds, samples, dead, emitted
}

func wantRound(t *testing.T, rounds map[string]*schemas.RoundMetrics, key string, n int32, pass, mean float64, lift *float64) {
	t.Helper()
	r := rounds[key]
	if r == nil {
		t.Errorf("round %s: no round_metrics", key)
		return
	}
	if r.NTasks != n || r.PassRate != pass || r.MeanScore != mean {
		t.Errorf("round %s: n_tasks %d pass_rate %v mean_score %v, want %d %v %v", key, r.NTasks, r.PassRate, r.MeanScore, n, pass, mean)
	}
	switch {
	case lift == nil && r.LiftVsBaseline != nil:
		t.Errorf("round %s: lift %v, want null", key, *r.LiftVsBaseline)
	case lift != nil && (r.LiftVsBaseline == nil || *r.LiftVsBaseline != *lift):
		t.Errorf("round %s: lift %v, want %v", key, r.LiftVsBaseline, *lift)
	}
}

func noDeadLetters(t *testing.T, dead []*schemas.Rejected) {
	t.Helper()
	for _, r := range dead {
		t.Errorf("dead letter %s/%s: %s", r.Stage, r.ReasonCode, r.Message)
	}
}

func fp(x float64) *float64 { return &x }

// TestLateAttemptsAfterFinishCorrectRoundMetrics: two attempts of round 1
// arrive after the cell's cell_finished (within the retention window).
// Round 1 counts all four tasks (before: 2 of 4, silently): n_tasks 4;
// t1 ✓ t2 ✓ t3 ✗ t4 ✓ → pass_rate 75, mean_score 0.75; lifts against the
// baseline (1, 0, 1, 0): 0, +1, −1, +1 → 25 pp. The correction has the
// round's event id.
func TestLateAttemptsAfterFinishCorrectRoundMetrics(t *testing.T) {
	b := &messy{t: t}
	b.baseline()
	b.start("e", schemas.RouteInSitu, "opus", 20)
	b.attempt("e:t1", "e", "t1", 1, "h0", 1, 21)
	b.attempt("e:t2", "e", "t2", 1, "h0", 1, 22)
	b.finish("e", 2, 23)
	b.attempt("e:t3", "e", "t3", 1, "h0", 0, 30)
	b.attempt("e:t4", "e", "t4", 1, "h0", 1, 31)
	rounds, _, dead, emitted := messyRun(t, Config{}, b.recs)
	noDeadLetters(t, dead)
	wantRound(t, rounds, "e/1", 4, 75, 0.75, fp(25))
	if emitted < 3 { // b/1, e/1, and at least one correction of e/1
		t.Errorf("%d round metrics emitted, want the corrections of e/1 too", emitted)
	}
}

// TestCycleTwoRoundsLateCountsInRounds: a production cell's cycle 2 arrives
// after its cycles 3 and 4 (two rounds late: round 2 had closed). It is
// not dropped: four rounds, round 2 with u3 ✓ (1) and u4 ✗ (0): n_tasks 2,
// pass_rate 50, mean_score 0.5 (production: no lift).
func TestCycleTwoRoundsLateCountsInRounds(t *testing.T) {
	b := &messy{t: t}
	b.start("pr", schemas.RouteProduction, "opus", 0)
	b.attempt("pr:u1", "pr", "u1", 1, "h0", 1, 1)
	b.attempt("pr:u2", "pr", "u2", 1, "h0", 1, 2)
	b.attempt("pr:u5", "pr", "u5", 3, "h0", 0, 5)
	b.attempt("pr:u6", "pr", "u6", 3, "h0", 0, 6)
	b.attempt("pr:u7", "pr", "u7", 4, "h0", 1, 7)
	b.attempt("pr:u8", "pr", "u8", 4, "h0", 0, 8)
	b.attempt("pr:u3", "pr", "u3", 2, "h0", 1, 9)
	b.attempt("pr:u4", "pr", "u4", 2, "h0", 0, 10)
	b.finish("pr", 8, 11)
	rounds, _, dead, _ := messyRun(t, Config{}, b.recs)
	noDeadLetters(t, dead)
	wantRound(t, rounds, "pr/1", 2, 100, 1, nil)
	wantRound(t, rounds, "pr/2", 2, 50, 0.5, nil)
	wantRound(t, rounds, "pr/3", 2, 0, 0, nil)
	wantRound(t, rounds, "pr/4", 2, 50, 0.5, nil)
	if len(rounds) != 4 {
		t.Errorf("%d rounds, want 4", len(rounds))
	}
}

// TestResentAttemptWinnerIsLatest: t1's attempt 1 is sent failed, then
// re-sent, under a new event id and a later event time, passed. The winner
// is the pass whatever the arrival order: round 1 t1 ✓ t2 ✓ → pass_rate
// 100, mean 1; lifts (1−1, 1−0) → 50 pp.
func TestResentAttemptWinnerIsLatest(t *testing.T) {
	for _, passFirst := range []bool{false, true} {
		b := &messy{t: t}
		b.baseline()
		b.start("e", schemas.RouteInSitu, "opus", 20)
		fail := func() { b.attempt("e:t1:fail", "e", "t1", 1, "h0", 0, 21) }
		pass := func() { b.attempt("e:t1:pass", "e", "t1", 1, "h0", 1, 22) }
		if passFirst {
			pass()
			fail()
		} else {
			fail()
			pass()
		}
		b.attempt("e:t2", "e", "t2", 1, "h0", 1, 23)
		b.finish("e", 3, 24)
		rounds, _, dead, _ := messyRun(t, Config{}, b.recs)
		noDeadLetters(t, dead)
		t.Logf("pass first: %v", passFirst)
		wantRound(t, rounds, "e/1", 2, 100, 1, fp(50))
	}
}

// TestResentSkillEventsAndJudgmentsCountOnce: a judgment re-sent under a
// new event id counts once, and a load_skill event corrected by a later
// re-send (loaded, then not_found) counts as its winner. Round 1 of e:
// t1 and t2 offer skills; t1 loaded, t2's load's winner is not_found →
// skill_load_rate 1/2 = 0.5, loaded_pass_rate 100 (t1 passed);
// judgments t1 (0.9, 0.3) and t2 (0.5, 0.5), t1's re-sent →
// adherence_loaded (0.9 + 0.5)/2 = 0.7, adherence_final (0.3 + 0.5)/2 = 0.4.
func TestResentSkillEventsAndJudgmentsCountOnce(t *testing.T) {
	b := &messy{t: t}
	b.baseline()
	b.start("e", schemas.RouteInSitu, "opus", 20)
	a1 := b.attempt("e:t1", "e", "t1", 1, "h0", 1, 21)
	a2 := b.attempt("e:t2", "e", "t2", 1, "h0", 0, 22)
	_, _ = a1, a2
	// Offering skills is an attempt field: rebuild those two messages.
	b.recs = b.recs[:len(b.recs)-2]
	a1.SkillsAvailable, a2.SkillsAvailable = 1, 1
	b.add(a1)
	b.add(a2)
	skill := func(id, task, status string, sec int) {
		b.add(&schemas.SkillEvent{Envelope: b.env(id, sec), CellID: "e", TaskID: task, Attempt: 1, Turn: 1,
			Tool: schemas.ToolLoadSkill, SkillName: "s", Status: status})
	}
	judge := func(id, task string, loaded, final float64, sec int) {
		b.add(&schemas.AdherenceJudgment{Envelope: b.env(id, sec), CellID: "e", TaskID: task, Attempt: 1, SkillName: "s",
			JudgeModel: "j", Followed: 1, HarnessLoaded: fp(loaded), FinalValidation: fp(final)})
	}
	skill("e:s1", "t1", schemas.SkillLoaded, 23)
	skill("e:s2", "t2", schemas.SkillLoaded, 24)
	skill("e:s2:fix", "t2", schemas.SkillNotFound, 25) // same natural key, later: wins
	skill("e:s1:again", "t1", schemas.SkillLoaded, 23) // re-send, new id
	judge("e:j1", "t1", 0.9, 0.3, 26)
	judge("e:j2", "t2", 0.5, 0.5, 27)
	judge("e:j1:again", "t1", 0.9, 0.3, 26) // re-send, new id
	b.finish("e", 2, 30)
	rounds, _, dead, _ := messyRun(t, Config{}, b.recs)
	noDeadLetters(t, dead)
	r := rounds["e/1"]
	if r == nil {
		t.Fatal("no round 1")
	}
	check := func(name string, got *float64, want float64) {
		t.Helper()
		if got == nil || *got < want-1e-12 || *got > want+1e-12 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	check("skill_load_rate", r.SkillLoadRate, 0.5)
	check("loaded_pass_rate", r.LoadedPassRate, 100)
	check("adherence_loaded", r.AdherenceLoaded, 0.7)
	check("adherence_final", r.AdherenceFinal, 0.4)
}

// TestResentUpdateCountsOnce: an update re-sent under a new event id is one
// update (natural key: cell, update_id): no dead letter (before: the re-send
// was refused version_chain, a false reason), one sample.
func TestResentUpdateCountsOnce(t *testing.T) {
	b := &messy{t: t}
	b.baseline()
	b.start("e", schemas.RouteInSitu, "opus", 20)
	b.attempt("e:t1", "e", "t1", 1, "h0", 1, 21)
	b.attempt("e:t2", "e", "t2", 1, "h0", 0, 22)
	content := gen.SkillContent("s", "body")
	up := &schemas.HarnessUpdate{Envelope: b.env("e:u1", 23), CellID: "e", UpdateID: "u1", Cycle: 1, FromVersion: "h0", ToVersion: "h1",
		EvolverModel: "opus", Artifacts: []schemas.Artifact{{Kind: schemas.KindSkill, Name: "s", Op: schemas.OpAdd, Content: content, ContentSHA256: gen.SHA256(content)}},
		EvidenceTaskIDs: []string{"t2"}, Accepted: true}
	b.add(up)
	again := *up
	again.Envelope = b.env("e:u1:again", 24)
	b.add(&again)
	b.attempt("e:t3", "e", "t3", 2, "h1", 1, 25)
	b.attempt("e:t4", "e", "t4", 2, "h1", 1, 26)
	b.finish("e", 4, 30)
	_, samples, dead, emitted := messyRun(t, Config{}, b.recs)
	noDeadLetters(t, dead)
	if len(samples) != 1 || samples["u1"] == nil {
		t.Fatalf("samples %v, want one of u1", samples)
	}
	_ = emitted
}

// TestEmptyVersionInCellWithUnacceptedUpdate (issue 42 item 4): in a cell
// whose update u1 (h0 → h1) was not accepted, the attempts of cycle 2 carry
// an empty harness_version: they ran the cell's current version, h0, for
// the validator and the scorer alike. None is dead-lettered, and u1's
// sample has no task after it (h1 never ran): n_after 0, neutral.
func TestEmptyVersionInCellWithUnacceptedUpdate(t *testing.T) {
	b := &messy{t: t}
	b.baseline()
	b.start("e", schemas.RouteInSitu, "opus", 20)
	b.attempt("e:t1", "e", "t1", 1, "h0", 1, 21)
	b.attempt("e:t2", "e", "t2", 1, "h0", 0, 22)
	content := gen.SkillContent("s", "body")
	b.add(&schemas.HarnessUpdate{Envelope: b.env("e:u1", 23), CellID: "e", UpdateID: "u1", Cycle: 1, FromVersion: "h0", ToVersion: "h1",
		EvolverModel: "opus", Artifacts: []schemas.Artifact{{Kind: schemas.KindSkill, Name: "s", Op: schemas.OpAdd, Content: content, ContentSHA256: gen.SHA256(content)}},
		EvidenceTaskIDs: []string{"t2"}, Accepted: false})
	b.attempt("e:t3", "e", "t3", 2, "", 1, 24)
	b.attempt("e:t4", "e", "t4", 2, "", 1, 25)
	b.finish("e", 4, 30)
	rounds, samples, dead, _ := messyRun(t, Config{PendingTimeout: time.Minute}, b.recs)
	noDeadLetters(t, dead)
	// Round 2: t3 ✓ t4 ✓, lifts 1−1 and 1−0 → 50 pp.
	wantRound(t, rounds, "e/2", 2, 100, 1, fp(50))
	s := samples["u1"]
	if s == nil {
		t.Fatal("no sample of u1")
	}
	if s.NBefore != 2 || s.NAfter != 0 || s.Label != schemas.LabelNeutral {
		t.Errorf("u1 sample n %d/%d label %s (%s), want 2/0 neutral: no attempt ran the unaccepted h1", s.NBefore, s.NAfter, s.Label, s.Reason)
	}
}

// TestLateBeyondWindowIsDeadLettered: an attempt of a cell that finished
// longer ago than the retention window (--grace) is refused with
// limit/late_beyond_window at its raw coordinates, its payload the event
// (the views leave it out by its id); the round metrics stay as they were.
func TestLateBeyondWindowIsDeadLettered(t *testing.T) {
	b := &messy{t: t}
	b.start("pr", schemas.RouteProduction, "opus", 0)
	b.attempt("pr:u1", "pr", "u1", 1, "h0", 1, 1)
	b.finish("pr", 1, 2)
	// Another cell moves the log clock past the window (1 minute).
	b.start("other", schemas.RouteProduction, "sonnet", 600)
	late := b.attempt("pr:late", "pr", "u2", 1, "h0", 0, 601)
	rounds, _, dead, _ := messyRun(t, Config{Grace: time.Minute}, b.recs)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1: %+v", len(dead), dead)
	}
	r := dead[0]
	if r.Stage != schemas.StageLimit || r.ReasonCode != CodeLateBeyondWindow || r.SourceTopic != schemas.TopicAttempts ||
		r.Offset != 1 || r.Project != "p" || !strings.Contains(r.Message, `"pr:late"`) {
		t.Errorf("dead letter %s/%s %s@%d project %q: %s", r.Stage, r.ReasonCode, r.SourceTopic, r.Offset, r.Project, r.Message)
	}
	if ev, err := schemas.Decode(r.Payload); err != nil || ev.Header().EventID != late.EventID {
		t.Errorf("payload does not decode to the refused event: %v", err)
	}
	wantRound(t, rounds, "pr/1", 1, 100, 1, nil)
}

// TestLateEventsCorrectRoundMetricsThroughKafka runs messy cases through
// the embedded broker and the processor: round metrics read back from
// hf.round-metrics, the last record of each event id by offset (what the
// ReplacingMergeTree keeps, its version being the Kafka coordinates), are
// those of every event, whatever arrived late:
//
//   - cell e: t1 ✓ t2 ✓ before cell_finished, t3 ✗ t4 ✓ produced after the
//     processor had caught up with the finish: round 1 n_tasks 4, pass 75,
//     mean 0.75, lift (0 + 1 − 1 + 1)/4 → 25 pp (baseline 1, 0, 1, 0);
//   - cell f: t1 sent failed, then re-sent passed (later event time, new id),
//     t2 ✓: round 1 pass 100, mean 1, lift (0 + 1)/2 → 50 pp;
//   - production cell pr: cycle 2 arrives after cycles 3 and 4: four
//     rounds, round 2 u3 ✓ u4 ✗ → n 2, pass 50, mean 0.5.
func TestLateEventsCorrectRoundMetricsThroughKafka(t *testing.T) {
	addr := startBroker(t)
	b := &messy{t: t}
	b.baseline()
	b.start("e", schemas.RouteInSitu, "opus", 20)
	b.attempt("e:t1", "e", "t1", 1, "h0", 1, 21)
	b.attempt("e:t2", "e", "t2", 1, "h0", 1, 22)
	b.finish("e", 2, 23)
	b.start("f", schemas.RouteInSitu, "sonnet", 30)
	b.attempt("f:t1:fail", "f", "t1", 1, "h0", 0, 31)
	b.attempt("f:t1:pass", "f", "t1", 1, "h0", 1, 32)
	b.attempt("f:t2", "f", "t2", 1, "h0", 1, 33)
	b.finish("f", 3, 34)
	b.start("pr", schemas.RouteProduction, "opus", 40)
	for i, c := range []struct {
		task  string
		cycle int32
		score float64
	}{{"u1", 1, 1}, {"u2", 1, 1}, {"u5", 3, 0}, {"u6", 3, 0}, {"u7", 4, 1}, {"u8", 4, 0}, {"u3", 2, 1}, {"u4", 2, 0}} {
		b.attempt("pr:"+c.task, "pr", c.task, c.cycle, "h0", c.score, 41+i)
	}
	b.finish("pr", 8, 50)
	toMsgs := func(recs []rec) map[string][]kafka.Message {
		m := map[string][]kafka.Message{}
		for _, r := range recs {
			m[r.topic] = append(m[r.topic], r.msg)
		}
		return m
	}
	produce(t, addr, toMsgs(b.recs))
	cfg := testConfig(addr, "messy")
	cfg.Grace = time.Hour
	_, errc := startProc(t, cfg)
	waitCaughtUp(t, addr, "messy", 60*time.Second, errc)
	// The finish of e was admitted and its round 1 emitted; now its last
	// two attempts arrive.
	b.recs = nil
	b.attempt("e:t3", "e", "t3", 1, "h0", 0, 60)
	b.attempt("e:t4", "e", "t4", 1, "h0", 1, 61)
	produce(t, addr, toMsgs(b.recs))
	waitCaughtUp(t, addr, "messy", 60*time.Second, errc)

	rounds := map[string]*schemas.RoundMetrics{}
	copies := map[string]int{}
	for _, m := range readTopic(t, addr, schemas.TopicRoundMetrics) { // in offset order per partition
		ev, err := schemas.Decode(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		r := ev.(*schemas.RoundMetrics)
		k := r.CellID + "/" + itoa(int(r.Cycle))
		if prev := rounds[k]; prev != nil && prev.EventID != r.EventID {
			t.Errorf("round %s has two event ids: %s and %s", k, prev.EventID, r.EventID)
		}
		rounds[k] = r
		copies[k]++
	}
	for _, r := range deadLetters(t, readTopic(t, addr, schemas.TopicDLQ)) {
		t.Errorf("dead letter %s/%s: %s", r.Stage, r.ReasonCode, r.Message)
	}
	wantRound(t, rounds, "e/1", 4, 75, 0.75, fp(25))
	if copies["e/1"] < 2 {
		t.Errorf("round e/1 written %d times, want the first emission and its correction", copies["e/1"])
	}
	wantRound(t, rounds, "f/1", 2, 100, 1, fp(50))
	wantRound(t, rounds, "pr/1", 2, 100, 1, nil)
	wantRound(t, rounds, "pr/2", 2, 50, 0.5, nil)
	wantRound(t, rounds, "pr/3", 2, 0, 0, nil)
	wantRound(t, rounds, "pr/4", 2, 50, 0.5, nil)
}

// TestStageBLateBeyondWindowIsDeadLettered: stage B forgets a finished
// cell 2 × --grace after it finished (here on the wall clock); an event of
// it that reaches stage B afterwards (its clocks ran ahead of stage A's)
// is dead-lettered limit/late_beyond_window, not dropped: at once while
// the pairer is held (another cell of the key runs), and when swept once
// the pairer itself was evicted.
func TestStageBLateBeyondWindowIsDeadLettered(t *testing.T) {
	key := []byte(score.PairingKey("p", &schemas.CellStarted{CampaignID: "k", Benchmark: "swe", AgentModel: "a", Seed: 1}))
	for _, held := range []bool{true, false} {
		b := &messy{t: t}
		b.start("pr", schemas.RouteProduction, "opus", 0)
		b.attempt("pr:u1", "pr", "u1", 1, "h0", 1, 1)
		b.finish("pr", 1, 2)
		if held {
			b.start("pr2", schemas.RouteProduction, "sonnet", 3) // never finishes
		}
		l := newLocal(t, Config{Grace: time.Minute, FinishHold: -1})
		var derived []kafka.Message
		now := time.Now()
		for _, r := range b.recs {
			l.feed(r.topic, r.msg, now, &derived)
		}
		later := now.Add(3 * time.Minute)
		l.b.evict(later)
		if (l.b.byKey[string(key)] != nil) != held {
			t.Fatalf("held %v: pairer held %v", held, l.b.byKey[string(key)] != nil)
		}
		late := b.attempt("pr:late", "pr", "u2", 1, "h0", 0, 4)
		msg := b.recs[len(b.recs)-1].msg
		om := &inMsg{topic: schemas.TopicOutcomes, key: key, ts: msg.Time, value: msg.Value, offset: 7}
		decodeAll(context.Background(), []*inMsg{om}, l.cfg.Limits, l.cache, nil)
		var out sink
		l.b.process(om, true, &out, later)
		if !held {
			l.b.sweep(&out, later.Add(3*time.Minute))
		}
		dead := deadLetters(t, out.msgs)
		if len(dead) != 1 || dead[0].Stage != schemas.StageLimit || dead[0].ReasonCode != CodeLateBeyondWindow ||
			dead[0].SourceTopic != schemas.TopicOutcomes || !strings.Contains(dead[0].Message, late.EventID) {
			for _, r := range dead {
				t.Logf("%s/%s: %s", r.Stage, r.ReasonCode, r.Message)
			}
			t.Errorf("held %v: %d dead letters, want one limit/late_beyond_window of %s", held, len(dead), late.EventID)
		}
	}
}
