package sim

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/harnessflow/harnessflow/schemas"
)

// Candidate is one update an evolver could write after a round of a cell,
// drawn like the update the campaign writes (content in the evolver's
// style, its latent quality in the cell's context, round noise) from
// streams of its own, so that a critic can be asked to choose among
// several before the choice is applied. Its effect is known exactly.
type Candidate struct {
	// Artifact is the skill as the evolver would write it: its text shows
	// the content that sets Lift when the text signal is on, and an
	// independent draw of content when it is off (the control).
	Artifact schemas.Artifact
	// Quality is the content's standardised latent quality in the context
	// (mean 0, sd 1 over the evolvers' pooled content): the part of Lift
	// the text can show.
	Quality float64
	// Lift is the update's true increment of the success probability of an
	// attempt that loads the harness's skills: the cell's mean increment
	// times 1 + contentSD·Quality + noiseSD·N(0,1), as the campaign's own
	// updates add to the harness gain.
	Lift float64
}

// meanIncrement is the mean increment of an update in an evolved cell of
// (benchmark, agent): the agent's benefit on the benchmark spread over the
// cell's updates (0 without updates).
func meanIncrement(cfg Config, bm, agent string) float64 {
	rounds := cfg.Rounds()
	if rounds < 2 {
		return 0
	}
	return agents[agent].benefit * benchmarkBenefit[bm] / float64(rounds-1)
}

// Candidates draws k candidate updates for the evolved cell of (benchmark,
// agent, evolver) after round cycle of cfg's campaign. They are the same
// for the same arguments, differ from each other and from the update the
// campaign itself writes (their streams are keyed by "candidate" and the
// index), and keep the campaign's text-signal and wording settings. The
// skill is the one the cell's update of that round would add or revise.
func Candidates(cfg Config, bm, agent, evolver string, cycle, k int) ([]Candidate, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if _, ok := agents[agent]; !ok {
		return nil, fmt.Errorf("%w: agent %q", ErrUnknownModel, agent)
	}
	if _, ok := evolverStyle[evolver]; !ok {
		return nil, fmt.Errorf("%w: evolver %q", ErrUnknownModel, evolver)
	}
	if _, ok := skillPools[bm]; !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownBenchmark, bm)
	}
	if rounds := cfg.Rounds(); cycle < 1 || cycle >= rounds {
		return nil, fmt.Errorf("%w: cycle %d: updates follow rounds 1..%d", ErrConfig, cycle, rounds-1)
	}
	if k < 1 {
		return nil, fmt.Errorf("%w: %d candidates: want ≥ 1", ErrConfig, k)
	}
	cellID := cfg.CellID(bm, agent, evolver)
	meanInc := meanIncrement(cfg, bm, agent)
	contentSD, noiseSD := spreads(cfg.ContentShare)
	pool := skillPools[bm]
	spec, op := pool[(cycle-1)%len(pool)], schemas.OpAdd
	if cycle > len(pool) {
		op = schemas.OpModify
	}
	cyc := strconv.Itoa(cycle)
	out := make([]Candidate, k)
	for i := range out {
		idx := strconv.Itoa(i)
		r := rng(cfg.Seed, "candidate", cellID, cyc, idx)
		truth := drawContent(r, evolver)
		q := quality(truth, bm, agent)
		mult := 1 + contentSD*q + noiseSD*r.NormFloat64()
		shown := truth
		if !cfg.textSignal() {
			shown = drawContent(rng(cfg.Seed, "candidate-control", cellID, cyc, idx), evolver)
		}
		md := candidateMD(spec, shown, cfg, bm, evolver, cellID, cycle, i)
		out[i] = Candidate{Artifact: artifact(schemas.KindSkill, spec.name, op, md), Quality: q, Lift: meanInc * mult}
	}
	return out, nil
}

// candidateMD renders candidate i's SKILL.md as skillMD renders the
// campaign's, with a wording stream of its own and no round pitfalls (the
// candidates of one round would all share them).
func candidateMD(s skillSpec, c content, cfg Config, bm, evolver, cellID string, cycle, i int) string {
	md := fmt.Sprintf("---\nname: %s\ndescription: %q\n---\n\n# %s\n\n%s\n\n", s.name, s.description,
		strings.ReplaceAll(s.name, "-", " "), s.description)
	md += body(rng(cfg.Seed, "candidate-wording", cellID, strconv.Itoa(cycle), strconv.Itoa(i)), c, bm, cfg.HeldOutWording)
	return md + fmt.Sprintf("\n<!-- candidate %d by %s after round %d of %s -->\n", i, evolver, cycle, cellID)
}

// UpdateTruth is the latent draw behind the update a campaign writes: what a
// bench may compare a critic with, never part of the stream.
type UpdateTruth struct {
	// Quality is the content's standardised latent quality in its context
	// (Candidate.Quality): the part of Lift the text shows when the text
	// signal is on.
	Quality float64
	// ContentLift is the lift Quality alone sets: meanIncrement ×
	// contentSD × Quality.
	ContentLift float64
	// Lift is the update's true increment of the success probability
	// (Candidate.Lift): meanIncrement × (1 + contentSD·Quality +
	// noiseSD·N(0,1)).
	Lift float64
}

// TruthOf returns the latent draw of the update cfg's campaign writes after
// round cycle of the evolved cell of (benchmark, agent, evolver): the same
// draw Run makes, so it matches the update on the stream.
func TruthOf(cfg Config, bm, agent, evolver string, cycle int) (UpdateTruth, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return UpdateTruth{}, err
	}
	if _, ok := agents[agent]; !ok {
		return UpdateTruth{}, fmt.Errorf("%w: agent %q", ErrUnknownModel, agent)
	}
	if _, ok := evolverStyle[evolver]; !ok {
		return UpdateTruth{}, fmt.Errorf("%w: evolver %q", ErrUnknownModel, evolver)
	}
	if _, ok := skillPools[bm]; !ok {
		return UpdateTruth{}, fmt.Errorf("%w: %q", ErrUnknownBenchmark, bm)
	}
	if rounds := cfg.Rounds(); cycle < 1 || cycle >= rounds {
		return UpdateTruth{}, fmt.Errorf("%w: cycle %d: updates follow rounds 1..%d", ErrConfig, cycle, rounds-1)
	}
	d := drawUpdate(cfg.Seed, cfg.CellID(bm, agent, evolver), cycle, bm, agent, evolver, cfg.textSignal(), cfg.ContentShare)
	inc := meanIncrement(cfg, bm, agent)
	contentSD, _ := spreads(cfg.ContentShare)
	return UpdateTruth{Quality: d.quality, ContentLift: inc * contentSD * d.quality, Lift: inc * d.mult}, nil
}
