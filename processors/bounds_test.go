package processors

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/processors/score"
	"github.com/harnessflow/harnessflow/schemas"
)

// The tests of the per-project state bounds (issue 35 items 2–4, the
// processors' part): nothing a client sends sizes an allocation, open cells
// and state bytes are capped per project, unfinished cells age out, the
// pending buffer is shared fairly by project, and dead-letter ids hold the
// project.

var boundsT0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func encodeMsg(t testing.TB, ev schemas.Event, at time.Time) kafka.Message {
	t.Helper()
	b, err := schemas.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	return kafka.Message{Key: []byte(ev.PartitionKey()), Value: b, Time: at}
}

// cellStarted is an in-situ cell_started of project with the declared
// task_count (seed i: each cell its own pairing key, as an attacker would).
func cellStarted(project, cell string, i int, taskCount int32, at time.Time) *schemas.CellStarted {
	return &schemas.CellStarted{
		Envelope:   schemas.Envelope{EventID: project + "/" + cell + ":started", EventTime: at, Project: project, Source: "t"},
		CampaignID: "camp", CellID: cell, Benchmark: "swe", AgentModel: "agent", EvolverModel: "evolver",
		Seed: int32(i), Route: schemas.RouteInSitu, H0Version: "h0", BatchSize: taskCount, MaxAttempts: 2, TaskCount: taskCount,
	}
}

func attemptOf(project, cell, task string, at time.Time) *schemas.TaskAttempt {
	return &schemas.TaskAttempt{
		Envelope: schemas.Envelope{EventID: project + "/" + cell + "/" + task, EventTime: at, Project: project, Source: "t"},
		CellID:   cell, TaskID: task, Cycle: 1, Attempt: 1, HarnessVersion: "h0", Status: schemas.StatusOK, Score: 1, Success: true,
	}
}

func finishedOf(project, cell string, attempts int64, at time.Time) *schemas.CellFinished {
	return &schemas.CellFinished{
		Envelope: schemas.Envelope{EventID: project + "/" + cell + ":finished", EventTime: at, Project: project, Source: "t"},
		CellID:   cell, Status: schemas.CellCompleted, Attempts: attempts,
	}
}

// deadLetters decodes the dead letters among msgs.
func deadLetters(t testing.TB, msgs []kafka.Message) []*schemas.Rejected {
	t.Helper()
	var out []*schemas.Rejected
	for _, m := range msgs {
		if m.Topic != schemas.TopicDLQ {
			continue
		}
		ev, err := schemas.Decode(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev.(*schemas.Rejected))
	}
	return out
}

// TestNoAllocationSizedFromTaskCount replays the attack of issue 35: cells
// that declare task_count 2^31-1 and never finish. Both stages must
// allocate per such cell_started what they do for an honest one, not
// hundreds of KiB from the declared count (before the fix: ~700 KiB each).
func TestNoAllocationSizedFromTaskCount(t *testing.T) {
	perEvent := func(taskCount int32) float64 {
		l := newLocal(t, Config{})
		const n = 200
		msgs := make([]kafka.Message, n)
		for i := range msgs {
			msgs[i] = encodeMsg(t, cellStarted("proj-a", "c"+itoa(i), i, taskCount, boundsT0), boundsT0)
		}
		var derived []kafka.Message
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for _, m := range msgs {
			l.feed(schemas.TopicCells, m, boundsT0, &derived)
		}
		runtime.ReadMemStats(&after)
		if len(deadLetters(t, derived)) != 0 || len(l.a.byID) != n {
			t.Fatalf("task_count %d: %d cells held, %d dead letters", taskCount, len(l.a.byID), len(deadLetters(t, derived)))
		}
		return float64(after.TotalAlloc-before.TotalAlloc) / n
	}
	honest := perEvent(50)
	attack := perEvent(2147483647)
	t.Logf("bytes allocated per cell_started: task_count 50: %.0f; task_count 2^31-1: %.0f", honest, attack)
	if attack > 2*honest+4096 {
		t.Errorf("a cell_started declaring task_count 2^31-1 allocates %.0f bytes, an honest one %.0f: an allocation is sized from the event", attack, honest)
	}
}

// TestOpenCellsCapPerProject: past Config.MaxOpenCells unfinished cells of
// one project on a partition, its cell_started (and what waited for it) is
// a limit/open_cells_cap dead letter naming the cap; another project is
// not affected, and a finished cell frees its place.
func TestOpenCellsCapPerProject(t *testing.T) {
	l := newLocal(t, Config{MaxOpenCells: 5, FinishHold: -1})
	var derived []kafka.Message
	now := time.Now()
	// An attempt of cell c6 waits for its cell_started, which will be refused.
	l.feed(schemas.TopicAttempts, encodeMsg(t, attemptOf("proj-a", "c6", "t1", boundsT0), boundsT0), now, &derived)
	for i := 0; i < 8; i++ {
		l.feed(schemas.TopicCells, encodeMsg(t, cellStarted("proj-a", "c"+itoa(i), i, 2147483647, boundsT0), boundsT0), now, &derived)
	}
	l.feed(schemas.TopicCells, encodeMsg(t, cellStarted("proj-b", "c0", 0, 10, boundsT0), boundsT0), now, &derived)
	dead := deadLetters(t, derived)
	if len(dead) != 4 {
		t.Fatalf("%d dead letters, want 4 (3 cell_started past the cap, 1 attempt that waited): %+v", len(dead), dead)
	}
	for _, r := range dead {
		if r.Stage != schemas.StageLimit || r.ReasonCode != CodeOpenCellsCap || r.Project != "proj-a" ||
			!strings.Contains(r.Message, "--max-open-cells 5") {
			t.Errorf("dead letter %s/%s project %q: %s; want limit/open_cells_cap of proj-a naming the cap", r.Stage, r.ReasonCode, r.Project, r.Message)
		}
	}
	if got := l.a.projects["proj-a"].open; got != 5 {
		t.Errorf("proj-a holds %d open cells, want 5", got)
	}
	if l.a.byID[cellKey{"proj-b", "c0"}] == nil {
		t.Error("proj-b's cell was refused for proj-a's cells")
	}
	// A finished cell frees a place.
	derived = derived[:0]
	l.feed(schemas.TopicCells, encodeMsg(t, finishedOf("proj-a", "c0", 0, boundsT0), boundsT0), now, &derived)
	l.feed(schemas.TopicCells, encodeMsg(t, cellStarted("proj-a", "c9", 9, 10, boundsT0), boundsT0), now, &derived)
	if dead := deadLetters(t, derived); len(dead) != 0 {
		t.Errorf("after a cell finished, a new cell_started is refused: %+v", dead[0])
	}
}

// TestStateBytesCapPerProject: an event that would take its project's
// state past Config.MaxStateBytes is a limit/state_bytes_cap dead letter
// naming the cap; its cell_finished is still admitted and frees the state.
func TestStateBytesCapPerProject(t *testing.T) {
	l := newLocal(t, Config{MaxStateBytes: cellCharge + 4096, FinishHold: -1})
	var derived []kafka.Message
	now := time.Now()
	l.feed(schemas.TopicCells, encodeMsg(t, cellStarted("proj-a", "c", 0, 10, boundsT0), boundsT0), now, &derived)
	for i := 0; i < 40; i++ {
		l.feed(schemas.TopicAttempts, encodeMsg(t, attemptOf("proj-a", "c", "t"+itoa(i), boundsT0), boundsT0), now, &derived)
	}
	dead := deadLetters(t, derived)
	if len(dead) == 0 || len(dead) == 40 {
		t.Fatalf("%d of 40 attempts dead-lettered, want those past the cap", len(dead))
	}
	for _, r := range dead {
		if r.Stage != schemas.StageLimit || r.ReasonCode != CodeStateBytesCap || !strings.Contains(r.Message, "--max-state-bytes "+itoa(cellCharge+4096)) {
			t.Errorf("dead letter %s/%s: %s; want limit/state_bytes_cap naming the cap", r.Stage, r.ReasonCode, r.Message)
		}
	}
	pu := l.a.projects["proj-a"]
	if pu.bytes > l.cfg.MaxStateBytes {
		t.Errorf("proj-a is charged %d bytes, over the cap %d", pu.bytes, l.cfg.MaxStateBytes)
	}
	// Another project still gets its cell in.
	derived = derived[:0]
	l.feed(schemas.TopicCells, encodeMsg(t, cellStarted("proj-b", "c", 0, 10, boundsT0), boundsT0), now, &derived)
	admitted := 40 - len(dead)
	l.feed(schemas.TopicCells, encodeMsg(t, finishedOf("proj-a", "c", int64(admitted), boundsT0), boundsT0), now, &derived)
	if dead := deadLetters(t, derived); len(dead) != 0 {
		t.Fatalf("dead letters after the cap: %+v", dead[0])
	}
	if !l.a.byID[cellKey{"proj-a", "c"}].finished {
		t.Fatal("the cell_finished of a project at its cap was not admitted")
	}
	if pu.bytes != cellCharge {
		t.Errorf("a finished cell without updates keeps %d bytes charged, want %d", pu.bytes, cellCharge)
	}
}

// TestUnfinishedCellsAgeOut: a cell with no event for Config.CellIdle (log
// clock) is dropped by stage A with a limit/cell_idle dead letter at its
// cell_started's coordinates, counted; stage B drops its pairer; the
// attempt that waited for a version is unknown_version; a later event is
// unknown_cell.
func TestUnfinishedCellsAgeOut(t *testing.T) {
	l := newLocal(t, Config{CellIdle: time.Hour, PendingTimeout: 10 * time.Minute})
	var derived []kafka.Message
	now := time.Now()
	l.feed(schemas.TopicCells, encodeMsg(t, cellStarted("proj-a", "idle", 0, 10, boundsT0), boundsT0), now, &derived)
	l.feed(schemas.TopicAttempts, encodeMsg(t, attemptOf("proj-a", "idle", "t1", boundsT0.Add(time.Minute)), boundsT0.Add(time.Minute)), now, &derived)
	if l.b.size() != 1 {
		t.Fatalf("stage B holds %d pairers, want 1", l.b.size())
	}
	// Another project's traffic moves the log clock past the idle time.
	late := boundsT0.Add(2 * time.Hour)
	l.feed(schemas.TopicCells, encodeMsg(t, cellStarted("proj-b", "busy", 1, 10, late), late), now, &derived)
	dead := deadLetters(t, derived)
	if len(dead) != 1 || dead[0].Stage != schemas.StageLimit || dead[0].ReasonCode != CodeCellIdle ||
		dead[0].Project != "proj-a" || dead[0].SourceTopic != schemas.TopicCells || dead[0].Offset != 0 ||
		!strings.Contains(dead[0].Message, "idle") {
		t.Fatalf("dead letters %+v, want one limit/cell_idle of proj-a's cell at its cell_started (hf.cells offset 0)", dead)
	}
	if l.a.byID[cellKey{"proj-a", "idle"}] != nil || l.a.projects["proj-a"] != nil {
		t.Error("the aged-out cell is still held")
	}
	if got := counterValue(t, l.a.m.agedOutCells); got != 1 {
		t.Errorf("hf_process_aged_out_cells_total = %v, want 1", got)
	}
	if l.b.byKey[score.PairingKey("proj-a", cellStarted("proj-a", "idle", 0, 10, boundsT0))] != nil {
		t.Error("stage B still holds the aged-out cell's pairer")
	}
	if got := counterValue(t, l.a.m.agedOutPairs); got != 1 {
		t.Errorf("hf_process_aged_out_pairers_total = %v, want 1", got)
	}
}

// TestRestartRebuildsBoundedState: a rebuild from the log (emit false, as
// after a restart) applies the same caps: the attack's cells beyond
// Config.MaxOpenCells are not held again.
func TestRestartRebuildsBoundedState(t *testing.T) {
	cfg := Config{Brokers: []string{"unused:9092"}, MaxOpenCells: 50}
	cfg.setDefaults()
	c := newCells(&cfg, newMetrics())
	var out sink
	now := time.Now()
	for i := 0; i < 3000; i++ {
		m := &inMsg{topic: schemas.TopicCells, offset: int64(i), ts: boundsT0}
		msg := encodeMsg(t, cellStarted("proj-a", "c"+itoa(i), i, 2147483647, boundsT0), boundsT0)
		m.key, m.value = msg.Key, msg.Value
		decodeMsg(context.Background(), m, cfg.Limits, nil)
		c.process(m, false, &out, now)
	}
	if len(c.byID) != 50 || len(out.msgs) != 0 {
		t.Fatalf("rebuilt %d cells (want the cap, 50), emitted %d messages (want none)", len(c.byID), len(out.msgs))
	}
}

// TestPendingFairByProject: one project's flood of attempts for cells that
// never start fills the pending buffer; another project's early attempt,
// which waits for its cell_started, is not evicted by it and is admitted
// when its cell_started arrives.
func TestPendingFairByProject(t *testing.T) {
	l := newLocal(t, Config{PendingMax: 10})
	var derived []kafka.Message
	now := time.Now()
	l.feed(schemas.TopicAttempts, encodeMsg(t, attemptOf("proj-b", "early", "t1", boundsT0), boundsT0), now, &derived)
	for i := 0; i < 100; i++ {
		at := boundsT0.Add(time.Duration(i) * time.Millisecond)
		l.feed(schemas.TopicAttempts, encodeMsg(t, attemptOf("proj-a", "ghost-"+itoa(i), "t", at), at), now, &derived)
	}
	at := boundsT0.Add(time.Second)
	l.feed(schemas.TopicCells, encodeMsg(t, cellStarted("proj-b", "early", 0, 10, at), at), now, &derived)
	for _, r := range deadLetters(t, derived) {
		if r.Project != "proj-a" {
			t.Errorf("proj-a's flood evicted another project's event: %s/%s %s", r.Stage, r.ReasonCode, r.Message)
		}
	}
	if n := len(deadLetters(t, derived)); n != 91 {
		t.Errorf("%d dead letters, want 91 (proj-a's 100 attempts less the 9 places left to it)", n)
	}
	if l.a.pending.live != 9 || len(l.a.byID[cellKey{"proj-b", "early"}].attempts) != 1 {
		t.Errorf("%d pending (want proj-a's 9), proj-b's early attempt admitted: %v", l.a.pending.live, len(l.a.byID[cellKey{"proj-b", "early"}].attempts) == 1)
	}
}

// TestDeadLetterIDIncludesProject: the dead letters of two projects' events
// with the same event id at the same coordinates (a forged or colliding id)
// get different ids, each deterministic; a message that did not decode
// keeps, in the default project, the coordinates-only id of earlier
// versions.
func TestDeadLetterIDIncludesProject(t *testing.T) {
	id := func(project string) string {
		t.Helper()
		var ev schemas.Event
		if project != "" {
			ev = attemptOf(project, "c", "t", boundsT0)
		}
		m := &inMsg{topic: schemas.TopicAttempts, partition: 3, offset: 42, ts: boundsT0, ev: ev, value: []byte("x")}
		msg, err := deadLetter(m, reject(schemas.StageSemantic, CodeUnknownCell, "test"), 0)
		if err != nil {
			t.Fatal(err)
		}
		r := deadLetters(t, []kafka.Message{msg})[0]
		return r.EventID
	}
	a, b := id("proj-a"), id("proj-b")
	if a == b {
		t.Errorf("projects proj-a and proj-b get the same dead-letter id %s at the same coordinates", a)
	}
	if a != id("proj-a") {
		t.Error("the dead-letter id is not deterministic")
	}
	if def := id(schemas.DefaultProject); def == a || def == b {
		t.Errorf("the default project's dead-letter id %s is another project's", def)
	}
	undecoded := id("")
	legacy := schemas.DeriveEventID(&schemas.Rejected{SourceTopic: schemas.TopicAttempts, Partition: 3, Offset: 42})
	if undecoded != legacy || undecoded == a {
		t.Errorf("an undecoded message's dead-letter id %s, want the coordinates-only id %s (and apart from proj-a's %s)", undecoded, legacy, a)
	}
}

// counterValue reads a counter through a registry of its own.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 {
		t.Fatalf("gather: %v (%d families)", err, len(mfs))
	}
	return mfs[0].GetMetric()[0].GetCounter().GetValue()
}

// BenchmarkCellAttack replays issue 35's attack on the processors: 3000
// cell_started of one project declaring task_count 2^31-1, never finished,
// through both stages with the default Config, next to the same cells with
// an honest task_count and to clean traffic (BenchmarkHotPath's campaign,
// whose cells finish). It reports the heap the processors' state holds
// afterwards per input event (heap-B/event: live heap after a GC, less the
// heap before), stage A's state estimate per event (state-B/event, what
// Config.MaxStateBytes counts), the cells held and the dead letters.
func BenchmarkCellAttack(b *testing.B) {
	cells := func(taskCount int32) []hotPathMsg {
		msgs := make([]hotPathMsg, 3000)
		for i := range msgs {
			msgs[i] = hotPathMsg{schemas.TopicCells, encodeMsg(b, cellStarted("proj-a", "c"+itoa(i), i, taskCount, boundsT0), boundsT0)}
		}
		return msgs
	}
	clean, _, _ := hotPathInput(b)
	for _, bc := range []struct {
		name string
		msgs []hotPathMsg
	}{
		{"attack_task_count_2^31-1", cells(2147483647)},
		{"honest_task_count_50", cells(50)},
		{"clean_campaign", clean},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			now := time.Now()
			var heap, state, held, dlq float64
			var derived []kafka.Message
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				b.StartTimer()
				l := newLocal(b, Config{MinPairs: 2})
				derived = derived[:0]
				for _, m := range bc.msgs {
					l.feed(m.topic, m.msg, now, &derived)
				}
				b.StopTimer()
				dlq += float64(countByTopic(derived)[schemas.TopicDLQ])
				derived = derived[:0:0]
				runtime.GC()
				runtime.ReadMemStats(&after)
				heap += float64(int64(after.HeapAlloc) - int64(before.HeapAlloc))
				for _, pu := range l.a.projects {
					state += float64(pu.bytes)
				}
				held += float64(len(l.a.byID))
				runtime.KeepAlive(l)
				b.StartTimer()
			}
			n := float64(b.N * len(bc.msgs))
			b.ReportMetric(heap/n, "heap-B/event")
			b.ReportMetric(state/n, "state-B/event")
			b.ReportMetric(held/float64(b.N), "cells-held")
			b.ReportMetric(dlq/float64(b.N), "dlq/op")
		})
	}
}
