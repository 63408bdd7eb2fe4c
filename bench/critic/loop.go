package critic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/harnessflow/harnessflow/processors/score"
	"github.com/harnessflow/harnessflow/producers/sim"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/trainer"
	"github.com/harnessflow/harnessflow/trainer/backend"
	"github.com/harnessflow/harnessflow/trainer/eval"
)

// The closed loop (issue 27, item 5): after each round of a held-out cell
// the evolver writes K candidate updates from the same before-state
// (sim.Candidates), the critic scores each (its predicted mean effect) and
// the one it ranks first is applied. The figure is the applied update's
// realised lift minus a random pick's (the candidates' mean lift), averaged
// over the cell's rounds, then over cells with a bootstrap interval; the
// oracle that picks by the content's latent quality (the part of the lift
// that text can show) is the ceiling. Random is the only trivial predictor
// that applies: the baselines of the offline evaluation (median, cell mean,
// evidence and context regressions) give every candidate of a round the
// same score.

// Goals of the closed loop (reported, never enforced), as shares of what
// the oracle that picks by the content's latent quality reaches on the
// same candidates (issue 36).
const (
	GoalLoopGainPP = 2.0  // picked − random ≥ 2 pp
	GoalLoopP      = 0.05 // with p < 0.05
	GoalLoopCells  = 200  // over ≥ 200 cells
	// GoalBestShare: the best-of-K gain ≥ this share of the oracle's.
	GoalBestShare = 0.75
	// GoalRewordShare: the same for candidates in the held-out wording.
	GoalRewordShare = 0.40
	// GoalPairShare: within-round pairwise accuracy ≥ 0.5 + this share of
	// (the oracle's − 0.5).
	GoalPairShare = 0.7
	// GoalControlPair: the control's pairwise accuracy stays ≤ this.
	GoalControlPair = 0.51
)

// LoopConfig configures RunLoop. Zero fields take the defaults.
type LoopConfig struct {
	// Config holds the campaigns, split, model and training settings of
	// the offline run; Epochs are the passes over the rows seen so far at
	// each stage.
	Config
	// K is the number of candidates per (cell, round). Default: 5.
	K int
	// Stages is the number of training stages: the training groups are fed
	// in Stages chunks of whole groups, and the loop is measured after
	// each. Default: 4.
	Stages int
}

func (c *LoopConfig) setDefaults() {
	c.Config.setDefaults()
	if c.K == 0 {
		c.K = 5
	}
	if c.Stages == 0 {
		c.Stages = 4
	}
}

// Validate reports every invalid field (after defaults), joined.
func (c *LoopConfig) Validate() error {
	errs := []error{c.Config.Validate()}
	if c.K < 2 {
		errs = append(errs, fmt.Errorf("%w: %d candidates: want ≥ 2", ErrConfig, c.K))
	}
	if c.Stages < 1 {
		errs = append(errs, fmt.Errorf("%w: %d stages: want ≥ 1", ErrConfig, c.Stages))
	}
	return errors.Join(errs...)
}

// LoopPoint is the loop measured after one training stage. Lifts are in
// percentage points of success probability.
type LoopPoint struct {
	// SamplesTrained is the training rows seen so far (each trained
	// Epochs times at its stage and again at every later stage).
	SamplesTrained int
	// Cells and Rounds count the held-out cells and their rounds.
	Cells, Rounds int
	// Picked and Random are the mean realised lift of the critic's pick
	// and of a random pick; Gain = Picked − Random per cell, averaged over
	// cells, with its bootstrap interval over cells and the two-sided p of
	// a normal test of its mean.
	Picked, Random float64
	Gain           eval.Interval
	P              float64
	// Reworded is Gain when the candidates are written with the
	// simulator's held-out wording (phrasings never trained on).
	Reworded eval.Interval
	// Oracle is the gain of picking by latent quality (the ceiling).
	Oracle float64
	// Pairs is the within-round pairwise accuracy against the true lift:
	// over the pairs of candidates of one round whose lifts differ, the
	// share the critic orders as their lifts are (a tie in its scores
	// counts one half), averaged per cell, with its bootstrap interval
	// over cells; OraclePairs is the oracle's (ordering by latent
	// quality), the ceiling, since the rest of a lift is round noise no
	// text shows.
	Pairs       eval.Interval
	OraclePairs float64
	// Elapsed is the wall time since the arm began.
	Elapsed time.Duration
}

// GoalMet says whether p meets the closed loop's goal.
func (p LoopPoint) GoalMet() bool {
	return p.Gain.Point >= GoalLoopGainPP && p.P < GoalLoopP && p.Cells >= GoalLoopCells
}

// LoopArm is the closed loop of one text-signal setting.
type LoopArm struct {
	TextSignal bool
	// Train and Heldout are the group split of the derived samples.
	Train, Heldout []*schemas.LabeledSample
	Points         []LoopPoint
}

// round is one held-out (cell, round): its candidates and the critic's
// inputs for them, in the campaign's and in the held-out wording.
type round struct {
	cell               string
	lift, quality      []float64
	inputs, rewordings []*trainer.Input
}

// RunLoop runs the closed loop for every arm of cfg, writing progress and
// each stage's line to out.
func RunLoop(ctx context.Context, cfg LoopConfig, out io.Writer) ([]*LoopArm, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var arms []*LoopArm
	for _, text := range cfg.Arms {
		fmt.Fprintf(out, "== closed loop, text signal %s: %d campaigns (seeds %d..%d), scale %d, %d candidates per round\n",
			onOff(text), len(cfg.Seeds), cfg.Seeds[0], cfg.Seeds[len(cfg.Seeds)-1], cfg.Scale, cfg.K)
		a, err := runLoopArm(ctx, cfg, text, out)
		if err != nil {
			return arms, fmt.Errorf("text signal %s: %w", onOff(text), err)
		}
		writeLoopSummary(out, a)
		arms = append(arms, a)
	}
	return arms, nil
}

func runLoopArm(ctx context.Context, cfg LoopConfig, text bool, out io.Writer) (*LoopArm, error) {
	t0 := time.Now()
	sims := cfg.sims(text)
	all, err := derive(ctx, sims, out)
	if err != nil {
		return nil, err
	}
	samples, _ := eval.Clean(all)
	key := cfg.Eval.Key
	if key == "" {
		key = eval.DefaultGroupKey
	}
	a := &LoopArm{TextSignal: text}
	if a.Train, a.Heldout, err = eval.Split(samples, key, cfg.HeldoutFraction, cfg.SplitSeed); err != nil {
		return nil, err
	}
	if len(a.Train) == 0 || len(a.Heldout) == 0 {
		return nil, fmt.Errorf("%w: %d training and %d held-out rows", ErrNoSamples, len(a.Train), len(a.Heldout))
	}
	rounds, err := loopRounds(sims, a.Heldout, cfg.K)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "  %d training rows; %d held-out rounds of %d cells, %d candidates each (%s)\n",
		len(a.Train), len(rounds), countCells(rounds), cfg.K, time.Since(t0).Round(time.Millisecond))

	m, err := trainer.NewModel(backend.NewCPU(), cfg.Model)
	if err != nil {
		return nil, err
	}
	stages := stageEnds(a.Train, key, cfg.Stages)
	rng := rand.New(rand.NewPCG(cfg.Model.Seed, 0x6c6f6f70))
	window := toExamples(a.Train)
	for s, end := range stages {
		seen := window[:end]
		for ep := 0; ep < cfg.Epochs; ep++ {
			perm := byRounds(rng, seen)
			batch := make([]trainer.Example, 0, cfg.BatchSize)
			for lo := 0; lo < len(perm); lo += cfg.BatchSize {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				batch = batch[:0]
				for _, i := range perm[lo:min(lo+cfg.BatchSize, len(perm))] {
					batch = append(batch, seen[i])
				}
				if _, err := m.TrainStep(batch); err != nil {
					return nil, fmt.Errorf("stage %d: %w", s+1, err)
				}
			}
			for i := range seen { // later epochs and stages replay them
				seen[i].Replay = true
			}
		}
		p := measureLoop(modelScores(m, cfg.BatchSize), rounds, cfg.Eval.Resamples, cfg.Eval.Seed)
		p.SamplesTrained, p.Elapsed = end, time.Since(t0)
		a.Points = append(a.Points, p)
		fmt.Fprintf(out, "  stage %d/%d: %6d samples trained: picked − random %+.2f pp [%+.2f, %+.2f] (p %.3g) over %d cells; reworded %+.2f pp [%+.2f, %+.2f]; oracle %+.2f pp; pairwise %.3f [%.3f, %.3f], oracle %.3f (%s)\n",
			s+1, len(stages), end, p.Gain.Point, p.Gain.Lo, p.Gain.Hi, p.P, p.Cells, p.Reworded.Point, p.Reworded.Lo, p.Reworded.Hi,
			p.Oracle, p.Pairs.Point, p.Pairs.Lo, p.Pairs.Hi, p.OraclePairs, p.Elapsed.Round(time.Millisecond))
	}
	return a, nil
}

// loopRounds draws the candidates of every held-out sample's (cell, round)
// with the campaign's settings, and once more in the held-out wording.
func loopRounds(sims []sim.Config, heldout []*schemas.LabeledSample, k int) ([]round, error) {
	bySeed := map[int64]sim.Config{}
	for _, c := range sims {
		bySeed[c.Seed] = c
	}
	type key struct {
		cell  string
		cycle int32
	}
	done := map[key]bool{}
	var out []round
	for _, s := range heldout {
		if done[key{s.CellID, s.Cycle}] {
			continue
		}
		done[key{s.CellID, s.Cycle}] = true
		cfg, ok := bySeed[int64(s.Seed)]
		if !ok {
			return nil, fmt.Errorf("%w: sample %s has seed %d, not one of the campaigns'", ErrNoSamples, s.SampleID, s.Seed)
		}
		cs, err := sim.Candidates(cfg, s.Benchmark, s.AgentModel, s.EvolverModel, int(s.Cycle), k)
		if err != nil {
			return nil, fmt.Errorf("candidates of %s round %d: %w", s.CellID, s.Cycle, err)
		}
		rw := cfg
		rw.HeldOutWording = true
		rcs, err := sim.Candidates(rw, s.Benchmark, s.AgentModel, s.EvolverModel, int(s.Cycle), k)
		if err != nil {
			return nil, err
		}
		r := round{cell: s.CellID}
		for i, c := range cs {
			r.lift = append(r.lift, 100*c.Lift)
			r.quality = append(r.quality, c.Quality)
			r.inputs = append(r.inputs, candidateInput(s, c))
			r.rewordings = append(r.rewordings, candidateInput(s, rcs[i]))
		}
		out = append(out, r)
	}
	return out, nil
}

// candidateInput is what the critic reads of candidate c applied where s's
// update was: the evidence s's evolver saw and the candidate's artifact,
// rendered as the processors render an update.
func candidateInput(s *schemas.LabeledSample, c sim.Candidate) *trainer.Input {
	text, kind := score.UpdateText([]schemas.Artifact{c.Artifact})
	return &trainer.Input{Update: text, Query: s.Query, Kind: kind, Evolver: s.EvolverModel, Agent: s.AgentModel, Benchmark: s.Benchmark}
}

func countCells(rs []round) int {
	cells := map[string]bool{}
	for _, r := range rs {
		cells[r.cell] = true
	}
	return len(cells)
}

// stageEnds cuts the training rows (in derive's order: by campaign and
// seed) into n stages of whole groups and returns each stage's end.
func stageEnds(train []*schemas.LabeledSample, key eval.GroupKey, n int) []int {
	var bounds []int // end of each group
	for i := 1; i <= len(train); i++ {
		if i == len(train) || key.Of(train[i]) != key.Of(train[i-1]) {
			bounds = append(bounds, i)
		}
	}
	n = min(n, len(bounds))
	ends := make([]int, 0, n)
	for s := 1; s <= n; s++ {
		ends = append(ends, bounds[s*len(bounds)/n-1])
	}
	return ends
}

// modelScores scores inputs by m's predicted mean effect, in batches.
func modelScores(m *trainer.Model, batch int) func([]*trainer.Input) []float64 {
	return func(all []*trainer.Input) []float64 {
		means := make([]float64, 0, len(all))
		for lo := 0; lo < len(all); lo += batch {
			for _, p := range m.Predict(all[lo:min(lo+batch, len(all))]) {
				means = append(means, p.Mean)
			}
		}
		return means
	}
}

// measureLoop scores every round's candidates with score (higher is
// picked; the first of equals) and returns the loop's figures
// (SamplesTrained and Elapsed unset).
func measureLoop(score func([]*trainer.Input) []float64, rounds []round, resamples int, seed uint64) LoopPoint {
	if resamples <= 0 {
		resamples = 1000
	}
	pick := func(ins func(round) []*trainer.Input) (gain, pairs map[string][]float64, picked, random float64) {
		var all []*trainer.Input
		for _, r := range rounds {
			all = append(all, ins(r)...)
		}
		means := score(all)
		gain, pairs = map[string][]float64{}, map[string][]float64{}
		at := 0
		for _, r := range rounds {
			m := means[at : at+len(r.lift)]
			best := argmaxF(m)
			at += len(r.lift)
			mean := meanF(r.lift)
			gain[r.cell] = append(gain[r.cell], r.lift[best]-mean)
			if acc, ok := pairAccuracy(m, r.lift); ok {
				pairs[r.cell] = append(pairs[r.cell], acc)
			}
			picked += r.lift[best] / float64(len(rounds))
			random += mean / float64(len(rounds))
		}
		return gain, pairs, picked, random
	}
	g, pairs, picked, random := pick(func(r round) []*trainer.Input { return r.inputs })
	rg, _, _, _ := pick(func(r round) []*trainer.Input { return r.rewordings })
	var oracle float64
	oraclePairs := map[string][]float64{}
	for _, r := range rounds {
		oracle += (r.lift[argmaxF(r.quality)] - meanF(r.lift)) / float64(len(rounds))
		if acc, ok := pairAccuracy(r.quality, r.lift); ok {
			oraclePairs[r.cell] = append(oraclePairs[r.cell], acc)
		}
	}
	cells := cellMeans(g)
	p := LoopPoint{Cells: len(cells), Rounds: len(rounds), Picked: picked, Random: random, Oracle: oracle,
		Gain: bootstrapMean(cells, resamples, seed), Reworded: bootstrapMean(cellMeans(rg), resamples, seed),
		Pairs: bootstrapMean(cellMeans(pairs), resamples, seed), OraclePairs: meanF(cellMeans(oraclePairs))}
	p.P = normalP(cells)
	return p
}

// pairAccuracy is the within-round pairwise accuracy of score against
// lift in one round (eval.PairCounts); ok is false when no pair's lifts
// differ.
func pairAccuracy(score, lift []float64) (float64, bool) {
	right, n := eval.PairCounts(score, lift)
	if n == 0 {
		return 0, false
	}
	return right / n, true
}

// Goals reports p against the goals for an arm with text on or
// off: each goal's text and whether it holds.
func (p LoopPoint) Goals(text bool) []Goal {
	if !text {
		return []Goal{
			{fmt.Sprintf("no best-of-K gain (interval %+.2f..%+.2f pp includes 0 or lies below)", p.Gain.Lo, p.Gain.Hi), !(p.Gain.Lo > 0)},
			{fmt.Sprintf("pairwise accuracy %.3f ≤ %.2f", p.Pairs.Point, GoalControlPair), p.Pairs.Point <= GoalControlPair},
		}
	}
	pairGoal := 0.5 + GoalPairShare*(p.OraclePairs-0.5)
	return []Goal{
		{fmt.Sprintf("best-of-K gain %+.2f pp ≥ %.0f %% of the oracle's %+.2f pp (%.2f): %.0f %%", p.Gain.Point, 100*GoalBestShare, p.Oracle, GoalBestShare*p.Oracle, 100*share(p.Gain.Point, p.Oracle)),
			p.Gain.Point >= GoalBestShare*p.Oracle && p.Gain.Lo > 0},
		{fmt.Sprintf("reworded candidates %+.2f pp ≥ %.0f %% of the oracle's (%.2f): %.0f %%", p.Reworded.Point, 100*GoalRewordShare, GoalRewordShare*p.Oracle, 100*share(p.Reworded.Point, p.Oracle)),
			p.Reworded.Point >= GoalRewordShare*p.Oracle},
		{fmt.Sprintf("within-round pairwise accuracy %.3f [%.3f, %.3f] ≥ 0.5 + %.1f × (oracle %.3f − 0.5) = %.3f", p.Pairs.Point, p.Pairs.Lo, p.Pairs.Hi, GoalPairShare, p.OraclePairs, pairGoal),
			p.Pairs.Point >= pairGoal},
	}
}

// Goal is one goal's statement with its figures, and whether it holds.
type Goal struct {
	Text string
	Met  bool
}

// share is x / of (0 when of is 0).
func share(x, of float64) float64 {
	if of == 0 {
		return 0
	}
	return x / of
}

// writeGoals prints goals, one line each, prefixed with what.
func writeGoals(w io.Writer, what string, goals []Goal) {
	for _, g := range goals {
		fmt.Fprintf(w, "%s: %s: %s\n", what, g.Text, map[bool]string{true: "met", false: "NOT met"}[g.Met])
	}
}

// cellMeans returns the mean of each cell's rounds, in cell order.
func cellMeans(g map[string][]float64) []float64 {
	names := make([]string, 0, len(g))
	for c := range g {
		names = append(names, c)
	}
	sort.Strings(names)
	out := make([]float64, len(names))
	for i, c := range names {
		out[i] = meanF(g[c])
	}
	return out
}

// bootstrapMean is xs's mean with a 95 % percentile interval over
// resamples of xs.
func bootstrapMean(xs []float64, resamples int, seed uint64) eval.Interval {
	iv := eval.Interval{Point: meanF(xs), Lo: math.NaN(), Hi: math.NaN()}
	if len(xs) < 2 {
		return iv
	}
	r := rand.New(rand.NewPCG(seed, 0x626f6f74))
	draws := make([]float64, resamples)
	for b := range draws {
		var s float64
		for range xs {
			s += xs[r.IntN(len(xs))]
		}
		draws[b] = s / float64(len(xs))
	}
	sort.Float64s(draws)
	iv.Lo, iv.Hi = draws[int(0.025*float64(resamples-1))], draws[int(math.Ceil(0.975*float64(resamples-1)))]
	return iv
}

// normalP is the two-sided p of the mean of xs being 0 (normal
// approximation of the mean over cells).
func normalP(xs []float64) float64 {
	n := float64(len(xs))
	if n < 2 {
		return 1
	}
	m := meanF(xs)
	var ss float64
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	se := math.Sqrt(ss / (n - 1) / n)
	if se == 0 {
		if m == 0 {
			return 1
		}
		return 0
	}
	return math.Erfc(math.Abs(m/se) / math.Sqrt2)
}

func meanF(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func argmaxF(xs []float64) int {
	best := 0
	for i, x := range xs {
		if x > xs[best] {
			best = i
		}
	}
	return best
}

// writeLoopSummary prints the arm's last point against the goal.
func writeLoopSummary(w io.Writer, a *LoopArm) {
	if len(a.Points) == 0 {
		return
	}
	p := a.Points[len(a.Points)-1]
	fmt.Fprintf(w, "loop summary (text %s): after %d samples, picked %.2f pp vs random %.2f pp: gain %+.2f pp [%+.2f, %+.2f], p %.3g, %d cells; reworded candidates %+.2f pp; oracle ceiling %+.2f pp\n",
		onOff(a.TextSignal), p.SamplesTrained, p.Picked, p.Random, p.Gain.Point, p.Gain.Lo, p.Gain.Hi, p.P, p.Cells, p.Reworded.Point, p.Oracle)
	if a.TextSignal {
		fmt.Fprintf(w, "loop goal (text on): gain ≥ %.0f pp with p < %.2f over ≥ %d cells: %s\n", GoalLoopGainPP, GoalLoopP, GoalLoopCells,
			map[bool]string{true: "met", false: "NOT met"}[p.GoalMet()])
		writeGoals(w, "loop goal (text on)", p.Goals(true))
	} else {
		writeGoals(w, "loop goal (text off, the control)", p.Goals(false))
	}
	fmt.Fprintln(w)
}
