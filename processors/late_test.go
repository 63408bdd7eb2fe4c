package processors

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/processors/score"
	"github.com/harnessflow/harnessflow/schemas"
)

// Bounds and dead letters of the state kept for late events (issue 42):
// what stage B cannot hold is refused with a reason, never dropped
// silently, and a project's late events and finished cells cannot grow
// either stage's memory past Config.MaxStateBytes.

// outcomeMsg is ev as stage B reads it from hf.outcomes under key.
func outcomeMsg(t *testing.T, l *local, key []byte, ev schemas.Event, off int64) *inMsg {
	t.Helper()
	msg := encodeMsg(t, ev, ev.Header().EventTime)
	om := &inMsg{topic: schemas.TopicOutcomes, key: key, ts: msg.Time, value: msg.Value, offset: off}
	decodeAll(context.Background(), []*inMsg{om}, l.cfg.Limits, l.cache, nil)
	return om
}

func wantLateBeyondWindow(t *testing.T, dead []*schemas.Rejected, n int, mention string) {
	t.Helper()
	if len(dead) != n {
		t.Errorf("%d dead letters, want %d", len(dead), n)
	}
	for _, r := range dead {
		if r.Stage != schemas.StageLimit || r.ReasonCode != CodeLateBeyondWindow || r.SourceTopic != schemas.TopicOutcomes || !strings.Contains(r.Message, mention) {
			t.Errorf("dead letter %s/%s at %s: %s; want limit/late_beyond_window at hf.outcomes naming %q", r.Stage, r.ReasonCode, r.SourceTopic, r.Message, mention)
		}
	}
}

// TestStageBFullOrphanBufferDeadLetters: an event of a cell stage B does
// not hold, arriving while its buffer of such events is full, is refused
// late_beyond_window naming --pending-max (it was dropped, counted only in
// a metric).
func TestStageBFullOrphanBufferDeadLetters(t *testing.T) {
	l := newLocal(t, Config{PendingMax: 1})
	key := []byte(score.PairingKey("p", &schemas.CellStarted{CampaignID: "k", Benchmark: "swe", AgentModel: "a", Seed: 1}))
	var out sink
	now := time.Now()
	for i := 0; i < 3; i++ {
		ev := attemptOf("p", "gone", "t"+itoa(i), messyT0)
		l.b.process(outcomeMsg(t, l, key, ev, int64(i)), true, &out, now)
	}
	wantLateBeyondWindow(t, deadLetters(t, out.msgs), 2, "--pending-max 1")
	if l.b.buffered != 1 {
		t.Errorf("%d events buffered, want 1", l.b.buffered)
	}
}

// TestStageBAgedOutKeyDeadLettersItsBuffer: the events waiting in a
// pairing key that ages out are refused, not dropped.
func TestStageBAgedOutKeyDeadLettersItsBuffer(t *testing.T) {
	l := newLocal(t, Config{CellIdle: time.Hour})
	st := cellStarted("p", "open", 0, 10, messyT0)
	key := []byte(score.PairingKey("p", st))
	var out sink
	now := time.Now()
	l.b.process(outcomeMsg(t, l, key, st, 0), true, &out, now)
	other := attemptOf("p", "gone", "t1", messyT0)
	other.Envelope.EventID = "gone-t1"
	l.b.process(outcomeMsg(t, l, key, other, 1), true, &out, now)
	if l.b.buffered != 1 {
		t.Fatalf("%d events buffered, want 1", l.b.buffered)
	}
	l.b.sweep(&out, now.Add(2*time.Hour))
	if l.b.byKey[string(key)] != nil {
		t.Fatal("the idle key was not aged out")
	}
	wantLateBeyondWindow(t, deadLetters(t, out.msgs), 1, "gone-t1")
	if l.b.buffered != 0 {
		t.Errorf("%d events still counted as buffered", l.b.buffered)
	}
}

// TestLateEventsOfFinishedCellMeetTheStateCap: late events of a finished
// cell are charged to its project until the cell is evicted, and refused
// state_bytes_cap past Config.MaxStateBytes (they were admitted uncharged:
// an endless stream of them grew stage B's state without bound).
func TestLateEventsOfFinishedCellMeetTheStateCap(t *testing.T) {
	l := newLocal(t, Config{MaxStateBytes: cellCharge + 4096, FinishHold: -1})
	var derived []kafka.Message
	now := time.Now()
	l.feed(schemas.TopicCells, encodeMsg(t, cellStarted("proj-a", "c", 0, 10, boundsT0), boundsT0), now, &derived)
	l.feed(schemas.TopicAttempts, encodeMsg(t, attemptOf("proj-a", "c", "t0", boundsT0), boundsT0), now, &derived)
	l.feed(schemas.TopicCells, encodeMsg(t, finishedOf("proj-a", "c", 1, boundsT0), boundsT0), now, &derived)
	if d := deadLetters(t, derived); len(d) != 0 {
		t.Fatalf("dead letters before the late events: %+v", d[0])
	}
	const late = 100
	for i := 1; i <= late; i++ {
		l.feed(schemas.TopicAttempts, encodeMsg(t, attemptOf("proj-a", "c", "t"+itoa(i), boundsT0), boundsT0), now, &derived)
	}
	// Stage A refuses those past its cap (at their raw coordinates);
	// stage B may forget the cell before (its own cap on finished cells,
	// TestStageBCapsFinishedCells) and refuse the rest late_beyond_window.
	capped := 0
	for _, r := range deadLetters(t, derived) {
		switch {
		case r.ReasonCode == CodeStateBytesCap && r.SourceTopic == schemas.TopicAttempts:
			capped++
		case r.ReasonCode == CodeLateBeyondWindow && r.SourceTopic == schemas.TopicOutcomes:
		default:
			t.Errorf("dead letter %s/%s at %s: %s", r.Stage, r.ReasonCode, r.SourceTopic, r.Message)
		}
	}
	if capped == 0 || capped == late {
		t.Fatalf("stage A refused %d of %d late attempts state_bytes_cap, want those past the cap", capped, late)
	}
	if pu := l.a.projects["proj-a"]; pu.bytes > l.cfg.MaxStateBytes {
		t.Errorf("proj-a is charged %d bytes, over the cap %d", pu.bytes, l.cfg.MaxStateBytes)
	}
}

// TestStageBCapsFinishedCells: stage B keeps a finished cell's inputs for
// late events, charged to its project; past Config.MaxStateBytes the
// project's oldest finished cell is forgotten early, and its later event
// is refused late_beyond_window.
func TestStageBCapsFinishedCells(t *testing.T) {
	// Each cell: cell_started and 8 attempts of a 1000-byte task input.
	// Stage B charges a finished cell about 17.1 KB (cellCharge and
	// keptCharge: about 1.1 KB an attempt); stage A an open one about 17.9
	// KB (stateCharge), a finished one cellCharge. The cap holds one
	// finished cell and an open one in stage A, not two finished cells in
	// stage B.
	const cap = 2*cellCharge + 12000
	l := newLocal(t, Config{MaxStateBytes: cap, FinishHold: -1})
	var derived []kafka.Message
	now := time.Now()
	cell := func(name string, seed int) {
		st := cellStarted("p", name, seed, 10, boundsT0)
		st.Route = schemas.RouteProduction // its outputs wait for no baseline
		l.feed(schemas.TopicCells, encodeMsg(t, st, boundsT0), now, &derived)
		for i := 0; i < 8; i++ {
			a := attemptOf("p", name, "t"+itoa(i), boundsT0)
			a.TaskInput = strings.Repeat("x", 1000)
			l.feed(schemas.TopicAttempts, encodeMsg(t, a, boundsT0), now, &derived)
		}
		l.feed(schemas.TopicCells, encodeMsg(t, finishedOf("p", name, 8, boundsT0), boundsT0), now, &derived)
	}
	cell("c1", 0)
	cell("c2", 1)
	if d := deadLetters(t, derived); len(d) != 0 {
		t.Fatalf("dead letters before the late event: %s/%s: %s", d[0].Stage, d[0].ReasonCode, d[0].Message)
	}
	if u := l.b.fin["p"]; u == nil || u.bytes > cap || len(u.q) != 1 || u.q[0].cell != "c2" {
		t.Fatalf("stage B's finished state of p: %+v, want c2 alone, at most %d bytes", u, cap)
	}
	k1 := score.PairingKey("p", cellStarted("p", "c1", 0, 10, boundsT0))
	if ps := l.b.byKey[k1]; ps != nil && ps.p.Holds("c1") {
		t.Fatal("stage B still holds c1")
	}
	derived = derived[:0]
	late := attemptOf("p", "c1", "late", boundsT0)
	l.feed(schemas.TopicAttempts, encodeMsg(t, late, boundsT0), now, &derived)
	wantLateBeyondWindow(t, deadLetters(t, derived), 1, late.EventID)
}

// TestStageBKeepsCellWaitingForBaseline: an in-situ cell that finished
// long before its baseline is not forgotten when its late window passes
// (its round metrics would be lost): they come when the baseline finishes.
func TestStageBKeepsCellWaitingForBaseline(t *testing.T) {
	b := &messy{t: t}
	b.start("b", schemas.RouteBaseline, "", 0)
	b.attempt("b:t1", "b", "t1", 1, "h0", 1, 1)
	b.start("e", schemas.RouteInSitu, "opus", 2)
	b.attempt("e:t1", "e", "t1", 1, "h0", 0, 3)
	b.finish("e", 1, 4)
	// The baseline finishes long after e's window (2 × 1 minute).
	b.attempt("b:t2", "b", "t2", 1, "h0", 1, 600)
	b.finish("b", 2, 601)
	rounds, _, dead, _ := messyRun(t, Config{Grace: time.Minute}, b.recs)
	noDeadLetters(t, dead)
	wantRound(t, rounds, "e/1", 1, 0, 0, fp(-100))
}

// TestTombstonesExpire: stage A remembers a forgotten cell's id (its later
// events are late_beyond_window) for Config.CellIdle, not forever: a
// project that stopped sending leaves nothing behind.
func TestTombstonesExpire(t *testing.T) {
	l := newLocal(t, Config{Grace: time.Minute, CellIdle: time.Hour, FinishHold: -1})
	var derived []kafka.Message
	now := time.Now()
	feed := func(ev schemas.Event, at time.Time) {
		l.feed(schemas.TopicFor(ev.Type()), encodeMsg(t, ev, at), now, &derived)
	}
	feed(cellStarted("gone", "c", 0, 10, boundsT0), boundsT0)
	feed(finishedOf("gone", "c", 0, boundsT0), boundsT0)
	// Another project's traffic moves the log clock.
	feed(cellStarted("busy", "c1", 1, 10, boundsT0.Add(5*time.Minute)), boundsT0.Add(5*time.Minute))
	if !l.a.wasForgotten(cellKey{"gone", "c"}) {
		t.Fatal("the evicted cell is not remembered")
	}
	feed(cellStarted("busy", "c2", 2, 10, boundsT0.Add(2*time.Hour)), boundsT0.Add(2*time.Hour))
	if l.a.forgotten["gone"] != nil || len(l.a.tombQ) != 0 {
		t.Errorf("project gone still leaves %+v (%d tombstones) after --cell-idle", l.a.forgotten["gone"], len(l.a.tombQ))
	}
}
