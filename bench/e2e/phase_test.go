package e2e

import (
	"testing"

	"github.com/harnessflow/harnessflow/producers/gen"
)

// The throughput run promises at least Config.Events events (issue 7 asks
// for a campaign of at least 2M): a plan is never smaller than asked, and
// never larger by a whole agent's worth.
func TestPlanForIsAtLeastN(t *testing.T) {
	one := len(gen.Generate(gen.Config{Agents: 1, Evolvers: 3, Rounds: 10, TasksPerRound: 100}).Records) - 1
	for _, n := range []int{1000, 4999, one, one + 1, 2 * one, 50000, 200000, 2000000 / 10, 2000000 / 40} {
		p := planFor(n)
		if p.events < n {
			t.Errorf("planFor(%d) = %d events, fewer than asked", n, p.events)
		}
		if p.cfg.Agents > 1 {
			c := p.cfg
			c.Agents--
			if fewer := len(gen.Generate(c).Records); fewer >= n {
				t.Errorf("planFor(%d) = %d agents, %d events: one agent fewer (%d events) would do", n, p.cfg.Agents, p.events, fewer)
			}
		}
	}
	if got := 10 * planFor(2000000/10).events; got < 2000000 {
		t.Errorf("default throughput run: %d events, want at least 2000000", got)
	}
}
