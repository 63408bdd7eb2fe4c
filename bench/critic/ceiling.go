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
// update) with a truth t only the simulator knows as one more regressor,
// effect = a_cell + b·x + β·t fitted jointly within cells on the training
// rows (fitOracle). Content adds the update's true
// content lift (sim.UpdateTruth.ContentLift: the most any reader of the
// update's text could know); Lift adds its whole true lift, the part no
// text shows included. The content oracle knows exactly what the update's
// text can show, so its gain over the context regression is a yardstick of
// what reading the text can add on these rows (as a linear term; the rest
// of the measured effect is the rounds' noise and the context).
type Ceiling struct {
	Content, Lift *eval.Report
	// BetaContent and BetaLift are the fitted coefficients β of the truth.
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
	onHeld, err := eval.Baselines(a.Train, a.Heldout)
	if err != nil {
		return nil, err
	}
	baseH := byName(onHeld, eval.BaselineContext)
	if baseH == nil {
		return nil, fmt.Errorf("no %s baseline", eval.BaselineContext)
	}
	oracle := func(name string, tr, he []float64) (*eval.Report, float64, error) {
		f, err := fitOracle(a.Train, tr)
		if err != nil {
			return nil, 0, err
		}
		p := eval.Predictions{Name: name, Effect: true, Preds: make([]eval.Prediction, len(he))}
		for i, s := range a.Heldout {
			p.Preds[i] = baseH.Preds[i]
			p.Preds[i].Mean = f.predict(s, he[i], baseH.Preds[i].Mean)
		}
		r, err := eval.Evaluate(ec, a.Heldout, p, onHeld)
		return r, f.bt, err
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
		fmt.Fprintf(w, "ceiling: context regression with %s (β %.2f): RMSE %.4f / best baseline %.4f (%s) = %.3f; ρ %.4f − %.4f (%s) = %+.4f [%+.4f, %+.4f]\n",
			what, beta, s.RMSE, s.BestRMSE, s.RMSEBaseline, s.RMSE/s.BestRMSE, s.Rho, s.BestRho, s.RhoBaseline, s.RhoDiff.Point, s.RhoDiff.Lo, s.RhoDiff.Hi)
		return s
	}
	sc := line("the update's true content lift (what its text can show)", c.Content, c.BetaContent)
	line("its whole true lift", c.Lift, c.BetaLift)
	fmt.Fprintf(w, "ceiling: the text-on goal is %s for this oracle of the update's content\n",
		map[bool]string{true: "within reach", false: "out of reach"}[sc.GoalMet])
}

// oracleFit is effect = a_cell + bx·x + bt·t, least squares within cells
// (x the evidence figure, t the truth), on the training rows with an
// evidence figure.
type oracleFit struct {
	intercept map[[3]string]float64
	bx, bt    float64
	// tMean is the mean truth of the fitted rows: an unseen cell or a row
	// without evidence gets the context regression plus bt·(t − tMean).
	tMean float64
}

func cellOf(s *schemas.LabeledSample) [3]string {
	return [3]string{s.EvolverModel, s.AgentModel, s.Benchmark}
}

// fitOracle fits oracleFit on rows with truth t (one per row). The normal
// equations of the within-cell deviations are solved for (bx, bt); it
// fails when they are singular (no within-cell spread of x or t).
func fitOracle(rows []*schemas.LabeledSample, t []float64) (*oracleFit, error) {
	type acc struct{ n, x, t, y float64 }
	sums := map[[3]string]*acc{}
	type obs struct {
		k       [3]string
		x, t, y float64
	}
	var os []obs
	for i, s := range rows {
		x, ok := eval.EvidenceScore(s.Query)
		if !ok {
			continue
		}
		k := cellOf(s)
		a := sums[k]
		if a == nil {
			a = &acc{}
			sums[k] = a
		}
		a.n++
		a.x += x
		a.t += t[i]
		a.y += s.Effect
		os = append(os, obs{k, x, t[i], s.Effect})
	}
	var sxx, stt, sxt, sxy, sty, tSum float64
	for _, o := range os {
		a := sums[o.k]
		dx, dt, dy := o.x-a.x/a.n, o.t-a.t/a.n, o.y-a.y/a.n
		sxx += dx * dx
		stt += dt * dt
		sxt += dx * dt
		sxy += dx * dy
		sty += dt * dy
		tSum += o.t
	}
	det := sxx*stt - sxt*sxt
	if len(os) < 3 || !(det > 1e-12*sxx*stt) {
		return nil, fmt.Errorf("%w: the oracle's regression is singular (%d rows with evidence)", ErrNoSamples, len(os))
	}
	f := &oracleFit{intercept: map[[3]string]float64{}, tMean: tSum / float64(len(os))}
	f.bx = (stt*sxy - sxt*sty) / det
	f.bt = (sxx*sty - sxt*sxy) / det
	for k, a := range sums {
		f.intercept[k] = (a.y - f.bx*a.x - f.bt*a.t) / a.n
	}
	return f, nil
}

// predict is the fit's forecast for s with truth t; base is the context
// regression's forecast (the fallback).
func (f *oracleFit) predict(s *schemas.LabeledSample, t, base float64) float64 {
	if a, ok := f.intercept[cellOf(s)]; ok {
		if x, ok := eval.EvidenceScore(s.Query); ok {
			return a + f.bx*x + f.bt*t
		}
	}
	return base + f.bt*(t-f.tMean)
}
