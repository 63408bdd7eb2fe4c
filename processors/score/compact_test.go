package score

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/schemas"
)

// Every form an event id is kept in gives the id back exactly: the
// winners of natural keys are compared by it on equal event times.
func TestCompactIDsRoundTrip(t *testing.T) {
	c := &cell{arena: arena{cell: "cell-7"}}
	tasks := []string{"task-003", "", "t", "x/y", "日本"}
	ids := []string{
		"", "a", "cell-7", "cell-7:attempt:task-003:1", "cell-7task-003", "task-003",
		"pre-task-003-task-003-post", "0123456789abcdef0123456789abcdef", "0123456789ABCDEF",
		"abc", "00", "cell-70", "cell-7:skill:task-003:1:1", "日本:日本", strings.Repeat("z", 300),
	}
	type kept struct {
		ref  sref
		s    int32
		want string
	}
	var all []kept
	for _, task := range tasks {
		s := c.slotOf(task, 1)
		for _, id := range ids {
			all = append(all, kept{c.putID(id, string(c.taskOf(s))), s, id})
		}
	}
	// Parts past idParts: kept whole, still exact.
	s := c.slotOf("task-003", 2)
	for i := range 2 * idParts {
		id := fmt.Sprintf("cell-7:p%d:task-003:q%d", i, i)
		all = append(all, kept{c.putID(id, string(c.taskOf(s))), s, id})
	}
	for _, k := range all {
		if got := c.idStr(k.ref, k.s); got != k.want {
			t.Errorf("id %q of task %q comes back as %q", k.want, c.taskOf(k.s), got)
		}
	}
	if c.idParts > idParts {
		t.Errorf("%d id parts interned, the cap is %d", c.idParts, idParts)
	}
	c.compact()
	for _, k := range all {
		if got := c.idStr(k.ref, k.s); got != k.want {
			t.Errorf("after compact: id %q comes back as %q", k.want, got)
		}
	}
}

// The slot index finds every (task, attempt) by string and by bytes, as
// it grows and after a finished cell's compaction.
func TestCompactSlots(t *testing.T) {
	c := &cell{}
	const n = 3000
	check := func(when string) {
		t.Helper()
		for i := range n {
			task := fmt.Sprintf("t%d", i)
			for a := int32(1); a <= 2; a++ {
				s := c.findSlot(task, a)
				if s < 0 || string(c.taskOf(s)) != task || c.slots[s].attempt != a || c.findSlotBytes([]byte(task), a) != s {
					t.Fatalf("%s: slot of (%s, %d) is %d", when, task, a, s)
				}
			}
		}
		if c.findSlot("t-none", 1) >= 0 || c.findSlot("t1", 3) >= 0 || c.findSlotBytes([]byte("t-none"), 1) >= 0 {
			t.Fatalf("%s: a slot found for a pair never added", when)
		}
	}
	for i := range n {
		for a := int32(1); a <= 2; a++ {
			c.slotOf(fmt.Sprintf("t%d", i), a)
		}
	}
	if len(c.slots) != 2*n {
		t.Fatalf("%d slots, want %d", len(c.slots), 2*n)
	}
	check("growing")
	c.compact()
	check("compacted")
	c.slotOf("t-late", 1)
	check("a late slot")
}

// The seen set reports every id once, across merges and compaction.
func TestCompactIDSet(t *testing.T) {
	var s idSet
	const n = 20000
	for i := range n {
		if !s.add(fmt.Sprintf("ev-%d", i)) {
			t.Fatalf("ev-%d reported seen before it was added", i)
		}
		if i%7 == 0 && s.add(fmt.Sprintf("ev-%d", i/2)) {
			t.Fatalf("ev-%d reported new twice", i/2)
		}
	}
	s.compact()
	if s.len() != n || s.recent != nil {
		t.Fatalf("%d ids (%d recent), want %d merged", s.len(), len(s.recent), n)
	}
	for i := 0; i < n; i += 97 {
		if s.add(fmt.Sprintf("ev-%d", i)) {
			t.Fatalf("ev-%d reported new after the merge", i)
		}
	}
}

func TestCompactSmallMap(t *testing.T) {
	var m smallMap[string, int]
	for i := range 3 * smallMax {
		if at := m.put(fmt.Sprint(i), i); at != i {
			t.Fatalf("put %d at %d", i, at)
		}
	}
	m.put("5", 50)
	for i := range 3 * smallMax {
		want := i
		if i == 5 {
			want = 50
		}
		if v, ok := m.get(fmt.Sprint(i)); !ok || v != want {
			t.Fatalf("get %d: %d %v", i, v, ok)
		}
	}
	if _, ok := m.get("none"); ok || m.len() != 3*smallMax {
		t.Fatalf("len %d", m.len())
	}
}

// Copies of one natural key with the same event time: the greater event
// id wins, whichever arrives first and even when the winner arrives after
// cell_finished (a correction). Ids that hold the task id exercise the
// compact id forms.
func TestTiedResendsWinByEventID(t *testing.T) {
	b := newSeq("base", 0).begin(schemas.RouteBaseline, "")
	b.round("t", 1, 4, 1, "h0", 2)
	b.round("t", 5, 8, 2, "h0", 2)
	b.finish()
	e := newSeq("e", 100*time.Second).begin(schemas.RouteInSitu, "opus")
	e.round("t", 1, 4, 1, "h0", 2)
	u := e.update("u1", 1, "h0", "h1", art(schemas.KindSkill, "parse", schemas.OpAdd, "x"))
	u.EvidenceTaskIDs = []string{"t01", "t02"}
	e.round("t", 5, 8, 2, "h1", 3)
	at := e.start.Add(time.Hour)
	win, lose := []schemas.Event{}, []schemas.Event{}
	pair := func(a, z schemas.Event, id string) {
		a.Header().EventID, z.Header().EventID = "e:"+id, "e:"+id+"~" // z's id is greater
		a.Header().EventTime, z.Header().EventTime = at, at
		lose, win = append(lose, a), append(win, z)
	}
	pair(&schemas.TaskAttempt{CellID: "e", TaskID: "t01", Cycle: 1, Attempt: 1, HarnessVersion: "h0", Status: schemas.StatusOK, Score: 1, Success: true, TaskInput: "in-a"},
		&schemas.TaskAttempt{CellID: "e", TaskID: "t01", Cycle: 1, Attempt: 1, HarnessVersion: "h0", Status: schemas.StatusOK, Score: 0.25, TaskInput: "in-z"},
		"attempt:t01:1")
	pair(&schemas.SkillEvent{CellID: "e", TaskID: "t02", Attempt: 1, Turn: 1, Tool: schemas.ToolLoadSkill, SkillName: "parse", Status: schemas.SkillLoaded},
		&schemas.SkillEvent{CellID: "e", TaskID: "t02", Attempt: 1, Turn: 1, Tool: schemas.ToolLoadSkill, SkillName: "parse", Status: schemas.SkillRejectedMultikey},
		"skill:t02:1:1")
	pair(&schemas.AdherenceJudgment{CellID: "e", TaskID: "t02", Attempt: 1, SkillName: "parse", JudgeModel: "j", HarnessLoaded: fptr(0.9), FinalValidation: fptr(0.9)},
		&schemas.AdherenceJudgment{CellID: "e", TaskID: "t02", Attempt: 1, SkillName: "parse", JudgeModel: "j", HarnessLoaded: fptr(0.1)},
		"judgment:t02:1:parse")
	for _, ev := range append(win, lose...) {
		ev.Header().Project, ev.Header().Source = "acme", "test"
	}
	fin := &schemas.CellFinished{Envelope: schemas.Envelope{EventID: "e#fin", EventTime: at, Project: "acme", Source: "test"}, CellID: "e", Status: schemas.CellCompleted}
	run := func(before, after []schemas.Event) []byte {
		p := NewPairer(testKey, Params{Project: "acme"})
		feed(t, p, b.evs)
		evs := append(append(append(append([]schemas.Event{}, e.evs...), before...), fin), after...)
		return canonical(t, feed(t, p, evs))
	}
	ref := run(append(append([]schemas.Event{}, lose...), win...), nil)
	for name, got := range map[string][]byte{
		"winner first":       run(append(append([]schemas.Event{}, win...), lose...), nil),
		"winner late":        run(lose, win),
		"loser late":         run(win, lose),
		"both late, winners": run(nil, append(append([]schemas.Event{}, lose...), win...)),
	} {
		if !bytes.Equal(got, ref) {
			t.Errorf("%s: outputs differ\n%s\n---\n%s", name, got, ref)
		}
	}
	// The winners' values: t01 scores 0.25 (fail), t02's load is not a
	// load, its judgment 0.1 and no final validation.
	if !bytes.Contains(ref, []byte(`"task t01: fail score=0.25\ninput: in-z`)) {
		t.Errorf("the sample's query does not read the winning attempt:\n%s", ref)
	}
}
