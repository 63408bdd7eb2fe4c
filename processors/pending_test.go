package processors

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/producers/gen"
	"github.com/harnessflow/harnessflow/schemas"
)

type rec struct {
	topic string
	msg   kafka.Message
}

func encodeRecords(t *testing.T, c *gen.Campaign) []rec {
	t.Helper()
	var out []rec
	for _, r := range c.Records {
		b, err := schemas.Encode(r.Event)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec{r.Topic, kafka.Message{Key: []byte(r.Event.PartitionKey()), Value: b, Time: r.Time}})
	}
	return out
}

func feedAll(l *local, recs []rec, now time.Time) map[string][]byte {
	var derived []kafka.Message
	for _, r := range recs {
		l.feed(r.topic, r.msg, now, &derived)
	}
	l.end(now, &derived)
	set := map[string][]byte{}
	for _, m := range derived {
		ev, err := schemas.Decode(m.Value)
		if err != nil {
			panic(err)
		}
		set[m.Topic+"/"+ev.Header().EventID] = m.Value
	}
	return set
}

// TestPendingEventsAreReleased feeds events before their cell_started and
// attempts before the update that introduces their version: they wait and
// are admitted in arrival order when what they wait for arrives, deriving
// exactly what the in-order stream derives.
func TestPendingEventsAreReleased(t *testing.T) {
	c := gen.Generate(gen.Config{Seed: 5})
	recs := encodeRecords(t, c)
	want := feedAll(newLocal(t, Config{MinPairs: 2}), recs, time.Now())

	// Move every cell_started 4 positions later, and every update 3
	// positions later (past attempts that already run its to_version).
	moved := append([]rec(nil), recs...)
	shift := func(i, by int) {
		r := moved[i]
		copy(moved[i:i+by], moved[i+1:i+1+by])
		moved[i+by] = r
	}
	for i := len(moved) - 1; i >= 0; i-- {
		ev, _ := schemas.Decode(moved[i].msg.Value)
		switch ev.(type) {
		case *schemas.CellStarted:
			if i+4 < len(moved) {
				shift(i, 4)
			}
		case *schemas.HarnessUpdate:
			// Not past a cell_finished: the scorer ignores a finished
			// cell's later events, and the merge never does that.
			ok := i+3 < len(moved)
			for j := i + 1; ok && j <= i+3; j++ {
				next, _ := schemas.Decode(moved[j].msg.Value)
				_, fin := next.(*schemas.CellFinished)
				ok = !fin
			}
			if ok {
				shift(i, 3)
			}
		}
	}
	l := newLocal(t, Config{MinPairs: 2})
	got := feedAll(l, moved, time.Now())
	if l.a.pending.added == 0 || l.a.pending.addedVersion == 0 {
		t.Fatalf("nothing waited (%d pending, %d for a version): the test exercised nothing", l.a.pending.added, l.a.pending.addedVersion)
	}
	if l.a.pending.live != 0 {
		t.Errorf("%d events still pending", l.a.pending.live)
	}
	for k, v := range got {
		if strings.HasPrefix(k, schemas.TopicDLQ) {
			ev, _ := schemas.Decode(v)
			t.Errorf("dead letter: %+v", ev)
		}
	}
	if len(want) == 0 || len(got) != len(want) {
		t.Fatalf("derived %d events, want %d", len(got), len(want))
	}
	for k, v := range want {
		if !bytes.Equal(got[k], v) {
			t.Errorf("%s differs or is missing", k)
		}
	}
}

// TestPendingBoundAndTimeout: with PendingMax 2, a third event for unknown
// cells dead-letters the oldest at once; the log clock passing
// PendingTimeout dead-letters the rest.
func TestPendingBoundAndTimeout(t *testing.T) {
	l := newLocal(t, Config{PendingMax: 2, PendingTimeout: time.Minute})
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	ghost := func(i int, at time.Time) kafka.Message {
		a := &schemas.TaskAttempt{Envelope: schemas.Envelope{EventID: "g" + itoa(i), EventTime: at, Project: "p", Source: "t"},
			CellID: "ghost-" + itoa(i), TaskID: "t", Cycle: 1, Attempt: 1, HarnessVersion: "h0", Status: schemas.StatusOK, Score: 1, Success: true}
		b, err := schemas.Encode(a)
		if err != nil {
			t.Fatal(err)
		}
		return kafka.Message{Key: []byte(a.CellID), Value: b, Time: at}
	}
	var derived []kafka.Message
	now := time.Now()
	for i := 0; i < 3; i++ {
		l.feed(schemas.TopicAttempts, ghost(i, t0.Add(time.Duration(i)*time.Second)), now, &derived)
	}
	codes := func() []string {
		var out []string
		for _, m := range derived {
			ev, _ := schemas.Decode(m.Value)
			r := ev.(*schemas.Rejected)
			out = append(out, r.ReasonCode+":"+itoa(int(r.Offset)))
		}
		return out
	}
	if got := strings.Join(codes(), ","); got != CodeUnknownCell+":0" {
		t.Fatalf("after overflow: dead letters %q, want the oldest (offset 0) as unknown_cell", got)
	}
	// An event two minutes later (log time) expires the other two.
	l.feed(schemas.TopicAttempts, ghost(9, t0.Add(2*time.Minute)), now, &derived)
	if got := strings.Join(codes(), ","); got != "unknown_cell:0,unknown_cell:1,unknown_cell:2" {
		t.Fatalf("after the log clock passed the timeout: %q", got)
	}
	// The wall clock ends the wait of the last one on an idle partition.
	var out sink
	l.a.tick(&out, now.Add(2*time.Minute))
	if len(out.msgs) != 1 || l.a.pending.live != 0 {
		t.Fatalf("idle tick dead-lettered %d, %d still pending", len(out.msgs), l.a.pending.live)
	}
}

// TestFinishWaitsForLateUpdate delivers every cell's updates only after its
// cell_finished (hf.updates reached the broker late): the finish is held
// behind the attempts that wait for an update's version, and for
// Config.FinishHold behind the trailing updates that no attempt runs, so
// nothing is dead-lettered and every derived event equals the in-order
// stream's. With the hold disabled the trailing updates reach the scorer
// after the cell_finished and their samples are derived all the same (a
// late update counts; before issue 42 they were lost).
func TestFinishWaitsForLateUpdate(t *testing.T) {
	c := gen.Generate(gen.Config{Seed: 9})
	recs := encodeRecords(t, c)
	want := feedAll(newLocal(t, Config{MinPairs: 2}), recs, time.Now())

	decode := func(r rec) schemas.Event {
		ev, err := schemas.Decode(r.msg.Value)
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	used := map[string]bool{} // cell + version run by some attempt
	for _, r := range recs {
		if a, ok := decode(r).(*schemas.TaskAttempt); ok {
			used[a.CellID+"\x00"+a.HarnessVersion] = true
		}
	}
	var moved []rec
	late := map[string][]rec{}
	trailing := map[string]bool{} // sample ids of updates no attempt runs
	for _, r := range recs {
		switch e := decode(r).(type) {
		case *schemas.HarnessUpdate:
			late[e.CellID] = append(late[e.CellID], r)
			if !used[e.CellID+"\x00"+e.ToVersion] {
				trailing[e.UpdateID+"|"+e.CellID] = true
			}
			continue
		case *schemas.CellFinished:
			moved = append(moved, r)
			moved = append(moved, late[e.CellID]...)
			delete(late, e.CellID)
			continue
		}
		moved = append(moved, r)
	}
	if len(trailing) == 0 || len(trailing) == len(want) {
		t.Fatalf("campaign has %d trailing updates: the test needs some, not all", len(trailing))
	}
	for _, hold := range []time.Duration{0, -1, time.Hour} {
		l := newLocal(t, Config{MinPairs: 2, FinishHold: hold})
		got := feedAll(l, moved, time.Now())
		missing := lateDiff(t, want, got, trailing)
		// With the hold off, the updates reach the Pairer after the
		// cell_finished: late, they still yield their samples (issue 42:
		// a late update counts), only later.
		if missing != 0 {
			t.Errorf("finish hold %v: %d trailing updates lost their sample, want 0", hold, missing)
		}
		// hf_process_after_finish_seconds counts the events admitted after
		// their cell's finish: the hold's uncovered tail.
		after := histogramCount(t, l.a.m.afterFinish)
		switch {
		case hold < 0 && after == 0:
			t.Errorf("finish hold off: no event counted after its cell's finish, want the late updates")
		case hold == time.Hour && after != 0:
			t.Errorf("finish hold 1h: %d events counted after their cell's finish, want 0 (the hold covers them)", after)
		}
	}
}

// histogramCount is the number of observations of h.
func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(h)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 {
		t.Fatalf("gather: %v (%d families)", err, len(mfs))
	}
	return mfs[0].GetMetric()[0].GetHistogram().GetSampleCount()
}

// lateDiff compares a derived set with the in-order one: no dead letters,
// every event equal except missing samples of trailing updates, whose count
// it returns.
func lateDiff(t *testing.T, want, got map[string][]byte, trailing map[string]bool) int {
	t.Helper()
	for k := range got {
		if strings.HasPrefix(k, schemas.TopicDLQ+"/") {
			t.Errorf("dead letter %s for a stream whose updates only arrived late", k)
		}
	}
	missing := 0
	for k, v := range want {
		if bytes.Equal(got[k], v) {
			continue
		}
		ev, err := schemas.Decode(v)
		if err != nil {
			t.Fatal(err)
		}
		if sm, ok := ev.(*schemas.LabeledSample); ok && got[k] == nil && trailing[sm.UpdateID+"|"+sm.CellID] {
			missing++
			continue
		}
		t.Errorf("derived event %s differs or is missing", k)
	}
	if len(got)+missing != len(want) {
		t.Errorf("derived %d events (+%d trailing samples), want %d", len(got), missing, len(want))
	}
	return missing
}

// TestFinishWaitsForLateAttempts delivers each cell's last-round attempts
// after its cell_finished (hf.attempts reached the broker late): the finish
// waits until as many attempts as it announces were admitted, so the derived
// events equal the in-order stream's.
func TestFinishWaitsForLateAttempts(t *testing.T) {
	c := gen.Generate(gen.Config{Seed: 11})
	recs := encodeRecords(t, c)
	want := feedAll(newLocal(t, Config{MinPairs: 2}), recs, time.Now())

	decode := func(r rec) schemas.Event {
		ev, err := schemas.Decode(r.msg.Value)
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	last := map[string]int32{}
	for _, r := range recs {
		if a, ok := decode(r).(*schemas.TaskAttempt); ok && a.Cycle > last[a.CellID] {
			last[a.CellID] = a.Cycle
		}
	}
	var moved []rec
	late := map[string][]rec{}
	n := 0
	for _, r := range recs {
		switch e := decode(r).(type) {
		case *schemas.TaskAttempt:
			if e.Cycle == last[e.CellID] {
				late[e.CellID] = append(late[e.CellID], r)
				n++
				continue
			}
		case *schemas.CellFinished:
			moved = append(moved, r)
			moved = append(moved, late[e.CellID]...)
			delete(late, e.CellID)
			continue
		}
		moved = append(moved, r)
	}
	if n == 0 {
		t.Fatal("no attempts moved")
	}
	got := feedAll(newLocal(t, Config{MinPairs: 2}), moved, time.Now())
	for k, v := range want {
		if !bytes.Equal(got[k], v) {
			t.Errorf("derived event %s differs or is missing", k)
		}
	}
	if len(got) != len(want) {
		t.Errorf("derived %d events, want %d", len(got), len(want))
	}
}

// TestIdleTickEndsHoldsByLogTime reads a campaign's stream twice, once as it
// is written and once a minute behind it (a drained backlog), and ticks the
// idle partition right after its last message. A finish read fresh is held
// Config.FinishHold; one read a minute after its log time was already held
// that long in the log, so the idle tick admits it at once.
func TestIdleTickEndsHoldsByLogTime(t *testing.T) {
	recs := encodeRecords(t, gen.Generate(gen.Config{Seed: 13}))
	var last time.Time
	for _, r := range recs {
		if r.msg.Time.After(last) {
			last = r.msg.Time
		}
	}
	const hold = 5 * time.Second
	read := func(lag time.Duration) (*local, int) {
		l := newLocal(t, Config{MinPairs: 2, FinishHold: hold})
		var derived []kafka.Message
		for _, r := range recs {
			l.feed(r.topic, r.msg, last.Add(lag), &derived)
		}
		if len(l.a.holds) == 0 {
			t.Fatal("no cell_finished held at the end of the stream: the test needs one")
		}
		return l, len(l.a.holds)
	}
	finishes := func(out *sink) int {
		n := 0
		for _, m := range out.msgs {
			if m.Topic != schemas.TopicOutcomes {
				continue
			}
			vs, _ := outcomeValues(t, m)
			for _, v := range vs {
				if ev, err := schemas.Decode(v); err == nil {
					if _, ok := ev.(*schemas.CellFinished); ok {
						n++
					}
				}
			}
		}
		return n
	}

	fresh, held := read(0)
	var out sink
	fresh.a.tick(&out, last)
	if len(fresh.a.holds) != held || finishes(&out) != 0 {
		t.Fatalf("fresh stream, idle at once: %d of %d holds left, %d finishes admitted; want all held", len(fresh.a.holds), held, finishes(&out))
	}
	fresh.a.tick(&out, last.Add(hold+time.Millisecond))
	if len(fresh.a.holds) != 0 || finishes(&out) != held {
		t.Fatalf("fresh stream, idle for the hold: %d holds left, %d of %d finishes admitted", len(fresh.a.holds), finishes(&out), held)
	}

	behind, held := read(time.Minute)
	out.reset()
	behind.a.tick(&out, last.Add(time.Minute))
	if len(behind.a.holds) != 0 || finishes(&out) != held {
		t.Fatalf("stream read a minute late: %d holds left, %d of %d finishes admitted at the first idle tick", len(behind.a.holds), finishes(&out), held)
	}
}

// TestFinishShortOfAttemptsTimesOut: a cell_finished that announces an
// attempt that never comes waits for it only until the pending timeout, on
// the wall clock of an idle partition and on the log clock, and is then
// admitted once. (It used to wait again at once, forever: a partition that
// spun in its idle tick and a processor that never stopped.)
func TestFinishShortOfAttemptsTimesOut(t *testing.T) {
	recs := encodeRecords(t, gen.Generate(gen.Config{Seed: 17}))
	var cell cellKey
	var last time.Time
	kept := recs[:0:0]
	for _, r := range recs {
		if r.msg.Time.After(last) {
			last = r.msg.Time
		}
		ev, err := schemas.Decode(r.msg.Value)
		if err != nil {
			t.Fatal(err)
		}
		if a, ok := ev.(*schemas.TaskAttempt); ok && cell.cell == "" {
			cell = keyOf(a) // drop this attempt: its cell's finish counts it
			continue
		}
		kept = append(kept, r)
	}
	for _, clock := range []string{"wall", "log"} {
		l := newLocal(t, Config{MinPairs: 2})
		var derived []kafka.Message
		for _, r := range kept {
			l.feed(r.topic, r.msg, last, &derived)
		}
		if cs := l.a.byID[cell]; cs == nil || cs.finished || !cs.heldFinish {
			t.Fatalf("%s: the finish of %s does not wait for its missing attempt", clock, cell)
		}
		later := last.Add(l.cfg.PendingTimeout + l.cfg.FinishHold + time.Second)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if clock == "wall" {
				var out sink
				l.a.tick(&out, later)
				return
			}
			// Any message later in log time moves the log clock (here one
			// of an unknown cell, which waits itself).
			a := &schemas.TaskAttempt{Envelope: schemas.Envelope{EventID: "late", EventTime: later, Project: "p", Source: "s"},
				CellID: "ghost", TaskID: "t", Cycle: 1, Attempt: 1, HarnessVersion: "h0", Status: schemas.StatusOK, Score: 1, Success: true}
			b, err := schemas.Encode(a)
			if err != nil {
				panic(err)
			}
			l.feed(schemas.TopicAttempts, kafka.Message{Key: []byte("ghost"), Value: b, Time: later}, later, &derived)
			l.feed(schemas.TopicAttempts, kafka.Message{Key: []byte("ghost"), Value: b, Time: later.Add(l.cfg.FinishHold + time.Second)}, later, &derived)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s clock: the timed-out finish did not come out of the pending buffer (the loop spins)", clock)
		}
		if cs := l.a.byID[cell]; cs == nil || !cs.finished {
			t.Errorf("%s clock: cell %s not finished after the pending timeout", clock, cell)
		}
	}
}

// TestEmptyHarnessVersionIsTheCurrentOne: the scorer takes an attempt with
// an empty harness_version as solved under the cell's current version
// (score/doc.go); the validator used to hold it for an update introducing
// version "" and dead-letter it when the cell finished. With every
// attempt's version blanked (the stream is in order, so each ran the
// current version), nothing is dead-lettered and the derived events are
// those of the stream with the versions.
func TestEmptyHarnessVersionIsTheCurrentOne(t *testing.T) {
	c := gen.Generate(gen.Config{Seed: 5})
	recs := encodeRecords(t, c)
	want := feedAll(newLocal(t, Config{MinPairs: 2}), recs, time.Now())
	blanked := make([]rec, len(recs))
	n := 0
	for i, r := range recs {
		blanked[i] = r
		ev, err := schemas.Decode(r.msg.Value)
		if err != nil {
			t.Fatal(err)
		}
		if a, ok := ev.(*schemas.TaskAttempt); ok && a.HarnessVersion != "" {
			a.HarnessVersion = ""
			b, err := schemas.Encode(a)
			if err != nil {
				t.Fatal(err)
			}
			blanked[i].msg.Value = b
			n++
		}
	}
	if n == 0 {
		t.Fatal("no attempt had a version to blank: the test exercises nothing")
	}
	got := feedAll(newLocal(t, Config{MinPairs: 2}), blanked, time.Now())
	for k, v := range got {
		if strings.HasPrefix(k, schemas.TopicDLQ) {
			ev, _ := schemas.Decode(v)
			t.Errorf("dead letter: %+v", ev)
		}
	}
	if len(want) == 0 || len(got) != len(want) {
		t.Fatalf("derived %d events, want %d", len(got), len(want))
	}
	for k, v := range want {
		if !bytes.Equal(got[k], v) {
			t.Errorf("%s differs or is missing", k)
		}
	}
}
