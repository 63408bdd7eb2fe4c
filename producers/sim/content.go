package sim

import (
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
)

// The content of an update (the research: what a skill says matters). Each
// harness update has content features — its focus (the one rule it puts
// first), concrete steps, verification checks, details specific to the
// benchmark, generic filler and background verbosity. Its latent quality is a
// function of those features and of the context it is applied in (the same
// focus helps one benchmark and not another; long skills hurt weak agents
// more), standardised over the evolvers' pooled content so that its mean and
// spread are those of the old independent draw, plus round noise. The
// evolver only sets which content it tends to write (its style): every style
// has the same expected quality for a strong agent, so Δupdate stays flat
// across evolver tiers. The skill's markdown is rendered from the features
// with varied wording (wording.go); with Config.TextSignal off it is rendered
// from a second, independent draw of features (the control).

// Focus kinds: the rule a skill puts first. Their effect depends on the
// benchmark (focusEffect).
const (
	focusTestsFirst  = iota // run the tests before submitting
	focusToolsFirst         // list the tools first
	focusFormatCheck        // validate the output format
	focusReproduce          // reproduce the failure first
	focusClaims             // split the answer into claims
	numFocus
)

// content is an update's content features, as the text shows them.
type content struct {
	// focus is one of the focus kinds.
	focus int
	// steps (1..6) concrete steps, checks (0..3) verification checks,
	// specific (0..3) benchmark-specific details, filler (0..3) generic
	// sentences, verbose (0..3) background paragraphs.
	steps, checks, specific, filler, verbose int
}

// style is an evolver's tendency: shifts of the expected counts of its
// content (steps, checks, specific, filler, verbose). Each is balanced at
// the strong-agent weights (0.10 dS + 0.25 dC + 0.20 dD − 0.15 dF − 0.12 dV
// = 0), so no evolver writes better updates on average: a thorough evolver
// writes more checks and more words, a terse one fewer steps and fewer words.
type style struct{ dS, dC, dD, dF, dV float64 }

var evolverStyle = map[string]style{
	"opus46":     {dC: 0.6, dV: 0.75, dF: 0.4},
	"sonnet46":   {dS: 1.0, dF: 0.4, dV: 1.0 / 3},
	"haiku45":    {dS: -1, dD: 0.5, dV: -0.5, dF: 0.4},
	"qwen235b":   {dS: 1.5, dF: 1.0},
	"qwen32b":    {dC: 0.6, dD: -0.75},
	"qwen35_9b":  {dS: -1, dC: 0.4, dV: -0.5, dD: -0.3},
	"gptoss120b": {dD: 0.6, dV: 1.0},
}

// Weights of the content features in the raw quality (per item).
const (
	wSteps    = 0.10
	wChecks   = 0.25
	wSpecific = 0.20
	wFiller   = -0.15
	// wVerbose is the penalty per background paragraph; a weak agent's
	// (skill-load rate below weakSLR) adds wVerboseWeak × its shortfall,
	// relative to the weakest agent's (0.25): long skills are lost on
	// agents that barely load them. Anchor agents are not weak, so the
	// evolvers' styles stay balanced for Δupdate.
	wVerbose     = -0.12
	wVerboseWeak = -0.30
	weakSLR      = 0.6
)

// focusEffect is the raw quality of each focus kind per benchmark: running
// the tests helps SWE and SkillsBench but not MCP-Atlas, listing the tools
// helps MCP-Atlas and not SWE, and so on.
var focusEffect = map[string][numFocus]float64{
	BenchSWE: {focusTestsFirst: 0.5, focusToolsFirst: -0.2, focusFormatCheck: 0, focusReproduce: 0.4, focusClaims: -0.2},
	BenchMCP: {focusTestsFirst: -0.2, focusToolsFirst: 0.5, focusFormatCheck: 0.1, focusReproduce: -0.2, focusClaims: 0.4},
	BenchSB:  {focusTestsFirst: 0.3, focusToolsFirst: 0.2, focusFormatCheck: 0.5, focusReproduce: -0.1, focusClaims: -0.1},
}

// Spread of an update's relative effect (its increment over the mean
// increment, minus 1): contentSD from the standardised latent quality,
// noiseSD from the round; together updateNoise (0.9), as the independent
// draw had. The content's share of the variance, contentSD²/updateNoise²,
// is Config.ContentShare (DefaultContentShare: contentSD 0.63).
const DefaultContentShare = 0.49

// contentSD is the default content share's spread (tests).
var contentSD, _ = spreads(DefaultContentShare)

// spreads returns contentSD and noiseSD for a content share.
func spreads(share float64) (contentSD, noiseSD float64) {
	return updateNoise * math.Sqrt(share), updateNoise * math.Sqrt(1-share)
}

// binomial parameters of the content counts: n trials, base probability.
const (
	nSteps, pSteps       = 5, 0.5 // steps = 1 + Bin(5, p)
	nChecks, pChecks     = 3, 0.5
	nSpecific, pSpecific = 3, 0.5
	nFiller, pFiller     = 3, 1.0 / 3
	nVerbose, pVerbose   = 3, 1.0 / 3
)

// probs returns the style's binomial probabilities (steps, checks, specific,
// filler, verbose).
func (s style) probs() [5]float64 {
	return [5]float64{
		clamp(pSteps+s.dS/nSteps, 0, 1), clamp(pChecks+s.dC/nChecks, 0, 1), clamp(pSpecific+s.dD/nSpecific, 0, 1),
		clamp(pFiller+s.dF/nFiller, 0, 1), clamp(pVerbose+s.dV/nVerbose, 0, 1),
	}
}

func binom(r *rand.Rand, n int, p float64) int {
	k := 0
	for i := 0; i < n; i++ {
		if r.Float64() < p {
			k++
		}
	}
	return k
}

// drawContent draws an update's content in the evolver's style; the focus
// does not depend on the evolver (a preferred focus would help it on one
// benchmark and hurt it on another).
func drawContent(r *rand.Rand, evolver string) content {
	p := evolverStyle[evolver].probs()
	return content{
		focus:    r.IntN(numFocus),
		steps:    1 + binom(r, nSteps, p[0]),
		checks:   binom(r, nChecks, p[1]),
		specific: binom(r, nSpecific, p[2]),
		filler:   binom(r, nFiller, p[3]),
		verbose:  binom(r, nVerbose, p[4]),
	}
}

// weights returns the linear weights of (steps, checks, specific, filler,
// verbose) for an agent.
func weights(am agentModel) [5]float64 {
	weak := max(0, weakSLR-am.slr) / (weakSLR - 0.25)
	return [5]float64{wSteps, wChecks, wSpecific, wFiller, wVerbose + wVerboseWeak*weak}
}

// rawQuality is the content's quality in its context, before standardising.
func rawQuality(c content, bm string, am agentModel) float64 {
	w := weights(am)
	return focusEffect[bm][c.focus] + w[0]*float64(c.steps) + w[1]*float64(c.checks) + w[2]*float64(c.specific) +
		w[3]*float64(c.filler) + w[4]*float64(c.verbose)
}

// qualityStats are the mean and standard deviation of rawQuality in a
// context over the content of all evolvers pooled (exact, from the binomial
// moments): the standardisation does not depend on the evolver.
type qualityStats struct{ mean, sd float64 }

var (
	statsMu    sync.Mutex
	statsCache = map[[2]string]qualityStats{}
)

func contextStats(bm, agent string) qualityStats {
	key := [2]string{bm, agent}
	statsMu.Lock()
	defer statsMu.Unlock()
	if s, ok := statsCache[key]; ok {
		return s
	}
	am := agents[agent]
	w := weights(am)
	n := [5]float64{nSteps, nChecks, nSpecific, nFiller, nVerbose}
	var fm, fm2 float64
	for _, e := range focusEffect[bm] {
		fm += e / numFocus
		fm2 += e * e / numFocus
	}
	names := make([]string, 0, len(evolverStyle))
	for e := range evolverStyle {
		names = append(names, e)
	}
	sort.Strings(names)
	var m1, m2 float64 // pooled first and second moments
	for _, e := range names {
		p := evolverStyle[e].probs()
		mean, v := fm+w[0], fm2-fm*fm // steps = 1 + Bin
		for i := range p {
			mean += w[i] * n[i] * p[i]
			v += w[i] * w[i] * n[i] * p[i] * (1 - p[i])
		}
		m1 += mean / float64(len(names))
		m2 += (v + mean*mean) / float64(len(names))
	}
	s := qualityStats{mean: m1, sd: math.Sqrt(m2 - m1*m1)}
	statsCache[key] = s
	return s
}

// quality is the content's standardised latent quality in its context:
// mean 0 and sd 1 over the evolvers' pooled content.
func quality(c content, bm, agent string) float64 {
	s := contextStats(bm, agent)
	return (rawQuality(c, bm, agents[agent]) - s.mean) / s.sd
}

// updateDraw is one update's latent draw: the content that sets its effect,
// the content its text shows, its quality and its relative effect.
type updateDraw struct {
	// truth sets the effect; shown is rendered as text (truth unless the
	// text signal is off).
	truth, shown content
	// quality is truth's standardised quality in the context.
	quality float64
	// mult is the update's increment over the mean increment:
	// 1 + contentSD·quality + noiseSD·N(0,1).
	mult float64
}

// drawUpdate draws an update's content and effect from streams of its own
// (so the text and the effect never consume the tasks' draws).
func drawUpdate(seed int64, cellID string, cycle int, bm, agent, evolver string, textSignal bool, share float64) updateDraw {
	contentSD, noiseSD := spreads(share)
	cyc := strconv.Itoa(cycle)
	r := rng(seed, "content", cellID, cyc)
	d := updateDraw{truth: drawContent(r, evolver)}
	d.quality = quality(d.truth, bm, agent)
	d.mult = 1 + contentSD*d.quality + noiseSD*r.NormFloat64()
	d.shown = d.truth
	if !textSignal {
		d.shown = drawContent(rng(seed, "control", cellID, cyc), evolver)
	}
	return d
}
