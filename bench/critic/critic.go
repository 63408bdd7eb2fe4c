// Package critic measures offline whether the trainer's critic learns from
// an update's content: it simulates campaigns with the simulator's text
// signal on and off (the control), derives labeled samples through an
// in-process processor, splits them by group (trainer/eval.Split), trains a
// fresh trainer.Model on the training side only, and scores it on the
// held-out groups against the five trivial baselines (trainer/eval).
// `harnessflow bench critic-offline` runs it.
package critic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/harnessflow/harnessflow/producers/sim"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/trainer"
	"github.com/harnessflow/harnessflow/trainer/backend"
	"github.com/harnessflow/harnessflow/trainer/eval"
)

// Goals of the issue, printed beside each run (never asserted): with the
// text signal on, model RMSE ≤ GoalRMSERatio × the best baseline's and
// Spearman ρ ≥ the best baseline's + GoalRhoGain with the interval of the
// difference excluding 0; with it off, no claimed gain.
const (
	GoalRMSERatio = 0.95
	GoalRhoGain   = 0.10
)

// Config sets up Run. Zero fields take the defaults.
type Config struct {
	// Campaign is the simulated campaign id (the same for both arms, so
	// their samples pair up). Default: "critic".
	Campaign string
	// Seeds are the simulated campaigns' seeds, one campaign each; each
	// (campaign, seed) is one group of the split. Default: 1..200.
	Seeds []int64
	// Scale is the tasks per cell (sim.Config.Scale). Default: 10 (two
	// rounds: one update per evolved cell, whose lift is the agent's whole
	// benefit, not a share of it).
	Scale int
	// SimBatchSize is the tasks per round (sim.Config.BatchSize). Default: 5.
	SimBatchSize int
	// Benchmarks, Agents and Evolvers restrict the simulated campaigns.
	// Default: the simulator's (nil).
	Benchmarks, Agents, Evolvers []string
	// HeldoutFraction is the fraction of groups held out. Default: 0.25.
	HeldoutFraction float64
	// SplitSeed seeds the group split. Default: 0.
	SplitSeed uint64
	// Epochs over the training side, each in a fresh shuffled order.
	// Default: 2 (5 overfits: bench/README.md).
	Epochs int
	// BatchSize is the training batch (the trainer's default). Default: 256.
	BatchSize int
	// Model configures the fresh model (trainer defaults for zero fields;
	// its Seed also seeds the shuffles). Default: trainer's defaults.
	Model trainer.ModelConfig
	// Eval configures the bootstrap. Default: eval's defaults (1000
	// resamples, 95 %, at least 10 held-out groups for a verdict).
	Eval eval.Config
	// Arms are the text-signal settings to run, in order. Default: on, off.
	Arms []bool
	// ContentShare is the simulator's share of an update's effect variance
	// set by its content (sim.Config.ContentShare). Default: the
	// simulator's.
	ContentShare float64
}

func (c *Config) setDefaults() {
	if c.Campaign == "" {
		c.Campaign = "critic"
	}
	if c.Seeds == nil {
		c.Seeds = seedRange(1, 200)
	}
	if c.Scale == 0 {
		c.Scale = 10
	}
	if c.SimBatchSize == 0 {
		c.SimBatchSize = 5
	}
	if c.HeldoutFraction == 0 {
		c.HeldoutFraction = 0.25
	}
	if c.Epochs == 0 {
		c.Epochs = 2
	}
	if c.BatchSize == 0 {
		c.BatchSize = 256
	}
	if c.Arms == nil {
		c.Arms = []bool{true, false}
	}
}

// seedRange is the seeds a..b.
func seedRange(a, b int64) []int64 {
	var out []int64
	for s := a; s <= b; s++ {
		out = append(out, s)
	}
	return out
}

// Validate reports every invalid field (after defaults), joined.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Seeds) == 0 {
		errs = append(errs, fmt.Errorf("%w: no seed", ErrConfig))
	}
	seen := map[int64]bool{}
	for _, s := range c.Seeds {
		if seen[s] {
			errs = append(errs, fmt.Errorf("%w: seed %d repeats", ErrConfig, s))
		}
		seen[s] = true
	}
	if !(c.HeldoutFraction > 0 && c.HeldoutFraction < 1) {
		errs = append(errs, fmt.Errorf("%w: held-out fraction %v: want (0, 1)", ErrConfig, c.HeldoutFraction))
	}
	if c.Epochs < 1 || c.BatchSize < 1 {
		errs = append(errs, fmt.Errorf("%w: epochs %d, batch size %d: want ≥ 1", ErrConfig, c.Epochs, c.BatchSize))
	}
	for _, sc := range c.sims(true) {
		if err := sc.Validate(); err != nil {
			errs = append(errs, err)
			break
		}
	}
	return errors.Join(errs...)
}

// sims are the simulator configurations of one arm.
func (c *Config) sims(text bool) []sim.Config {
	or := func(l, def []string) []string {
		if l == nil {
			return def
		}
		return l
	}
	out := make([]sim.Config, len(c.Seeds))
	for i, s := range c.Seeds {
		out[i] = sim.Config{Campaign: c.Campaign, Seed: s, Scale: c.Scale, BatchSize: c.SimBatchSize,
			Benchmarks: or(c.Benchmarks, sim.DefaultBenchmarks), Agents: or(c.Agents, sim.DefaultAgents),
			Evolvers: or(c.Evolvers, sim.DefaultEvolvers), TextSignal: sim.Bool(text), ContentShare: c.ContentShare}
	}
	return out
}

// Arm is the outcome of one text-signal setting.
type Arm struct {
	// TextSignal is the simulator's setting.
	TextSignal bool
	// Samples are the derived samples the trainer would train on
	// (eval.Clean), Dropped how many it would not.
	Samples []*schemas.LabeledSample
	Dropped int
	// Train and Heldout are the group split of Samples.
	Train, Heldout []*schemas.LabeledSample
	// LossBefore and LossAfter are the mean training loss over the training
	// side before the first step and after the last epoch; EpochLoss the
	// mean of each epoch's step losses (measured before each step).
	LossBefore, LossAfter trainer.Losses
	EpochLoss             []float64
	// Steps is the number of optimizer steps.
	Steps int
	// Report is the model against the baselines on the held-out rows.
	Report *eval.Report
	// Ceiling is what oracles that know the simulator's truth reach on the
	// same rows.
	Ceiling *Ceiling
	// Derive, TrainTime and EvalTime are the phases' wall times.
	Derive, TrainTime, EvalTime time.Duration
}

// Summary is the one-line comparison of an arm's model with the best
// baselines on RMSE and Spearman ρ.
type Summary struct {
	RMSE, BestRMSE          float64
	RMSEBaseline            string
	Rho, BestRho            float64
	RhoBaseline             string
	RhoDiff                 eval.Interval
	RMSEDiff                eval.Interval
	RhoVerdict, RMSEVerdict string
	Verdict                 string
	// GoalMet says whether the text-on goal holds for this arm's figures.
	GoalMet bool
}

// Summarize extracts a's Summary.
func (a *Arm) Summarize() Summary { return summarize(a.Report) }

// summarize compares r's model with its best baselines on RMSE and ρ.
func summarize(r *eval.Report) Summary {
	s := Summary{RMSE: r.Model.RMSE.Point, Rho: r.Model.Spearman.Point, Verdict: r.Verdict}
	row := func(name string) eval.Row {
		for _, b := range r.Baselines {
			if b.Name == name {
				return b
			}
		}
		return eval.Row{}
	}
	for _, c := range r.Comparisons {
		switch c.Metric {
		case eval.MetricRMSE:
			s.RMSEBaseline, s.BestRMSE, s.RMSEDiff, s.RMSEVerdict = c.Baseline, row(c.Baseline).RMSE.Point, c.Diff, c.Verdict
		case eval.MetricSpearman:
			s.RhoBaseline, s.BestRho, s.RhoDiff, s.RhoVerdict = c.Baseline, row(c.Baseline).Spearman.Point, c.Diff, c.Verdict
		}
	}
	s.GoalMet = s.RMSE <= GoalRMSERatio*s.BestRMSE && s.Rho >= s.BestRho+GoalRhoGain &&
		s.RhoDiff.Lo > 0 && s.RMSEDiff.Hi < 0
	return s
}

// Run runs every arm of cfg, writing progress lines and each arm's report
// to out. It returns the arms in cfg.Arms order.
func Run(ctx context.Context, cfg Config, out io.Writer) ([]*Arm, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var arms []*Arm
	for _, text := range cfg.Arms {
		fmt.Fprintf(out, "== text signal %s: %d campaigns (seeds %d..%d), scale %d\n", onOff(text), len(cfg.Seeds), cfg.Seeds[0], cfg.Seeds[len(cfg.Seeds)-1], cfg.Scale)
		a, err := runArm(ctx, cfg, text, out)
		if err != nil {
			return arms, fmt.Errorf("text signal %s: %w", onOff(text), err)
		}
		if err := a.Report.WriteTable(out); err != nil {
			return arms, err
		}
		writeSummary(out, a)
		if a.Ceiling != nil {
			writeCeiling(out, a.Ceiling)
			writeShare(out, a)
		}
		fmt.Fprintln(out)
		arms = append(arms, a)
	}
	return arms, nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// writeSummary prints a's one-line summary and the goal it is held to.
func writeSummary(w io.Writer, a *Arm) {
	s := a.Summarize()
	fmt.Fprintf(w, "summary (text %s): model RMSE %.4f / best baseline %.4f (%s) = %.3f; ρ %.4f − %.4f (%s) = %+.4f [%+.4f, %+.4f]; verdict: %s\n",
		onOff(a.TextSignal), s.RMSE, s.BestRMSE, s.RMSEBaseline, s.RMSE/s.BestRMSE, s.Rho, s.BestRho, s.RhoBaseline,
		s.RhoDiff.Point, s.RhoDiff.Lo, s.RhoDiff.Hi, s.Verdict)
	if a.TextSignal {
		fmt.Fprintf(w, "goal (text on): RMSE ≤ %.2f × best and ρ ≥ best + %.2f, intervals excluding 0: %s\n",
			GoalRMSERatio, GoalRhoGain, map[bool]string{true: "met", false: "NOT met"}[s.GoalMet])
	} else {
		claimed := s.Verdict == eval.VerdictBeats || s.RhoVerdict == eval.VerdictBeats || s.RMSEVerdict == eval.VerdictBeats
		fmt.Fprintf(w, "goal (text off, the control): no claimed gain on RMSE or ρ: %s\n",
			map[bool]string{true: "met", false: "NOT met (the control shows a gain)"}[!claimed])
	}
}

// Goals of issue 36 against the content oracle (the context regression
// plus the update's true content lift, what any reader of its text could
// know): the model captures at least GoalOracleShare of the oracle's MSE
// reduction and of its ρ gain over the context regression, with the
// intervals of model − context regression excluding 0.
const GoalOracleShare = 0.5

// OracleShare is the share of the content oracle's gain over the context
// regression that the model captures, on MSE and on ρ.
type OracleShare struct {
	MSE, Rho float64
	// Excludes0 says whether the intervals of model − context regression
	// (RMSE and ρ) exclude 0 on the model's side.
	Excludes0 bool
}

// Share computes a's OracleShare (a needs its Ceiling).
func (a *Arm) Share() OracleShare {
	s := a.Summarize()
	c := summarize(a.Ceiling.Content)
	var sh OracleShare
	if s.RMSEBaseline != eval.BaselineContext || s.RhoBaseline != eval.BaselineContext {
		return sh
	}
	base := s.BestRMSE * s.BestRMSE
	sh.MSE = share(base-s.RMSE*s.RMSE, base-c.RMSE*c.RMSE)
	sh.Rho = share(s.Rho-s.BestRho, c.Rho-c.BestRho)
	sh.Excludes0 = s.RMSEDiff.Hi < 0 && s.RhoDiff.Lo > 0
	return sh
}

// writeShare prints the model's share of the content oracle's gain and
// the goal.
func writeShare(w io.Writer, a *Arm) {
	sh := a.Share()
	met := sh.MSE >= GoalOracleShare && sh.Rho >= GoalOracleShare && sh.Excludes0
	fmt.Fprintf(w, "goal (text on, against what the text can show): the model captures %.0f %% of the content oracle's MSE reduction over the context regression and %.0f %% of its ρ gain (both ≥ %.0f %%), intervals of model − context regression excluding 0: %v: %s\n",
		100*sh.MSE, 100*sh.Rho, 100*GoalOracleShare, sh.Excludes0, map[bool]string{true: "met", false: "NOT met"}[met])
}

// runArm derives, splits, trains and evaluates one arm.
func runArm(ctx context.Context, cfg Config, text bool, out io.Writer) (*Arm, error) {
	a := &Arm{TextSignal: text}
	t0 := time.Now()
	all, err := derive(ctx, cfg.sims(text), out)
	if err != nil {
		return nil, err
	}
	a.Derive = time.Since(t0)
	a.Samples, a.Dropped = eval.Clean(all)
	key := cfg.Eval.Key
	if key == "" {
		key = eval.DefaultGroupKey
	}
	a.Train, a.Heldout, err = eval.Split(a.Samples, key, cfg.HeldoutFraction, cfg.SplitSeed)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "  %d samples (%d dropped) in %s; split by %s: %d training rows, %d held-out rows\n",
		len(a.Samples), a.Dropped, a.Derive.Round(time.Millisecond), key, len(a.Train), len(a.Heldout))
	if len(a.Train) == 0 || len(a.Heldout) == 0 {
		return nil, fmt.Errorf("%w: %d training and %d held-out rows", ErrNoSamples, len(a.Train), len(a.Heldout))
	}

	t1 := time.Now()
	m, err := trainer.NewModel(backend.NewCPU(), cfg.Model)
	if err != nil {
		return nil, err
	}
	train := toExamples(a.Train)
	a.LossBefore = meanLoss(m, train, cfg.BatchSize)
	fmt.Fprintf(out, "  training: loss %.4f before (nll %.4f, ce %.4f)\n", a.LossBefore.Total, a.LossBefore.NLL, a.LossBefore.CE)
	rng := rand.New(rand.NewPCG(cfg.Model.Seed, 0x637269746963))
	batch := make([]trainer.Example, 0, cfg.BatchSize)
	for ep := 1; ep <= cfg.Epochs; ep++ {
		order := byRounds(rng, train)
		var sum float64
		var n int
		for lo := 0; lo < len(order); lo += cfg.BatchSize {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			batch = batch[:0]
			for _, i := range order[lo:min(lo+cfg.BatchSize, len(order))] {
				batch = append(batch, train[i])
			}
			l, err := m.TrainStep(batch)
			if err != nil {
				return nil, fmt.Errorf("epoch %d: %w", ep, err)
			}
			sum += l.Total
			n++
			a.Steps++
		}
		for i := range train { // later epochs replay them
			train[i].Replay = true
		}
		a.EpochLoss = append(a.EpochLoss, sum/float64(n))
		fmt.Fprintf(out, "  epoch %d/%d: mean step loss %.4f (%d steps, %s)\n", ep, cfg.Epochs, sum/float64(n), a.Steps, time.Since(t1).Round(time.Millisecond))
	}
	a.LossAfter = meanLoss(m, train, cfg.BatchSize)
	a.TrainTime = time.Since(t1)
	fmt.Fprintf(out, "  training: loss %.4f after (nll %.4f, ce %.4f), %s\n", a.LossAfter.Total, a.LossAfter.NLL, a.LossAfter.CE, a.TrainTime.Round(time.Millisecond))

	t2 := time.Now()
	bs, err := eval.Baselines(a.Train, a.Heldout)
	if err != nil {
		return nil, err
	}
	model := eval.Predictions{Name: "model", Preds: eval.ModelPredictions([]*trainer.Model{m}, a.Heldout, cfg.BatchSize), Effect: true, Label: true}
	ec := cfg.Eval
	ec.Key = key
	a.Report, err = eval.Evaluate(ec, a.Heldout, model, bs)
	if err != nil {
		return nil, err
	}
	if text { // with the text off, no reader of the text knows the content
		if a.Ceiling, err = ceiling(cfg, a, ec); err != nil {
			return nil, fmt.Errorf("ceiling: %w", err)
		}
	}
	a.EvalTime = time.Since(t2)
	return a, nil
}

// byRounds returns the indices of exs in a random order that keeps each
// round's examples (Example.Round) together, so that a batch holds whole
// rounds and the loss's within-round term sees every candidate of one.
func byRounds(rng *rand.Rand, exs []trainer.Example) []int {
	at := map[string]int{}
	var rounds [][]int
	for i := range exs {
		k, ok := at[exs[i].Round]
		if !ok || exs[i].Round == "" {
			k = len(rounds)
			at[exs[i].Round] = k
			rounds = append(rounds, nil)
		}
		rounds[k] = append(rounds[k], i)
	}
	rng.Shuffle(len(rounds), func(i, j int) { rounds[i], rounds[j] = rounds[j], rounds[i] })
	out := make([]int, 0, len(exs))
	for _, r := range rounds {
		out = append(out, r...)
	}
	return out
}

// toExamples maps samples to training examples as the trainer does
// (trainer.ExampleOf, precision-weighted). The samples must be clean
// (eval.Clean), so every label is known.
func toExamples(ss []*schemas.LabeledSample) []trainer.Example {
	out := make([]trainer.Example, len(ss))
	for i, s := range ss {
		out[i] = trainer.ExampleOf(s)
	}
	return out
}

// meanLoss is m's loss over exs, in batches, weighted by batch size.
func meanLoss(m *trainer.Model, exs []trainer.Example, batch int) trainer.Losses {
	var l trainer.Losses
	for lo := 0; lo < len(exs); lo += batch {
		b := exs[lo:min(lo+batch, len(exs))]
		bl := m.Loss(b)
		w := float64(len(b)) / float64(len(exs))
		l.Total += bl.Total * w
		l.NLL += bl.NLL * w
		l.CE += bl.CE * w
	}
	return l
}
