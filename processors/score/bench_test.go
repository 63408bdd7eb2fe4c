package score

import (
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/schemas"
)

// benchStream builds a baseline and cells in-situ cells of tasks attempts
// each, in rounds of 50 with an update after each round.
func benchStream(cells, tasks int) (base []schemas.Event, evolved []schemas.Event) {
	b := newSeq("base", 0).begin(schemas.RouteBaseline, "")
	for i := range tasks {
		b.attempt("t"+itoa(i), int32(i/50+1), "h0", float64(i%2))
	}
	b.finish()
	for k := range cells {
		c := newSeq("e"+itoa(k), time.Duration(k)*time.Hour).begin(schemas.RouteInSitu, "opus")
		c.cs.TaskCount, c.cs.BatchSize = int32(tasks), 50
		v := "h0"
		for i := range tasks {
			cy := int32(i/50 + 1)
			a := c.attempt("t"+itoa(i), cy, v, float64((i/3+k)%2))
			a.SkillsAvailable = 3
			if i%50 == 49 {
				nv := "h" + itoa(int(cy))
				u := c.update("u"+itoa(k)+"-"+itoa(int(cy)), cy, v, nv, art(schemas.KindSkill, "s", schemas.OpAdd, "x"))
				u.EvidenceTaskIDs = []string{"t" + itoa(i), "t" + itoa(i-1)}
				v = nv
			}
		}
		c.finish()
		evolved = append(evolved, c.evs...)
	}
	return b.evs, evolved
}

// BenchmarkPairerAddAttempt measures the hot path: in-situ cells' events
// (98% task_attempt, the rest updates and cell boundaries) against a finished
// baseline, including the emission of round metrics and samples.
func BenchmarkPairerAddAttempt(b *testing.B) {
	base, evs := benchStream(20, 500)
	var p *Pairer
	reset := func() {
		p = NewPairer(testKey, Params{})
		for _, ev := range base {
			if _, err := p.Add(ev); err != nil {
				b.Fatal(err)
			}
		}
	}
	reset()
	b.ReportAllocs()
	b.ResetTimer()
	var outputs int
	for i := 0; i < b.N; i++ {
		j := i % len(evs)
		if j == 0 && i > 0 {
			b.StopTimer()
			reset()
			b.StartTimer()
		}
		out, err := p.Add(evs[j])
		if err != nil {
			b.Fatal(err)
		}
		outputs += len(out)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	if b.N >= len(evs) && outputs == 0 {
		b.Fatal("no outputs")
	}
}
