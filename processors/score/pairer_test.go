package score

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/schemas"
)

var cellOrder = []string{"base", "e1", "e2", "e3", "s1", "p1", "st1"}

func samplesByUpdate(out []schemas.Event) map[string]*schemas.LabeledSample {
	m := map[string]*schemas.LabeledSample{}
	for _, ev := range out {
		if s, ok := ev.(*schemas.LabeledSample); ok {
			m[s.UpdateID] = s
		}
	}
	return m
}

func metricsByCell(out []schemas.Event) map[string]map[int32]*schemas.RoundMetrics {
	m := map[string]map[int32]*schemas.RoundMetrics{}
	for _, ev := range out {
		if r, ok := ev.(*schemas.RoundMetrics); ok {
			if m[r.CellID] == nil {
				m[r.CellID] = map[int32]*schemas.RoundMetrics{}
			}
			m[r.CellID][r.Cycle] = r
		}
	}
	return m
}

func TestPairerSamples(t *testing.T) {
	cells := campaign()
	p := NewPairer(testKey, Params{Project: "acme"})
	var out []schemas.Event
	for _, id := range cellOrder {
		out = append(out, feed(t, p, cells[id].evs)...)
	}
	s := samplesByUpdate(out)
	for _, o := range out {
		// Every output must pass the schema: the runtime cannot publish what
		// does not encode.
		if _, err := schemas.Encode(o); err != nil {
			t.Errorf("output %s does not encode: %v", o.Header().EventID, err)
		}
	}
	if len(s) != 8 {
		t.Fatalf("%d samples, want 8 (e1×3, e2×2, e3, s1, p1): %v", len(s), keys(s))
	}
	type want struct {
		effect, lo, hi, p float64
		label             string
		nb, na            int32
		reason            string
	}
	// e1-u1 (in situ): before = round 1 lifts, ten 0s; after = round 2 lifts,
	// six +1 and four 0 (mean 0.6, s² = 2.4/9). Welch with one constant side:
	// se = √(2.4/90) = 0.16329932, t = 3.6742346, df = 9 → p from the closed
	// form; CI = 0.6 ± 2.2621571628·se = [0.2305913, 0.9694087].
	se1 := math.Sqrt(2.4 / 90)
	p1 := tailP(0.6/se1, 9)
	// s1-u1 (split_test, same held-out tasks): paired diffs 1,1,1,1,1,0,0,0
	// (h06 passes both times, h07–h08 fail both times): 0.625, se = √(15/448),
	// t = 3.4156502, df 7; CI [0.1923181, 1.0576819] → upper bound clipped to 1.
	seS := math.Sqrt(15.0 / 448)
	// p1-u1 (production): Welch 8/10 vs 2/10 = 0.6, se = √(3.2/90), df 18.
	seP := math.Sqrt(3.2 / 90)
	wants := map[string]want{
		"e1-u1": {0.6, 0.6 - t975df9*se1, 0.6 + t975df9*se1, p1, schemas.LabelPositive, 10, 10,
			"pass rate +60.0 pp on swe over 20 paired tasks, 95% CI [+23.1, +96.9], p = 0.005"},
		// e1-u2: before = round 2 lifts, after = round 3 lifts (all 0): the mirror image.
		"e1-u2": {-0.6, -0.6 - t975df9*se1, -0.6 + t975df9*se1, p1, schemas.LabelNegative, 10, 10,
			"pass rate -60.0 pp on swe over 20 paired tasks, 95% CI [-96.9, -23.1], p = 0.005"},
		// e1-u3: the last update, no round after it.
		"e1-u3": {0, 0, 0, 1, schemas.LabelNeutral, 10, 0, "too few paired tasks (10 before, 0 after; need 5)"},
		// e2-u1: lifts 0,0,0 vs 0,0: constant and equal → effect 0, p 1.
		"e2-u1": {0, 0, 0, 1, schemas.LabelNeutral, 3, 2, "too few paired tasks (3 before, 2 after; need 5)"},
		"e2-u2": {0, 0, 0, 1, schemas.LabelNeutral, 2, 0, "rolled back"},
		// e3-u1: lifts ten 0s vs six 0.01s: both constant, difference 0.01 → p = 0,
		// CI [0.01, 0.01]; 0.01 < ε = 0.02 → neutral.
		"e3-u1": {0.01, 0.01, 0.01, 0, schemas.LabelNeutral, 10, 6,
			"pass rate +1.0 pp on swe over 16 paired tasks, 95% CI [+1.0, +1.0], p < 0.001; below ε = 2.0 pp"},
		"s1-u1": {0.625, 0.625 - t975df7*seS, 1, tailP(0.625/seS, 7), schemas.LabelPositive, 8, 8,
			"pass rate +62.5 pp on swe over 8 paired tasks, 95% CI [+19.2, +100.0], p = 0.011"},
		"p1-u1": {0.6, 0.6 - t975df18*seP, 0.6 + t975df18*seP, tailP(0.6/seP, 18), schemas.LabelPositive, 10, 10,
			"pass rate +60.0 pp on swe over 20 tasks, 95% CI [+20.4, +99.6], p = 0.005"},
	}
	for id, w := range wants {
		got := s[id]
		if got == nil {
			t.Errorf("%s: no sample", id)
			continue
		}
		near(t, id+" effect", got.Effect, w.effect, 1e-12)
		near(t, id+" ci_low", got.CILow, w.lo, 1e-9)
		near(t, id+" ci_high", got.CIHigh, w.hi, 1e-9)
		near(t, id+" p", got.PValue, w.p, 1e-9)
		if got.Label != w.label || got.NBefore != w.nb || got.NAfter != w.na || got.Reason != w.reason {
			t.Errorf("%s: label %s n %d/%d reason %q\nwant label %s n %d/%d reason %q",
				id, got.Label, got.NBefore, got.NAfter, got.Reason, w.label, w.nb, w.na, w.reason)
		}
	}

	u1 := s["e1-u1"]
	wantQuery := "task t01: pass score=1\ninput: fix bug 1\ntask t06: fail score=0\ntask t99: no outcome in this cell\nevidence summary: fails on parsing"
	if u1.Query != wantQuery {
		t.Errorf("query:\n%q\nwant\n%q", u1.Query, wantQuery)
	}
	wantUpdate := "### skill parse (add)\n---\nname: parse\ndescription: d\n---\nbody\n\n### prompt system (modify)\nBe careful."
	if u1.Update != wantUpdate || u1.ArtifactKind != schemas.KindSkill {
		t.Errorf("update %q kind %q", u1.Update, u1.ArtifactKind)
	}
	if s["e1-u2"].ArtifactKind != schemas.KindSkill || s["e1-u2"].Update != "### skill parse (modify)\nv2" {
		t.Errorf("e1-u2 update %q kind %q", s["e1-u2"].Update, s["e1-u2"].ArtifactKind)
	}
	wantID := derivedID("sample", "acme", "e1-u1", "e1")
	if u1.SampleID != wantID || u1.EventID != wantID || len(wantID) != 32 {
		t.Errorf("ids %s / %s, want %s", u1.SampleID, u1.EventID, wantID)
	}
	// In situ reads the baseline, whose latest event is its cell_finished.
	if !u1.ProducedAt.Equal(cells["base"].last()) || !u1.EventTime.Equal(u1.ProducedAt) {
		t.Errorf("e1-u1 produced_at %v, want baseline end %v", u1.ProducedAt, cells["base"].last())
	}
	// Production reads only its own cell: the last attempt of round 2 is the
	// event before cell_finished.
	if pr := s["p1-u1"]; !pr.ProducedAt.Equal(cells["p1"].last().Add(-time.Second)) {
		t.Errorf("p1-u1 produced_at %v, want %v", pr.ProducedAt, cells["p1"].last().Add(-time.Second))
	}
	if u1.Project != "acme" || u1.Source != Source || u1.CampaignID != "c1" || u1.Benchmark != "swe" ||
		u1.AgentModel != "qwen" || u1.EvolverModel != "opus" || u1.Seed != 1 || u1.Route != schemas.RouteInSitu ||
		u1.Cycle != 1 || u1.HarnessVersion != "h1" || u1.HarnessVersionIndex != 1 {
		t.Errorf("e1-u1 fields: %+v", u1)
	}
	for id, idx := range map[string]int32{"e1-u2": 2, "e1-u3": 3, "e2-u2": 2, "s1-u1": 1} {
		if s[id].HarnessVersionIndex != idx {
			t.Errorf("%s harness_version_index %d, want %d", id, s[id].HarnessVersionIndex, idx)
		}
	}

	m := metricsByCell(out)
	n := 0
	for _, c := range m {
		n += len(c)
	}
	if n != 17 {
		t.Errorf("%d round metrics, want 17", n)
	}
	e1 := m["e1"]
	for cy, w := range map[int32][3]float64{1: {50, 0.5, 0}, 2: {100, 1, 60}, 3: {30, 0.3, 0}} {
		r := e1[cy]
		if r == nil || r.NTasks != 10 || r.PassRate != w[0] || math.Abs(r.MeanScore-w[1]) > 1e-12 ||
			r.LiftVsBaseline == nil || math.Abs(*r.LiftVsBaseline-w[2]) > 1e-9 {
			t.Errorf("e1 cycle %d metrics %+v, want pass %v mean %v lift %v", cy, r, w[0], w[1], w[2])
		}
	}
	// e1 round 2 judgments: harness_loaded (0.9 + 0.4 + 0.5)/3 = 0.6,
	// final_validation (0.2 + 0.8)/2 = 0.5 (t12's is null).
	if r := e1[2]; r.AdherenceLoaded == nil || math.Abs(*r.AdherenceLoaded-0.6) > 1e-12 ||
		r.AdherenceFinal == nil || math.Abs(*r.AdherenceFinal-0.5) > 1e-12 || r.SkillLoadRate != nil {
		t.Errorf("e1 round 2 adherence: %+v", r)
	}
	if r := e1[1]; r.AdherenceLoaded != nil || r.AdherenceFinal != nil {
		t.Errorf("e1 round 1 has adherence: %+v", r)
	}
	// Its judgment came after cycle 3 started (round 1 was emitted): it
	// counts, by a correction of round 1 (same event id).
	if r := m["e2"][1]; r.AdherenceLoaded == nil || *r.AdherenceLoaded != 0.1 || r.AdherenceFinal == nil || *r.AdherenceFinal != 0.1 {
		t.Errorf("e2 round 1 did not count its late judgment: %+v", r)
	}
	if r := m["base"][1]; r.LiftVsBaseline != nil || r.PassRate != 50 {
		t.Errorf("baseline round: %+v", r)
	}
	if r := m["p1"][2]; r.LiftVsBaseline != nil || r.PassRate != 80 {
		t.Errorf("production round: %+v", r)
	}
	if r := m["s1"][1]; r.LiftVsBaseline != nil || r.PassRate != 12.5 {
		t.Errorf("split_test round (held-out tasks have no baseline pair): %+v", r)
	}
	if r := m["st1"][2]; r.LiftVsBaseline == nil || *r.LiftVsBaseline != 0 || r.NTasks != 1 {
		t.Errorf("split_train round: %+v", r)
	}
	st := p.Stats()
	if st.EmptyUpdates != 1 || st.SkippedUpdates != 1 || st.Samples != 8 || st.RoundMetrics != 18 || st.Late != 1 || st.Corrections != 1 {
		t.Errorf("stats %+v", st)
	}
	if !p.Done() {
		t.Error("not Done after every cell finished")
	}
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func TestPairerWaitsForBaseline(t *testing.T) {
	cells := campaign()
	p := NewPairer(testKey, Params{})
	var early []schemas.Event
	for _, id := range cellOrder[1:] {
		early = append(early, feed(t, p, cells[id].evs)...)
	}
	// Without a finished baseline only production outputs and the split_test
	// sample (a held-out difference, no baseline needed) are final.
	for _, ev := range early {
		cell := ev.PartitionKey()
		_, isSample := ev.(*schemas.LabeledSample)
		if cell != "p1" && !(cell == "s1" && isSample) {
			t.Errorf("emitted before the baseline finished: %s of %s", ev.Type(), cell)
		}
	}
	if len(early) != 4 { // p1: 2 rounds + 1 sample; s1: 1 sample
		t.Errorf("%d early outputs, want 4", len(early))
	}
	if p.Done() {
		t.Error("Done while cells wait for the baseline")
	}
	base := cells["base"].evs
	rest := feed(t, p, base[:len(base)-1])
	for _, ev := range rest {
		if ev.PartitionKey() != "base" {
			t.Errorf("%s of %s emitted before the baseline finished", ev.Type(), ev.PartitionKey())
		}
	}
	last, err := p.Add(base[len(base)-1])
	if err != nil {
		t.Fatal(err)
	}
	if len(early)+len(rest)+len(last) != 25 {
		t.Errorf("total %d outputs, want 25", len(early)+len(rest)+len(last))
	}
	// One Add's outputs are sorted by cell, cycle, type.
	for i := 1; i < len(last); i++ {
		ci, yi, ri := eventOrder(last[i-1])
		cj, yj, rj := eventOrder(last[i])
		if ci > cj || (ci == cj && (yi > yj || (yi == yj && ri > rj))) {
			t.Errorf("outputs not sorted at %d: %s/%d/%d after %s/%d/%d", i, cj, yj, rj, ci, yi, ri)
		}
	}
	if !p.Done() {
		t.Error("not Done")
	}
}

// TestRoundMetrics checks one round's figures against hand computation,
// including skill loads, adherence, the one-round slack and late events.
func TestRoundMetrics(t *testing.T) {
	b := newSeq("base", 0).begin(schemas.RouteBaseline, "")
	for i, sc := range []float64{1, 0, 0.5, 0} { // r1..r4
		b.attempt("r"+string(rune('1'+i)), 1, "h0", sc).Success = sc == 1
	}
	b.finish()

	c := newSeq("rm", 50*time.Second).begin(schemas.RouteInSitu, "opus")
	// A judgment for r4's attempt before the attempt itself: buffered.
	c.judge("r4", 1, fptr(0.5), fptr(0.9))
	a := c.attempt("r1", 1, "h0", 1)
	a.SkillsAvailable = 2
	c.skill("r1", 1, schemas.ToolLoadSkill, schemas.SkillLoaded)
	c.judge("r1", 1, fptr(0.9), fptr(0.6))
	a = c.attempt("r2", 1, "h0", 0.5)
	a.SkillsAvailable = 2
	c.skill("r2", 1, schemas.ToolLoadSkill, schemas.SkillRejectedMultikey) // not a load
	c.skill("r2", 1, schemas.ToolReadSkill, schemas.SkillLoaded)           // not load_skill
	a = c.attempt("r2", 1, "h0", 1)
	a.Attempt, a.SkillsAvailable = 2, 2
	c.skill("r2", 2, schemas.ToolLoadSkill, schemas.SkillLoaded)
	c.judge("r2", 2, fptr(0.7), nil)
	a = c.attempt("r3", 1, "h0", 0.8)
	a.Status, a.Success, a.SkillsAvailable = schemas.StatusTimeout, true, 2 // counts as score 0, fail
	c.skill("r3", 1, schemas.ToolLoadSkill, schemas.SkillLoaded)
	c.attempt("r4", 1, "h0", 1)                                  // skills_available 0
	c.skill("r4", 1, schemas.ToolLoadSkill, schemas.SkillLoaded) // not offered: outside SLR
	c.attempt("r5", 2, "h0", 1)
	// Cycle 2 started, round 1 is still open (one round of slack).
	c.judge("r3", 1, nil, fptr(0.3))
	closer := c.attempt("r6", 3, "h0", 1) // closes round 1
	// Late for round 1 (emitted): a re-send of r1's load (same natural key,
	// later: it wins, still a load) and of r1's judgment under new values.
	lateLoad := c.skill("r1", 1, schemas.ToolLoadSkill, schemas.SkillLoaded)
	lateJudge := c.judge("r1", 1, fptr(0), fptr(0))

	p := NewPairer(testKey, Params{})
	if out := feed(t, p, b.evs); len(out) != 1 {
		t.Fatalf("baseline: %d outputs, want its round", len(out))
	}
	var first, got *schemas.RoundMetrics
	for _, ev := range c.evs {
		out, err := p.Add(ev)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) == 0 {
			continue
		}
		if len(out) != 1 || (ev != closer && ev != lateLoad && ev != lateJudge) {
			t.Fatalf("outputs %d at %s, want 1 at the cycle-3 attempt and one correction per late input", len(out), ev.Header().EventID)
		}
		got = out[0].(*schemas.RoundMetrics)
		if ev == closer {
			first = got
		}
	}
	if first == nil {
		t.Fatal("round 1 not emitted")
	}
	// n_tasks 4 (r1–r4 at attempt 1). pass: r1 ✓, r2 ✗ (0.5), r3 ✗ (timeout),
	// r4 ✓ → 50%. mean score (1 + 0.5 + 0 + 1)/4 = 0.625. lift vs baseline
	// (1,0,0.5,0): 0, +0.5, −0.5, +1 → mean 0.25 → 25 pp. SLR: offered rows
	// r1a1, r2a1, r2a2, r3a1 = 4; loaded r1a1, r2a2, r3a1 = 3 → 0.75. LPR:
	// r1a1 ✓, r2a2 ✓, r3a1 ✗ → 66.67%. adherence_loaded (0.5 + 0.9 + 0.7)/3
	// = 0.7; adherence_final (0.9 + 0.6 + 0.3)/3 = 0.6.
	check := func(name string, v *float64, want float64) {
		t.Helper()
		if v == nil {
			t.Errorf("%s = nil, want %v", name, want)
			return
		}
		near(t, name, *v, want, 1e-12)
	}
	for _, r := range []*schemas.RoundMetrics{first, got} {
		if r.NTasks != 4 || r.PassRate != 50 || r.MeanScore != 0.625 || r.Cycle != 1 {
			t.Errorf("metrics %+v", r)
		}
		check("lift", r.LiftVsBaseline, 25)
		check("slr", r.SkillLoadRate, 0.75)
		check("lpr", r.LoadedPassRate, 200.0/3)
	}
	check("adherence_loaded", first.AdherenceLoaded, 0.7)
	check("adherence_final", first.AdherenceFinal, 0.6)
	if first.EventID != derivedID("round", "", "rm", "1") || !first.EventTime.Equal(c.start.Add(17*time.Second)) {
		// the latest input of round 1 is the r3 judgment (event 17 of the cell)
		t.Errorf("id %s time %v", first.EventID, first.EventTime)
	}
	// The late judgment wins r1's (task, attempt, skill, judge) key: its
	// 0 and 0 replace 0.9 and 0.6. adherence_loaded (0.5 + 0 + 0.7)/3 = 0.4,
	// adherence_final (0.9 + 0 + 0.3)/3 = 0.4; the correction has round 1's
	// id and the late judgment's time.
	check("corrected adherence_loaded", got.AdherenceLoaded, 0.4)
	check("corrected adherence_final", got.AdherenceFinal, 0.4)
	if got.EventID != first.EventID || !got.EventTime.Equal(lateJudge.EventTime) {
		t.Errorf("correction id %s time %v, want %s and %v", got.EventID, got.EventTime, first.EventID, lateJudge.EventTime)
	}
	if st := p.Stats(); st.Late != 2 || st.Corrections != 2 || st.Superseded != 2 {
		t.Errorf("stats %+v, want 2 late, 2 corrections, 2 superseded", st)
	}
	out := feed(t, p, []schemas.Event{c.finish()})
	m := metricsByCell(out)["rm"]
	if len(m) != 2 || m[2].SkillLoadRate != nil || m[2].LoadedPassRate != nil || m[2].AdherenceLoaded != nil ||
		m[2].LiftVsBaseline != nil || m[2].PassRate != 100 {
		t.Errorf("rounds 2–3: %+v", m)
	}
}

// interleave merges the per-cell sequences in a random order that keeps each
// cell's order, re-sending already-sent events with probability dup.
func interleave(cells map[string]*seq, rng *rand.Rand, dup float64) []schemas.Event {
	ids := keys(cells)
	pos := map[string]int{}
	var out []schemas.Event
	for {
		var live []string
		for _, id := range ids {
			if pos[id] < len(cells[id].evs) {
				live = append(live, id)
			}
		}
		if len(live) == 0 {
			return out
		}
		id := live[rng.IntN(len(live))]
		out = append(out, cells[id].evs[pos[id]])
		pos[id]++
		if rng.Float64() < dup {
			out = append(out, cells[id].evs[rng.IntN(pos[id])])
		}
	}
}

// canonical renders the final state of the derived events: the last
// emission of each event id (a correction replaces what it corrects).
func canonical(t *testing.T, out []schemas.Event) []byte {
	t.Helper()
	last := map[string]schemas.Event{}
	for _, ev := range out {
		last[string(ev.Type())+"/"+ev.Header().EventID] = ev
	}
	evs := make([]schemas.Event, 0, len(last))
	for _, ev := range last {
		evs = append(evs, ev)
	}
	sortEvents(evs)
	var buf bytes.Buffer
	for _, ev := range evs {
		b, err := schemas.MarshalJSON(ev)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

func TestDeterminism(t *testing.T) {
	cells := campaign()
	var ref []byte
	var refN int
	for i := range 12 {
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		var evs []schemas.Event
		switch i {
		case 0: // cell after cell, baseline first
			for _, id := range cellOrder {
				evs = append(evs, cells[id].evs...)
			}
		case 1: // baseline last
			for _, id := range cellOrder[1:] {
				evs = append(evs, cells[id].evs...)
			}
			evs = append(evs, cells["base"].evs...)
		default:
			evs = interleave(cells, rng, 0.2*float64(i%3))
		}
		if i%2 == 1 { // a replay of everything again after the end
			evs = append(evs, evs...)
		}
		p := NewPairer(testKey, Params{Project: "acme"})
		out := feed(t, p, evs)
		got := canonical(t, out)
		n := bytes.Count(got, []byte("\n"))
		if i == 0 {
			ref, refN = got, n
			if refN != 25 {
				t.Fatalf("%d outputs, want 25", refN)
			}
			continue
		}
		if n != refN || !bytes.Equal(got, ref) {
			t.Fatalf("interleaving %d: %d outputs differ from the reference (%d)\n%s\n---\n%s", i, n, refN, got, ref)
		}
		if !p.Done() {
			t.Errorf("interleaving %d: not Done", i)
		}
	}
}

// memCampaign feeds one key: a baseline of T tasks and n in-situ cells of T
// tasks in rounds of 10, one cell after another, and returns the largest
// Size seen and the Size at the end.
func memCampaign(t *testing.T, n, tasks int) (peak, end int, p *Pairer) {
	p = NewPairer(testKey, Params{})
	track := func(evs []schemas.Event) {
		for _, ev := range evs {
			if _, err := p.Add(ev); err != nil {
				t.Fatal(err)
			}
			peak = max(peak, p.Size())
		}
	}
	b := newSeq("base", 0).begin(schemas.RouteBaseline, "")
	for i := range tasks {
		b.attempt("t"+itoa(i), int32(i/10+1), "h0", float64(i%2))
	}
	b.finish()
	track(b.evs)
	// The runtime forgets a finished cell once its retention window for
	// late events passed (Forget); here at once.
	p.Forget("base")
	for k := range n {
		c := newSeq("e"+itoa(k), time.Duration(k)*time.Hour).begin(schemas.RouteInSitu, "opus")
		v := "h0"
		for i := range tasks {
			cy := int32(i/10 + 1)
			c.attempt("t"+itoa(i), cy, v, float64((i+k)%2))
			if i%10 == 9 {
				nv := "h" + itoa(int(cy))
				c.update("u"+itoa(k)+"-"+itoa(int(cy)), cy, v, nv, art(schemas.KindSkill, "s", schemas.OpAdd, "x"))
				v = nv
			}
		}
		c.finish()
		track(c.evs)
		if !p.Forget(c.id) {
			t.Fatalf("cell %s not finished", c.id)
		}
	}
	return peak, p.Size(), p
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestMemoryFlat(t *testing.T) {
	const tasks = 100
	peak1, end1, p1 := memCampaign(t, 10, tasks)
	peak2, end2, p2 := memCampaign(t, 100, tasks)
	if !p1.Done() || !p2.Done() {
		t.Fatal("not Done")
	}
	// After every cell finished and was forgotten only the baseline's task →
	// score map and one id per forgotten cell remain.
	if end1 != tasks+11 || end2 != tasks+101 {
		t.Errorf("retained after Done: %d and %d, want %d and %d", end1, end2, tasks+11, tasks+101)
	}
	// 10× more finished cells grow the peak by at most one item per cell.
	if peak2-peak1 > 90 {
		t.Errorf("peak Size grew from %d to %d with 10× more cells", peak1, peak2)
	}
	// A live cell holds its stream's winners (a late event may correct any
	// of its rounds; stage A's per-project state cap bounds it), a few items
	// per event.
	if peak1 > end1+tasks*5 {
		t.Errorf("peak %d unexpectedly large", peak1)
	}
	// The runtime evicts Done pairers: many keys, nothing retained.
	live := map[string]*Pairer{}
	for k := range 30 {
		_, _, p := memCampaign(t, 2, 20)
		key := "k" + itoa(k)
		live[key] = p
		if p.Done() {
			delete(live, key)
		}
	}
	if len(live) != 0 {
		t.Errorf("%d pairers not Done", len(live))
	}
}

func TestPairerErrors(t *testing.T) {
	cells := campaign()
	p := NewPairer(testKey, Params{})
	if _, err := p.Add(cells["e1"].evs[1]); !errors.Is(err, ErrUnknownCell) {
		t.Errorf("attempt before cell_started: %v", err)
	}
	if _, err := p.Add(&schemas.Rejected{}); !errors.Is(err, ErrUnsupportedEvent) {
		t.Errorf("rejected: %v", err)
	}
	other := *cells["e1"].cs
	other.Seed = 2
	if _, err := p.Add(&other); !errors.Is(err, ErrKeyMismatch) {
		t.Errorf("other key: %v", err)
	}
	feed(t, p, cells["base"].evs[:1])
	second := *cells["base"].cs
	second.CellID, second.EventID = "base2", "base2#1"
	if _, err := p.Add(&second); !errors.Is(err, ErrDuplicateBaseline) {
		t.Errorf("second baseline: %v", err)
	}
	// The ignored cell's later events are dropped without error.
	if out, err := p.Add(&schemas.CellFinished{CellID: "base2"}); err != nil || out != nil {
		t.Errorf("ignored cell: %v %v", out, err)
	}
	// Redelivered events and events after cell_finished are ignored.
	e2 := cells["e2"].evs
	feed(t, p, e2[:3])
	feed(t, p, e2[:3])
	if st := p.Stats(); st.Duplicates != 3 {
		t.Errorf("duplicates %d, want 3", st.Duplicates)
	}
}

func TestSetParams(t *testing.T) {
	cells := campaign()
	p := NewPairer(testKey, Params{})
	// ε = 0.7 makes e1-u1 (+60 pp) neutral; α = 0.001 makes p1-u1 neutral.
	p.SetParams(Params{Epsilon: 0.7, Alpha: 0.001})
	var out []schemas.Event
	for _, id := range cellOrder {
		out = append(out, feed(t, p, cells[id].evs)...)
	}
	s := samplesByUpdate(out)
	if s["e1-u1"].Label != schemas.LabelNeutral || !strings.HasSuffix(s["e1-u1"].Reason, "; below ε = 70.0 pp") {
		t.Errorf("e1-u1 with ε 0.7: %s %q", s["e1-u1"].Label, s["e1-u1"].Reason)
	}
	if s["p1-u1"].Label != schemas.LabelNeutral || !strings.Contains(s["p1-u1"].Reason, "99.9% CI") {
		t.Errorf("p1-u1 with α 0.001: %s %q", s["p1-u1"].Label, s["p1-u1"].Reason)
	}
}

// TestUpdatesOvertakingAttempts moves every update of every cell to right
// after its cell_started (hf.updates ran ahead of hf.attempts): rounds still
// close by attempts, the query is built from the update's own round, and the
// outputs equal the in-order stream's byte for byte.
func TestUpdatesOvertakingAttempts(t *testing.T) {
	cells := campaign()
	run := func(reorder bool) map[string]string {
		p := NewPairer(testKey, Params{})
		out := map[string]string{}
		for _, id := range cellOrder {
			evs := cells[id].evs
			if reorder {
				var ups, rest []schemas.Event
				for _, ev := range evs[1:] {
					if _, ok := ev.(*schemas.HarnessUpdate); ok {
						ups = append(ups, ev)
					} else {
						rest = append(rest, ev)
					}
				}
				evs = append(append([]schemas.Event{evs[0]}, ups...), rest...)
			}
			for _, ev := range feed(t, p, evs) {
				b, err := schemas.MarshalJSON(ev)
				if err != nil {
					t.Fatal(err)
				}
				out[ev.Header().EventID] = string(b)
			}
		}
		return out
	}
	want, got := run(false), run(true)
	if len(want) == 0 {
		t.Fatal("the fixture derived nothing")
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("output %s differs when updates overtake attempts:\n got %s\nwant %s", id, got[id], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d outputs, want %d", len(got), len(want))
	}
}

// TestDerivedIDsProject: samples and round metrics of two projects that use
// the same cell and update ids have different ids; the default project's
// are the ids released before projects were hashed.
func TestDerivedIDsProject(t *testing.T) {
	if derivedID("sample", "acme", "u1", "c1") == derivedID("sample", "evil", "u1", "c1") {
		t.Error("sample id does not depend on the project")
	}
	if derivedID("round", "acme", "c1", "1") == derivedID("round", "evil", "c1", "1") {
		t.Error("round id does not depend on the project")
	}
	if derivedID("sample", "a|u1", "c") == derivedID("sample", "a", "u1|c") {
		t.Error("a separator inside a part moves bytes between parts")
	}
	old := sha256.Sum256([]byte("sample|u1|c1"))
	if got := derivedID("sample", schemas.DefaultProject, "u1", "c1"); got != hex.EncodeToString(old[:16]) {
		t.Errorf("default project's sample id %s changed", got)
	}
	if derivedID("sample", schemas.DefaultProject, "u1", "c1") == derivedID("sample", "", "u1", "c1") {
		t.Error("the empty project derives the default project's id")
	}
}

// TestJudgmentOfTaskInTwoRoundsBelongsByTime: a task solved in two rounds
// (held-out tasks) has two attempt-1 rows; a judgment names (task,
// attempt) only, so it belongs to the row with the latest event time not
// after its own, whatever arrived first: here round 1's, although it
// arrives after round 2's row (adherence_loaded 0.8 in round 1, none in
// round 2).
func TestJudgmentOfTaskInTwoRoundsBelongsByTime(t *testing.T) {
	c := newSeq("ho", 0).begin(schemas.RouteProduction, "opus")
	c.attempt("h01", 1, "h0", 1) // +2s
	c.attempt("h02", 1, "h0", 0) // +3s
	c.attempt("h01", 2, "h0", 1) // +4s
	c.attempt("h02", 2, "h0", 1) // +5s
	j := c.judge("h01", 1, fptr(0.8), nil)
	j.EventTime = c.start.Add(2500 * time.Millisecond) // judged after round 1's row, before round 2's
	c.finish()
	p := NewPairer(testKey, Params{})
	m := metricsByCell(feed(t, p, c.evs))["ho"]
	if r := m[1]; r == nil || r.AdherenceLoaded == nil || *r.AdherenceLoaded != 0.8 {
		t.Errorf("round 1: %+v, want adherence_loaded 0.8", r)
	}
	if r := m[2]; r == nil || r.AdherenceLoaded != nil || r.NTasks != 2 || r.PassRate != 100 {
		t.Errorf("round 2: %+v, want 2 tasks, pass 100, no adherence", r)
	}
}

// TestLateBaselineAttemptCorrectsLifts: the baseline's t2 is re-sent
// after its cell_finished, under a new event id, later, with score 1 (it
// wins t2's key): the evolved cell's round 1, emitted with lift
// ((1−1) + (1−0))/2 → 50 pp, is corrected to ((1−1) + (1−1))/2 → 0 pp
// under the same event id.
func TestLateBaselineAttemptCorrectsLifts(t *testing.T) {
	b := newSeq("base", 0).begin(schemas.RouteBaseline, "")
	b.attempt("t1", 1, "h0", 1)
	b.attempt("t2", 1, "h0", 0)
	b.finish()
	late := b.attempt("t2", 1, "h0", 1)
	e := newSeq("e", 100*time.Second).begin(schemas.RouteInSitu, "opus")
	e.attempt("t1", 1, "h0", 1)
	e.attempt("t2", 1, "h0", 1)
	e.finish()
	p := NewPairer(testKey, Params{})
	feed(t, p, b.evs[:len(b.evs)-1])
	first := metricsByCell(feed(t, p, e.evs))["e"][1]
	if first == nil || first.LiftVsBaseline == nil || *first.LiftVsBaseline != 50 {
		t.Fatalf("round 1 before the late baseline attempt: %+v, want lift 50", first)
	}
	out := feed(t, p, []schemas.Event{late})
	got := metricsByCell(out)["e"][1]
	if got == nil || got.LiftVsBaseline == nil || *got.LiftVsBaseline != 0 || got.EventID != first.EventID {
		t.Errorf("correction %+v, want lift 0 under id %s", got, first.EventID)
	}
}
