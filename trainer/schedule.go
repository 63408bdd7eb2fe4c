package trainer

import (
	"fmt"
	"math"
)

// Learning-rate schedules of Config.LRSchedule. Each is a multiple of the
// peak rate ModelConfig.LR, a function of the optimizer step n (1-based,
// counted over new and replayed steps alike: Model.Steps, kept in
// checkpoints, so a restart continues the schedule where it stopped).
const (
	// ScheduleInverseSqrt warms up linearly over LRWarmup steps, then
	// decays as 1/sqrt(1 + t/LRDecaySteps), t the steps after the
	// warm-up's last (n − LRWarmup − 1), never below
	// LRMinRatio: no horizon, for a trainer that never stops. The default.
	ScheduleInverseSqrt = "inverse-sqrt"
	// ScheduleCosine warms up linearly, then follows half a cosine from the
	// peak down to LRMinRatio over LRDecaySteps steps, and stays there.
	ScheduleCosine = "cosine"
	// ScheduleConstant warms up linearly, then stays at the peak (the
	// trainer before schedules, with LRWarmup negative).
	ScheduleConstant = "constant"
)

// lrSchedule is a Config's learning-rate schedule.
type lrSchedule struct {
	kind          string
	peak, min     float64
	warmup, decay int
}

func newLRSchedule(c *Config) lrSchedule {
	return lrSchedule{kind: c.LRSchedule, peak: float64(c.Model.LR), min: max(c.LRMinRatio, 0),
		warmup: max(c.LRWarmup, 0), decay: max(c.LRDecaySteps, 1)}
}

// at returns the learning rate of optimizer step n (1-based).
func (s lrSchedule) at(n int) float32 {
	n = max(n, 1)
	if n <= s.warmup {
		return float32(s.peak * float64(n) / float64(s.warmup))
	}
	t := float64(n - s.warmup - 1) // steps after the warm-up's last
	f := 1.0
	switch s.kind {
	case ScheduleInverseSqrt:
		f = max(s.min, 1/math.Sqrt(1+t/float64(s.decay)))
	case ScheduleCosine:
		f = s.min + (1-s.min)*0.5*(1+math.Cos(math.Pi*min(1, t/float64(s.decay))))
	}
	return float32(s.peak * f)
}

// checkSchedule reports what is wrong with c's schedule fields (after
// defaults), each naming its flag.
func checkSchedule(c *Config) []string {
	var bad []string
	switch c.LRSchedule {
	case ScheduleInverseSqrt, ScheduleCosine, ScheduleConstant:
	default:
		bad = append(bad, fmt.Sprintf("learning-rate schedule %q: want inverse-sqrt, cosine or constant (--lr-schedule)", c.LRSchedule))
	}
	if c.LRMinRatio > 1 || math.IsNaN(c.LRMinRatio) {
		bad = append(bad, fmt.Sprintf("learning-rate floor %v: want a fraction of --lr, at most 1 (--lr-min-ratio; 0 for no floor)", c.LRMinRatio))
	}
	if c.LRDecaySteps < 1 {
		bad = append(bad, fmt.Sprintf("learning-rate decay steps %d: want ≥ 1 (--lr-decay-steps)", c.LRDecaySteps))
	}
	return bad
}
