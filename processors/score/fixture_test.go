package score

import (
	"fmt"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/schemas"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// seq builds one cell's event sequence with unique ids and increasing times.
type seq struct {
	id    string
	start time.Time
	n     int
	evs   []schemas.Event
	cs    *schemas.CellStarted
}

func newSeq(id string, offset time.Duration) *seq {
	return &seq{id: id, start: t0.Add(offset)}
}

func (s *seq) env() schemas.Envelope {
	s.n++
	return schemas.Envelope{
		EventID:   fmt.Sprintf("%s#%03d", s.id, s.n),
		EventTime: s.start.Add(time.Duration(s.n) * time.Second),
		Project:   "acme", Source: "test",
	}
}

func (s *seq) begin(route, evolver string) *seq {
	s.cs = &schemas.CellStarted{
		Envelope: s.env(), CampaignID: "c1", CellID: s.id, Benchmark: "swe", AgentModel: "qwen",
		EvolverModel: evolver, Seed: 1, Route: route, H0Version: "h0", BatchSize: 10, MaxAttempts: 1, TaskCount: 30,
	}
	s.evs = append(s.evs, s.cs)
	return s
}

// attempt appends an ok attempt 1 with success = (score == 1).
func (s *seq) attempt(task string, cycle int32, version string, score float64) *schemas.TaskAttempt {
	a := &schemas.TaskAttempt{
		Envelope: s.env(), CellID: s.id, TaskID: task, Cycle: cycle, Attempt: 1,
		HarnessVersion: version, Status: schemas.StatusOK, Score: score, Success: score == 1, Final: true,
	}
	s.evs = append(s.evs, a)
	return a
}

// round appends attempts for tasks prefix+first..prefix+last (two digits), the
// first `pass` of them passing.
func (s *seq) round(prefix string, first, last int, cycle int32, version string, pass int) {
	for i := first; i <= last; i++ {
		score := 0.0
		if i-first < pass {
			score = 1
		}
		s.attempt(fmt.Sprintf("%s%02d", prefix, i), cycle, version, score)
	}
}

func (s *seq) update(id string, cycle int32, from, to string, arts ...schemas.Artifact) *schemas.HarnessUpdate {
	u := &schemas.HarnessUpdate{
		Envelope: s.env(), CellID: s.id, UpdateID: id, Cycle: cycle, FromVersion: from, ToVersion: to,
		EvolverModel: s.cs.EvolverModel, Artifacts: arts, Accepted: true,
	}
	s.evs = append(s.evs, u)
	return u
}

func (s *seq) skill(task string, attempt int32, tool, status string) *schemas.SkillEvent {
	e := &schemas.SkillEvent{Envelope: s.env(), CellID: s.id, TaskID: task, Attempt: attempt, Turn: 1, Tool: tool, SkillName: "parse", Status: status}
	s.evs = append(s.evs, e)
	return e
}

func (s *seq) judge(task string, attempt int32, loaded, final *float64) *schemas.AdherenceJudgment {
	j := &schemas.AdherenceJudgment{Envelope: s.env(), CellID: s.id, TaskID: task, Attempt: attempt, SkillName: "parse",
		JudgeModel: "judge", HarnessLoaded: loaded, FinalValidation: final}
	s.evs = append(s.evs, j)
	return j
}

func (s *seq) finish() *schemas.CellFinished {
	f := &schemas.CellFinished{Envelope: s.env(), CellID: s.id, Status: schemas.CellCompleted}
	s.evs = append(s.evs, f)
	return f
}

func (s *seq) last() time.Time { return s.start.Add(time.Duration(s.n) * time.Second) }

func fptr(x float64) *float64 { return &x }

func art(kind, name, op, content string) schemas.Artifact {
	return schemas.Artifact{Kind: kind, Name: name, Op: op, Content: content, ContentSHA256: "x"}
}

const testKey = "acme/c1/swe/qwen/1"

// campaign builds the effect fixture of one pairing key (hand-computed
// expectations in TestPairerSamples):
//
//	base  baseline     cycle 1 t01–t10 (t01–t05 pass), 2 t11–t20 (t11–t14), 3 t21–t30 (t21–t23)
//	e1    in_situ opus cycle 1 = baseline; u1 h0→h1; cycle 2 t11–t20 all pass
//	                   (lifts: 4×0, 6×+1), judgments of t11–t12; u2 h1→h2; cycle 3 =
//	                   baseline, then a judgment of t13; u3 h2→h3 (last)
//	e2    in_situ      cycle 1 t01–t03 pass; e2-u1; cycle 2 t11–t12 pass;
//	                   e2-u2 rolled back; cycle 3 t21–t22 (under h1) pass; a late
//	                   judgment for round 1
//	e3    in_situ      cycle 1 = baseline; e3-u1; cycle 2 t15–t20 score 0.01; empty update
//	s1    split_test   cycle 1 h01–h08, only h06 passes; s1-u1; cycle 2 h01–h06 pass
//	p1    production   cycle 1 p01–p10 (2 pass); p1-u1; cycle 2 q01–q10 (8 pass)
//	st1   split_train  cycle 1 t01–t02 pass; st1-u1; cycle 2 t03 pass
func campaign() map[string]*seq {
	cells := map[string]*seq{}
	add := func(s *seq) *seq { cells[s.id] = s; return s }

	b := add(newSeq("base", 10000*time.Second)).begin(schemas.RouteBaseline, "")
	b.round("t", 1, 10, 1, "h0", 5)
	b.round("t", 11, 20, 2, "h0", 4)
	b.round("t", 21, 30, 3, "h0", 3)
	b.finish()

	e1 := add(newSeq("e1", 0)).begin(schemas.RouteInSitu, "opus")
	e1.round("t", 1, 10, 1, "h0", 5)
	e1.evs[1].(*schemas.TaskAttempt).TaskInput = "fix bug 1"
	u := e1.update("e1-u1", 1, "h0", "h1",
		art(schemas.KindSkill, "parse", schemas.OpAdd, "---\nname: parse\ndescription: d\n---\nbody"),
		art(schemas.KindPrompt, "system", schemas.OpModify, "Be careful."))
	u.EvidenceTaskIDs = []string{"t01", "t06", "t99"}
	u.EvidenceSummary = "fails on parsing"
	e1.round("t", 11, 20, 2, "h1", 10)
	e1.judge("t11", 1, fptr(0.9), fptr(0.2))
	e1.judge("t12", 1, fptr(0.4), nil)
	e1.update("e1-u2", 2, "h1", "h2", art(schemas.KindSkill, "parse", schemas.OpModify, "v2"))
	e1.round("t", 21, 30, 3, "h2", 3)
	e1.judge("t13", 1, fptr(0.5), fptr(0.8)) // trails round 3's attempts: still round 2
	e1.update("e1-u3", 3, "h2", "h3", art(schemas.KindMemory, "m", schemas.OpAdd, "note"))
	e1.finish()

	e2 := add(newSeq("e2", 100*time.Second)).begin(schemas.RouteInSitu, "sonnet")
	e2.round("t", 1, 3, 1, "h0", 3)
	e2.update("e2-u1", 1, "h0", "h1", art(schemas.KindSkill, "a", schemas.OpAdd, "x"))
	e2.round("t", 11, 12, 2, "h1", 2)
	e2.update("e2-u2", 2, "h1", "h2", art(schemas.KindSkill, "b", schemas.OpAdd, "y")).RolledBack = true
	e2.round("t", 21, 22, 3, "h1", 2)
	e2.judge("t01", 1, fptr(0.1), fptr(0.1)) // late: cycle 3 closed round 1
	e2.finish()

	e3 := add(newSeq("e3", 200*time.Second)).begin(schemas.RouteInSitu, "gpt")
	e3.round("t", 1, 10, 1, "h0", 5)
	e3.update("e3-u1", 1, "h0", "h1", art(schemas.KindTool, "grep", schemas.OpAdd, "{}"))
	for i := 15; i <= 20; i++ {
		e3.attempt(fmt.Sprintf("t%02d", i), 2, "h1", 0.01)
	}
	e3.update("e3-empty", 2, "h1", "h2")
	e3.finish()

	s1 := add(newSeq("s1", 300*time.Second)).begin(schemas.RouteSplitTest, "opus")
	for i := 1; i <= 8; i++ {
		score := 0.0
		if i == 6 {
			score = 1
		}
		s1.attempt(fmt.Sprintf("h%02d", i), 1, "h0", score)
	}
	s1.update("s1-u1", 1, "h0", "h1", art(schemas.KindSkill, "s", schemas.OpAdd, "z"))
	s1.round("h", 1, 8, 2, "h1", 6)
	s1.finish()

	p1 := add(newSeq("p1", 400*time.Second)).begin(schemas.RouteProduction, "opus")
	p1.round("p", 1, 10, 1, "h0", 2)
	p1.update("p1-u1", 1, "h0", "h1", art(schemas.KindPrompt, "sys", schemas.OpModify, "p"))
	p1.round("q", 1, 10, 2, "h1", 8)
	p1.finish()

	st := add(newSeq("st1", 500*time.Second)).begin(schemas.RouteSplitTrain, "opus")
	st.round("t", 1, 2, 1, "h0", 2)
	st.update("st1-u1", 1, "h0", "h1", art(schemas.KindSkill, "s", schemas.OpAdd, "z"))
	st.round("t", 3, 3, 2, "h1", 1)
	st.finish()
	return cells
}

func feed(t testing.TB, p *Pairer, evs []schemas.Event) []schemas.Event {
	t.Helper()
	var out []schemas.Event
	for _, ev := range evs {
		o, err := p.Add(ev)
		if err != nil {
			t.Fatalf("Add(%s %s): %v", ev.Type(), ev.Header().EventID, err)
		}
		out = append(out, o...)
	}
	return out
}
