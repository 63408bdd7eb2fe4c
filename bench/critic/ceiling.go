package critic

import (
	"fmt"
	"io"

	"github.com/harnessflow/harnessflow/producers/sim"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/trainer/eval"
)

// Ceiling is what an oracle reaches on an arm's held-out rows: the context
// regression (the strongest baseline a model can match without reading the
// update) plus β × a truth only the simulator knows, β fitted by least
// squares on the training rows' residuals. Content adds the update's true
// content lift (sim.UpdateTruth.ContentLift: the most any reader of the
// update's text could know); Lift adds its whole true lift, the part no
// text shows included. No predictor of the measured effect does better
// than these by much, so they say which goals these rows allow: what is
// left is the rounds' measurement noise.
type Ceiling struct {
	Content, Lift *eval.Report
	// BetaContent and BetaLift are the fitted coefficients.
	BetaContent, BetaLift float64
}

// ceiling computes a's Ceiling. The samples must come from cfg's
// campaigns with the arm's text setting (their truth is drawn again).
func ceiling(cfg Config, a *Arm, ec eval.Config) (*Ceiling, error) {
	sims := map[int32]sim.Config{}
	for _, sc := range cfg.sims(a.TextSignal) {
		sims[int32(sc.Seed)] = sc
	}
	truth := func(rows []*schemas.LabeledSample) (content, lift []float64, err error) {
		content, lift = make([]float64, len(rows)), make([]float64, len(rows))
		for i, s := range rows {
			sc, ok := sims[s.Seed]
			if !ok || s.CampaignID != sc.Campaign {
				return nil, nil, fmt.Errorf("%w: sample %s of campaign %s seed %d is not one of the bench's", ErrNoSamples, s.SampleID, s.CampaignID, s.Seed)
			}
			u, err := sim.TruthOf(sc, s.Benchmark, s.AgentModel, s.EvolverModel, int(s.Cycle))
			if err != nil {
				return nil, nil, fmt.Errorf("truth of sample %s: %w", s.SampleID, err)
			}
			content[i], lift[i] = u.ContentLift, u.Lift
		}
		return content, lift, nil
	}
	trC, trL, err := truth(a.Train)
	if err != nil {
		return nil, err
	}
	heC, heL, err := truth(a.Heldout)
	if err != nil {
		return nil, err
	}
	onTrain, err := eval.Baselines(a.Train, a.Train)
	if err != nil {
		return nil, err
	}
	onHeld, err := eval.Baselines(a.Train, a.Heldout)
	if err != nil {
		return nil, err
	}
	base, baseH := byName(onTrain, eval.BaselineContext), byName(onHeld, eval.BaselineContext)
	if base == nil || baseH == nil {
		return nil, fmt.Errorf("no %s baseline", eval.BaselineContext)
	}
	oracle := func(name string, tr, he []float64) (*eval.Report, float64, error) {
		var sxy, sxx float64
		for i, x := range tr {
			sxy += (a.Train[i].Effect - base.Preds[i].Mean) * x
			sxx += x * x
		}
		beta := 0.0
		if sxx > 0 {
			beta = sxy / sxx
		}
		p := eval.Predictions{Name: name, Effect: true, Preds: make([]eval.Prediction, len(he))}
		for i, x := range he {
			p.Preds[i] = baseH.Preds[i]
			p.Preds[i].Mean += beta * x
		}
		r, err := eval.Evaluate(ec, a.Heldout, p, onHeld)
		return r, beta, err
	}
	c := &Ceiling{}
	if c.Content, c.BetaContent, err = oracle("oracle-content", trC, heC); err != nil {
		return nil, err
	}
	if c.Lift, c.BetaLift, err = oracle("oracle-lift", trL, heL); err != nil {
		return nil, err
	}
	return c, nil
}

// byName returns the predictions named name, or nil.
func byName(ps []eval.Predictions, name string) *eval.Predictions {
	for i := range ps {
		if ps[i].Name == name {
			return &ps[i]
		}
	}
	return nil
}

// writeCeiling prints the ceiling's two lines and whether the text-on goal
// is within its reach.
func writeCeiling(w io.Writer, c *Ceiling) {
	line := func(what string, r *eval.Report, beta float64) Summary {
		s := summarize(r)
		fmt.Fprintf(w, "ceiling: context regression + %.2f × %s: RMSE %.4f / best baseline %.4f (%s) = %.3f; ρ %.4f − %.4f (%s) = %+.4f [%+.4f, %+.4f]\n",
			beta, what, s.RMSE, s.BestRMSE, s.RMSEBaseline, s.RMSE/s.BestRMSE, s.Rho, s.BestRho, s.RhoBaseline, s.RhoDiff.Point, s.RhoDiff.Lo, s.RhoDiff.Hi)
		return s
	}
	sc := line("the update's true content lift (what its text can show)", c.Content, c.BetaContent)
	line("its whole true lift", c.Lift, c.BetaLift)
	fmt.Fprintf(w, "ceiling: the text-on goal is %s for a predictor that knew every update's content exactly\n",
		map[bool]string{true: "within reach", false: "out of reach"}[sc.GoalMet])
}
