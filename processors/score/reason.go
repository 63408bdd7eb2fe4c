package score

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/harnessflow/harnessflow/schemas"
)

// ReasonRolledBack is the reason of a rolled-back update's sample: its new
// version was never used, so it is labeled neutral with n_after = 0.
const ReasonRolledBack = "rolled back"

// Reason returns the sentence that explains a sample's label. Its grammar:
//
//	reason   = toofew | measured
//	toofew   = "too few " unit " (" nBefore " before, " nAfter " after; need " MinPairs ")"
//	measured = "pass rate " pp " pp on " benchmark " over " n " " unit ", "
//	           level "% CI [" pp ", " pp "], " pvalue [suffix]
//	unit     = "paired tasks"   (DesignLift; DesignHeldOut with a paired test)
//	         | "tasks"          (DesignUnpaired; DesignHeldOut with Welch)
//	n        = nBefore                 (paired test)
//	         | nBefore + nAfter        (Welch)
//	pp       = 100 × value with an explicit sign and one decimal ("+6.0",
//	           "-2.5"; zero is "+0.0")
//	level    = 100 × (1 − α) with at most one decimal ("95", "97.5")
//	pvalue   = "p < 0.001" | "p = " p with three decimals ("p = 0.014")
//	suffix   = "; below ε = " 100×ε with one decimal " pp"   (neutral: |effect| < ε)
//	         | "; not significant at α = " α                  (neutral: p ≥ α)
//
// For example: "pass rate +6.0 pp on swe over 40 paired tasks, 95% CI [+1.2,
// +10.8], p = 0.014" and "too few paired tasks (3 before, 2 after; need 5)".
// toofew is used when the smaller side has fewer than MinPairs tasks. Zero
// fields of params take their defaults. A rolled-back update's reason is
// ReasonRolledBack (the Pairer sets it; Reason never returns it).
func Reason(est Estimate, benchmark string, params Params) string {
	params.SetDefaults()
	unit := "tasks"
	if est.Design == DesignLift || (est.Design == DesignHeldOut && est.Paired) {
		unit = "paired tasks"
	}
	if min(est.NBefore, est.NAfter) < params.MinPairs {
		return fmt.Sprintf("too few %s (%d before, %d after; need %d)", unit, est.NBefore, est.NAfter, params.MinPairs)
	}
	n := est.NBefore
	if !est.Paired {
		n += est.NAfter
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pass rate %s pp on %s over %d %s, %s%% CI [%s, %s], %s",
		formatPP(est.Effect), benchmark, n, unit, formatLevel(params.Alpha),
		formatPP(est.CILow), formatPP(est.CIHigh), formatP(est.PValue))
	if Label(est.Effect, est.PValue, min(est.NBefore, est.NAfter), params) == schemas.LabelNeutral {
		switch {
		case math.Abs(est.Effect) < params.Epsilon:
			fmt.Fprintf(&b, "; below ε = %.1f pp", 100*params.Epsilon)
		case est.PValue >= params.Alpha:
			fmt.Fprintf(&b, "; not significant at α = %s", strconv.FormatFloat(params.Alpha, 'g', -1, 64))
		}
	}
	return b.String()
}

// formatPP writes a fraction as signed percentage points with one decimal.
func formatPP(x float64) string {
	s := fmt.Sprintf("%+.1f", 100*x)
	if s == "-0.0" {
		return "+0.0"
	}
	return s
}

func formatLevel(alpha float64) string {
	return strconv.FormatFloat(math.Round(1000*(1-alpha))/10, 'f', -1, 64)
}

func formatP(p float64) string {
	if p < 0.001 {
		return "p < 0.001"
	}
	return fmt.Sprintf("p = %.3f", p)
}
