package score

import (
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/schemas"
)

// A whole cycle that reaches the Pairer only after the cell finished is a
// round of its own: its round metrics are emitted (the round never was).
func TestLateCycleAfterFinishIsEmitted(t *testing.T) {
	b := newSeq("base", 0).begin(schemas.RouteBaseline, "")
	b.round("t", 1, 4, 1, "h0", 2)
	b.round("t", 5, 8, 2, "h0", 2)
	b.finish()
	e := newSeq("e", 100*time.Second).begin(schemas.RouteInSitu, "opus")
	e.round("t", 1, 4, 1, "h0", 1)
	e.finish()
	e.round("t", 5, 8, 2, "h0", 3) // after cell_finished
	p := NewPairer(testKey, Params{})
	feed(t, p, b.evs)
	fin := len(e.evs) - 4
	if got := metricsByCell(feed(t, p, e.evs[:fin]))["e"]; len(got) != 1 || got[1] == nil {
		t.Fatalf("before the late cycle: %+v, want round 1", got)
	}
	got := metricsByCell(feed(t, p, e.evs[fin:]))["e"][2]
	if got == nil || got.NTasks != 4 || got.PassRate != 75 {
		t.Fatalf("late cycle 2: %+v, want its round metrics (4 tasks, pass 75)", got)
	}
}

// An update whose rounds both closed (here: the cell finished) when it
// arrives yields its sample at once.
func TestLateUpdateAfterFinishYieldsSample(t *testing.T) {
	b := newSeq("base", 0).begin(schemas.RouteBaseline, "")
	b.round("t", 1, 4, 1, "h0", 2)
	b.round("t", 5, 8, 2, "h0", 2)
	b.finish()
	e := newSeq("e", 100*time.Second).begin(schemas.RouteInSitu, "opus")
	e.round("t", 1, 4, 1, "h0", 1)
	e.round("t", 5, 8, 2, "h0", 3)
	e.finish()
	e.update("u1", 1, "h0", "h1", art(schemas.KindSkill, "parse", schemas.OpAdd, "x"))
	p := NewPairer(testKey, Params{})
	feed(t, p, b.evs)
	feed(t, p, e.evs[:len(e.evs)-1])
	out := feed(t, p, e.evs[len(e.evs)-1:])
	if s := samplesByUpdate(out)["u1"]; s == nil {
		t.Fatalf("late update after finish: no sample in %d outputs", len(out))
	}
}

// An update re-sent under a new event id, one copy with artifacts and one
// without: a sample, with the artifacts' text, whatever the arrival order.
func TestUpdateResentEmptyAnyOrder(t *testing.T) {
	for _, emptyFirst := range []bool{true, false} {
		for _, emptyWins := range []bool{true, false} {
			b := newSeq("base", 0).begin(schemas.RouteBaseline, "")
			b.round("t", 1, 4, 1, "h0", 2)
			b.round("t", 5, 8, 2, "h0", 2)
			b.finish()
			e := newSeq("e", 100*time.Second).begin(schemas.RouteInSitu, "opus")
			e.round("t", 1, 4, 1, "h0", 1)
			full := e.update("u1", 1, "h0", "h1", art(schemas.KindSkill, "parse", schemas.OpAdd, "x"))
			empty := e.update("u1", 1, "h0", "h1")
			empty.EventID = "e#resend"
			if !emptyWins {
				empty.EventTime = full.EventTime.Add(-time.Second)
			}
			if emptyFirst {
				n := len(e.evs)
				e.evs[n-2], e.evs[n-1] = e.evs[n-1], e.evs[n-2]
			}
			e.round("t", 5, 8, 2, "h1", 3)
			e.finish()
			p := NewPairer(testKey, Params{})
			feed(t, p, b.evs)
			s := samplesByUpdate(feed(t, p, e.evs))["u1"]
			if s == nil || s.Update == "" {
				t.Errorf("empty copy first %v, wins %v: sample %+v, want one with the artifacts' text", emptyFirst, emptyWins, s)
			}
		}
	}
}

// A finished cell whose outputs wait for the baseline is not forgotten:
// its round metrics come once the baseline finishes (Forget dropped them).
func TestForgetKeepsCellWaitingForBaseline(t *testing.T) {
	b := newSeq("base", 0).begin(schemas.RouteBaseline, "")
	b.round("t", 1, 4, 1, "h0", 2)
	e := newSeq("e", 100*time.Second).begin(schemas.RouteInSitu, "opus")
	e.round("t", 1, 4, 1, "h0", 3)
	e.finish()
	p := NewPairer(testKey, Params{})
	feed(t, p, b.evs)
	if out := feed(t, p, e.evs); len(out) != 0 {
		t.Fatalf("%d outputs before the baseline finished, want 0", len(out))
	}
	if p.Forget("e") {
		t.Error("Forget dropped a cell whose outputs wait for the baseline")
	}
	if got := metricsByCell(feed(t, p, []schemas.Event{b.finish()}))["e"][1]; got == nil || got.NTasks != 4 {
		t.Fatalf("round 1 of e once the baseline finished: %+v, want 4 tasks", got)
	}
	if !p.Forget("e") {
		t.Error("Forget kept a cell whose outputs were emitted")
	}
}
