package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/harnessflow/harnessflow/schemas"
)

// sample is one update: the content parsed back from its skill's text, its
// context, and its latent relative effect (true effect / mean increment).
type sample struct {
	bm, agent string
	parsed    content
	mult      float64
	text      string
}

// campaignSamples generates a campaign of many short rounds and returns one
// sample per update.
func campaignSamples(t *testing.T, cfg Config) []sample {
	t.Helper()
	texts := map[string]string{} // update id -> skill text
	mults := map[string]updateTrace{}
	err := generate(cfg, func(ev schemas.Event) error {
		if u, ok := ev.(*schemas.HarnessUpdate); ok {
			for _, a := range u.Artifacts {
				if a.Kind == schemas.KindSkill {
					texts[u.UpdateID] = a.Content
				}
			}
		}
		return nil
	}, func(u updateTrace) { mults[fmt.Sprintf("%s#u%d", u.cellID, u.cycle)] = u })
	if err != nil {
		t.Fatal(err)
	}
	var out []sample
	for id, u := range mults {
		text, ok := texts[id]
		if !ok {
			t.Fatalf("update %s: no skill text", id)
		}
		out = append(out, sample{bm: u.bm, agent: u.agent, parsed: parseSkill(t, text), mult: u.draw.mult, text: text})
	}
	slices.SortFunc(out, func(a, b sample) int { return strings.Compare(a.text, b.text) })
	return out
}

// parseSkill reads the content features back from a skill's markdown, as a
// reader of the text can: the focus from the blockquote, and the number of
// items of each section, told apart by their headings (every phrasing,
// ordinary and held-out).
func parseSkill(t *testing.T, text string) content {
	t.Helper()
	var c content
	c.focus = -1
	sec := -1
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "> "):
			for k := range focusWords {
				fw := focusWords[k]
				if slices.Contains(fw.train, line[2:]) || slices.Contains(fw.held, line[2:]) {
					c.focus = k
				}
			}
		case strings.HasPrefix(line, "#"):
			sec = -1
			for k, h := range headingWords {
				if slices.Contains(h.train, line) || slices.Contains(h.held, line) {
					sec = k
				}
			}
		case strings.TrimSpace(line) != "" && sec >= 0:
			*[numSections]*int{&c.steps, &c.checks, &c.specific, &c.filler, &c.verbose}[sec]++
		}
	}
	if c.focus < 0 {
		t.Fatalf("no focus in\n%s", text)
	}
	return c
}

// row is the regression's design row: a dummy per benchmark × focus, the
// counts, and the verbose count of weak agents.
func row(s sample) []float64 {
	x := make([]float64, 3*numFocus+6)
	x[slices.Index(DefaultBenchmarks, s.bm)*numFocus+s.parsed.focus] = 1
	c := s.parsed
	weak := 0.0
	if agents[s.agent].slr < weakSLR {
		weak = 1
	}
	copy(x[3*numFocus:], []float64{float64(c.steps), float64(c.checks), float64(c.specific), float64(c.filler), float64(c.verbose), weak * float64(c.verbose)})
	return x
}

// fit is ordinary least squares (normal equations, Gauss-Jordan with a
// small ridge for empty dummies).
func fit(xs [][]float64, y []float64) []float64 {
	k := len(xs[0])
	a := make([][]float64, k)
	for i := range a {
		a[i] = make([]float64, k+1)
		a[i][i] = 1e-9
	}
	for n, x := range xs {
		for i := 0; i < k; i++ {
			for j := 0; j < k; j++ {
				a[i][j] += x[i] * x[j]
			}
			a[i][k] += x[i] * y[n]
		}
	}
	for c := 0; c < k; c++ {
		p := c
		for r := c + 1; r < k; r++ {
			if math.Abs(a[r][c]) > math.Abs(a[p][c]) {
				p = r
			}
		}
		a[c], a[p] = a[p], a[c]
		for r := 0; r < k; r++ {
			if r != c && a[c][c] != 0 {
				f := a[r][c] / a[c][c]
				for j := c; j <= k; j++ {
					a[r][j] -= f * a[c][j]
				}
			}
		}
	}
	beta := make([]float64, k)
	for i := range beta {
		if a[i][i] != 0 {
			beta[i] = a[i][k] / a[i][i]
		}
	}
	return beta
}

// r2 is the share of y's variance the model beta explains on samples.
func r2(beta []float64, ss []sample) float64 {
	var mean float64
	for _, s := range ss {
		mean += s.mult / float64(len(ss))
	}
	var res, tot float64
	for _, s := range ss {
		var p float64
		for i, x := range row(s) {
			p += beta[i] * x
		}
		res += (s.mult - p) * (s.mult - p)
		tot += (s.mult - mean) * (s.mult - mean)
	}
	return 1 - res/tot
}

func fitSamples(ss []sample) []float64 {
	xs := make([][]float64, len(ss))
	y := make([]float64, len(ss))
	for i, s := range ss {
		xs[i], y[i] = row(s), s.mult
	}
	return fit(xs, y)
}

// TestTextExplainsEffect: a small linear model of the content read back
// from the text, fitted on one campaign (seed 1) and scored on another
// (seed 2, held-out wording), explains a substantial share of the updates'
// latent effects with the text signal on, and nothing with it off.
func TestTextExplainsEffect(t *testing.T) {
	t.Parallel()
	base := Config{Scale: 40, BatchSize: 2}
	on, held := base, base
	held.Seed, held.HeldOutWording = 2, true
	train, test := campaignSamples(t, on), campaignSamples(t, held)
	beta := fitSamples(train)
	in, out := r2(beta, train), r2(beta, test)
	t.Logf("text signal on: %d updates, R² %.3f in sample, %.3f on seed 2 with held-out wording (content share by construction %.2f)",
		len(train), in, out, contentSD*contentSD/(updateNoise*updateNoise))
	if in < 0.3 || out < 0.3 {
		t.Errorf("text signal on: R² %.3f in sample, %.3f out of sample; want >= 0.3", in, out)
	}
	off, offHeld := on, held
	off.TextSignal, offHeld.TextSignal = Bool(false), Bool(false)
	ctrain, ctest := campaignSamples(t, off), campaignSamples(t, offHeld)
	cbeta := fitSamples(ctrain)
	cin, cout := r2(cbeta, ctrain), r2(cbeta, ctest)
	t.Logf("text signal off: R² %.3f in sample, %.3f out of sample", cin, cout)
	if cout > 0.02 || cin > 0.03 {
		t.Errorf("text signal off: R² %.3f in sample, %.3f out of sample; want about 0", cin, cout)
	}
}

// TestControlKeepsEffects: turning the text signal off changes the skills'
// text and nothing else — the same effects, tasks and outcomes.
func TestControlKeepsEffects(t *testing.T) {
	t.Parallel()
	cfg := Config{Scale: 6, BatchSize: 2, Benchmarks: []string{"swe", "mcp"}, Agents: []string{"qwen235b", "qwen35_9b"}, Evolvers: []string{"opus46", "qwen32b"}}
	ctl := cfg
	ctl.TextSignal = Bool(false)
	a, b := collect(t, cfg), collect(t, ctl)
	if len(a) != len(b) {
		t.Fatalf("%d events with the text signal, %d without", len(a), len(b))
	}
	differ := 0
	for i := range a {
		ua, ok := a[i].(*schemas.HarnessUpdate)
		if !ok {
			ja, _ := schemas.MarshalJSON(a[i])
			jb, _ := schemas.MarshalJSON(b[i])
			if string(ja) != string(jb) {
				t.Fatalf("event %d (%s) differs without the text signal", i, a[i].Type())
			}
			continue
		}
		ub := b[i].(*schemas.HarnessUpdate)
		if ua.Artifacts[0].Content != ub.Artifacts[0].Content {
			differ++
		}
	}
	if differ == 0 {
		t.Fatal("the control's skills read the same as with the text signal")
	}
}

// TestContextInteraction: the same content has a different effect in
// another context — running the tests first helps SWE and not MCP-Atlas,
// listing the tools helps MCP-Atlas and not SWE, long skills cost weak
// agents more — and it shows in a campaign's realised draws.
func TestContextInteraction(t *testing.T) {
	t.Parallel()
	c := content{focus: focusTestsFirst, steps: 4, checks: 2, specific: 1, filler: 1, verbose: 1}
	if q1, q2 := quality(c, BenchSWE, "qwen235b"), quality(c, BenchMCP, "qwen235b"); q1 < q2+1 {
		t.Errorf("tests-first: quality %.2f on swe, %.2f on mcp; want swe higher by 1 sd", q1, q2)
	}
	c.focus = focusToolsFirst
	if q1, q2 := quality(c, BenchSWE, "qwen235b"), quality(c, BenchMCP, "qwen235b"); q2 < q1+1 {
		t.Errorf("tools-first: quality %.2f on swe, %.2f on mcp; want mcp higher by 1 sd", q1, q2)
	}
	long := c
	long.verbose = 3
	dStrong := rawQuality(long, BenchMCP, agents["opus46"]) - rawQuality(c, BenchMCP, agents["opus46"])
	dWeak := rawQuality(long, BenchMCP, agents["qwen35_9b"]) - rawQuality(c, BenchMCP, agents["qwen35_9b"])
	if !(dWeak < dStrong && dStrong < 0) {
		t.Errorf("two more background paragraphs: %.2f for opus46, %.2f for qwen35_9b; want both negative, weak's more", dStrong, dWeak)
	}
	// In a campaign: the realised relative effect of tests-first skills.
	mean := map[string][2]float64{}
	for _, s := range campaignSamples(t, Config{Scale: 40, BatchSize: 2, Benchmarks: []string{"swe", "mcp"}}) {
		if s.parsed.focus == focusTestsFirst {
			m := mean[s.bm]
			mean[s.bm] = [2]float64{m[0] + s.mult, m[1] + 1}
		}
	}
	swe, mcp := mean["swe"][0]/mean["swe"][1], mean["mcp"][0]/mean["mcp"][1]
	t.Logf("tests-first skills: mean relative effect %.2f on swe (%v), %.2f on mcp (%v)", swe, mean["swe"][1], mcp, mean["mcp"][1])
	if swe < mcp+0.4 {
		t.Errorf("tests-first: relative effect %.2f on swe, %.2f on mcp", swe, mcp)
	}
}

// TestEvolverStylesBalanced: no evolver writes better content on average
// for an anchor (non-weak) agent, on any benchmark — the tendency is in what
// it writes, not a bonus (Δupdate flat across tiers).
func TestEvolverStylesBalanced(t *testing.T) {
	t.Parallel()
	for _, bm := range DefaultBenchmarks {
		for _, ev := range DefaultEvolvers {
			r := rand.New(rand.NewPCG(1, 2))
			var sum float64
			const n = 20000
			for i := 0; i < n; i++ {
				sum += quality(drawContent(r, ev), bm, "sonnet46")
			}
			if m := sum / n; math.Abs(m) > 0.04 {
				t.Errorf("%s on %s: mean quality %.3f sd, want about 0", ev, bm, m)
			}
		}
	}
}

// TestHeldOutWording: a held-out-wording campaign shares no line of the
// skills' bodies with an ordinary one.
func TestHeldOutWording(t *testing.T) {
	t.Parallel()
	cfg := Config{Scale: 12, BatchSize: 2, Agents: []string{"haiku45"}}
	held := cfg
	held.HeldOutWording = true
	lines := func(ss []sample) map[string]bool {
		m := map[string]bool{}
		for _, s := range ss {
			body := strings.SplitN(s.text, "\n> ", 2)[1]
			body = strings.SplitN(body, "## Pitfalls seen", 2)[0]
			for _, l := range strings.Split(body, "\n") {
				if strings.TrimSpace(l) != "" {
					m[l] = true
				}
			}
		}
		return m
	}
	a, b := lines(campaignSamples(t, cfg)), lines(campaignSamples(t, held))
	for l := range b {
		if a[l] {
			t.Errorf("held-out campaign repeats %q", l)
		}
	}
	if len(a) < 100 || len(b) < 50 {
		t.Fatalf("%d distinct body lines with ordinary wording, %d held-out", len(a), len(b))
	}
}
