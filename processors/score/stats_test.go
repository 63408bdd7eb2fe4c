package score

import (
	"errors"
	"math"
	"testing"

	"github.com/harnessflow/harnessflow/schemas"
)

// tailP is the two-sided p-value of Student's t with nu (integer) degrees of
// freedom, from the closed forms of Abramowitz & Stegun 26.7.3–26.7.4 with
// θ = atan(|t|/√ν): independent of gonum's incomplete beta function.
func tailP(t float64, nu int) float64 {
	th := math.Atan(math.Abs(t) / math.Sqrt(float64(nu)))
	c2 := math.Cos(th) * math.Cos(th)
	var a float64
	if nu%2 == 1 {
		sum := 0.0
		if nu > 1 {
			term := math.Cos(th)
			sum = term
			for k := 1; k+2 <= nu-2; k += 2 {
				term *= c2 * float64(k+1) / float64(k+2)
				sum += term
			}
		}
		a = 2 / math.Pi * (th + math.Sin(th)*sum)
	} else {
		term, sum := 1.0, 1.0
		for k := 0; k+2 <= nu-2; k += 2 {
			term *= c2 * float64(k+1) / float64(k+2)
			sum += term
		}
		a = math.Sin(th) * sum
	}
	return 1 - a
}

// Two-sided 95% critical values of Student's t (table values).
const (
	t975df7  = 2.3646242516
	t975df9  = 2.2621571628
	t975df18 = 2.1009220402
	t95df7   = 1.8945786051 // 90% interval
)

func near(t *testing.T, name string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol || math.IsNaN(got) {
		t.Errorf("%s = %.12g, want %.12g (±%g)", name, got, want, tol)
	}
}

func TestTailPTable(t *testing.T) {
	// Sanity of the independent reference against table values: the 97.5%
	// quantile leaves 0.05 in both tails.
	near(t, "p(t975df7)", tailP(t975df7, 7), 0.05, 1e-9)
	near(t, "p(t975df9)", tailP(t975df9, 9), 0.05, 1e-9)
	near(t, "p(t975df18)", tailP(t975df18, 18), 0.05, 1e-9)
	near(t, "p(1, df1)", tailP(1, 1), 0.5, 1e-12) // Cauchy: P(|T|>1) = 1/2
}

func TestPairedTTest(t *testing.T) {
	// diffs 1,1,1,1,1,0,0,0: mean 5/8 = 0.625; Σ(d−m)² = 5·0.375² + 3·0.625²
	// = 0.703125 + 1.171875 = 1.875; s² = 1.875/7 = 15/56; se = √(15/448) =
	// 0.1829812; t = 3.4156502, df 7; table: t(.99,7) = 2.998 < t <
	// t(.995,7) = 3.499, so 0.01 < p < 0.02.
	m, lo, hi, p := PairedTTest([]float64{1, 1, 1, 1, 1, 0, 0, 0})
	se := math.Sqrt(15.0 / 448)
	near(t, "mean", m, 0.625, 1e-15)
	near(t, "p", p, tailP(0.625/se, 7), 1e-9)
	if p <= 0.01 || p >= 0.02 {
		t.Errorf("p = %v outside the table bracket (0.01, 0.02)", p)
	}
	near(t, "ciLow", lo, 0.625-t975df7*se, 1e-9)
	near(t, "ciHigh", hi, 0.625+t975df7*se, 1e-9)

	_, lo, hi, p2 := PairedTTestAt([]float64{1, 1, 1, 1, 1, 0, 0, 0}, 0.10)
	near(t, "p at α=0.1", p2, p, 0)
	near(t, "ciLow 90%", lo, 0.625-t95df7*se, 1e-9)
	near(t, "ciHigh 90%", hi, 0.625+t95df7*se, 1e-9)
}

func TestTTestDegenerate(t *testing.T) {
	type res struct{ m, lo, hi, p float64 }
	cases := []struct {
		name string
		got  res
		want res
	}{
		{"paired empty", r4(PairedTTest(nil)), res{0, 0, 0, 1}},
		{"paired n=1", r4(PairedTTest([]float64{0.3})), res{0.3, 0.3, 0.3, 1}},
		{"paired constant ≠ 0", r4(PairedTTest([]float64{0.1, 0.1, 0.1})), res{0.1, 0.1, 0.1, 0}},
		{"paired constant 0", r4(PairedTTest([]float64{0, 0, 0, 0})), res{0, 0, 0, 1}},
		{"welch empty side", r4(WelchTTest([]float64{1, 1}, nil)), res{0, 0, 0, 1}},
		{"welch n=1 side", r4(WelchTTest([]float64{1}, []float64{0, 1})), res{0.5, 0.5, 0.5, 1}},
		{"welch both constant", r4(WelchTTest([]float64{0.01, 0.01}, []float64{0, 0, 0})), res{0.01, 0.01, 0.01, 0}},
		{"welch equal constants", r4(WelchTTest([]float64{1, 1}, []float64{1, 1, 1})), res{0, 0, 0, 1}},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, c.got, c.want)
		}
	}
}

func r4(a, b, c, d float64) struct{ m, lo, hi, p float64 } {
	return struct{ m, lo, hi, p float64 }{a, b, c, d}
}

func TestWelchTTest(t *testing.T) {
	// a = eight 1s and two 0s (mean 0.8), b = two 1s and eight 0s (mean 0.2):
	// both s² = (2·0.8² + 8·0.2²)/9 = 1.6/9; se² = 2·(1.6/9)/10 = 3.2/90;
	// Welch–Satterthwaite df = (se²)² / (2·(1.6/90)²/9) = 18 exactly;
	// t = 0.6/√(3.2/90) = 3.1819805; table: t(.995,18) = 2.878 < t <
	// t(.9975,18) = 3.197, so 0.005 < p < 0.01.
	a := []float64{1, 1, 1, 1, 1, 1, 1, 1, 0, 0}
	b := []float64{1, 1, 0, 0, 0, 0, 0, 0, 0, 0}
	d, lo, hi, p := WelchTTest(a, b)
	se := math.Sqrt(3.2 / 90)
	near(t, "diff", d, 0.6, 1e-15)
	near(t, "p", p, tailP(0.6/se, 18), 1e-9)
	if p <= 0.005 || p >= 0.01 {
		t.Errorf("p = %v outside the table bracket (0.005, 0.01)", p)
	}
	near(t, "ciLow", lo, 0.6-t975df18*se, 1e-9)
	near(t, "ciHigh", hi, 0.6+t975df18*se, 1e-9)

	// One side constant: df = n−1 of the other side. a = six 1s, four 0s
	// (s² = 2.4/9), b = ten 0s: se = √(2.4/90) = 0.1632993, t = 3.6742346,
	// df 9; table: t(.995,9) = 3.250 < t < t(.9975,9) = 3.690.
	a = []float64{1, 1, 1, 1, 1, 1, 0, 0, 0, 0}
	b = make([]float64, 10)
	d, lo, hi, p = WelchTTest(a, b)
	se = math.Sqrt(2.4 / 90)
	near(t, "diff", d, 0.6, 1e-15)
	near(t, "p", p, tailP(0.6/se, 9), 1e-9)
	near(t, "ciLow", lo, 0.6-t975df9*se, 1e-9)
	near(t, "ciHigh", hi, 0.6+t975df9*se, 1e-9)
}

func TestEffectDesigns(t *testing.T) {
	// Same tasks under both versions: paired on the per-task differences.
	before := map[string]float64{"a": 0, "b": 0, "c": 1, "d": 0}
	after := map[string]float64{"a": 1, "b": 1, "c": 1, "d": 0}
	e := Effect(before, after, DesignHeldOut, 0.05)
	if !e.Paired || e.NBefore != 4 || e.NAfter != 4 {
		t.Fatalf("held-out same tasks: %+v, want paired n=4", e)
	}
	m, _, _, p := PairedTTest([]float64{1, 1, 0, 0}) // task order a,b,c,d
	if e.Effect != m || e.PValue != p || m != 0.5 {
		t.Errorf("held-out paired: %+v, want effect %v p %v", e, m, p)
	}
	// The production design never pairs.
	e = Effect(before, after, DesignUnpaired, 0.05)
	d, lo, hi, p := WelchTTest([]float64{1, 1, 1, 0}, []float64{0, 0, 1, 0})
	// after {1,1,1,0} − before {0,0,1,0} = 0.5; the upper bound 1.365 is clipped to 1.
	if e.Paired || e.Effect != d || e.CILow != lo || e.CIHigh != 1 || hi <= 1 || e.PValue != p || e.NBefore != 4 || e.NAfter != 4 {
		t.Errorf("unpaired: %+v, want Welch %v [%v, %v] p %v", e, d, lo, hi, p)
	}
	// Overlap below half of a side: Welch on the whole samples.
	before = map[string]float64{"a": 0, "b": 0, "c": 0, "d": 1}
	after = map[string]float64{"a": 1, "x": 1, "y": 1, "z": 0}
	e = Effect(before, after, DesignLift, 0.05)
	if e.Paired || e.NBefore != 4 || e.NAfter != 4 || e.Effect != 0.5 {
		t.Errorf("disjoint-ish lifts: %+v, want Welch effect 0.5", e)
	}
	// Clipping: lifts from −1 to +1 give 2, clipped to 1 (interval too).
	e = Effect(map[string]float64{"a": -1, "b": -1}, map[string]float64{"c": 1, "d": 1}, DesignLift, 0.05)
	if e.Effect != 1 || e.CILow != 1 || e.CIHigh != 1 || e.PValue != 0 {
		t.Errorf("clip: %+v", e)
	}
	// mean after 0.625 − mean before −0.75 = 1.375 → 1; the lower bound stays.
	e = Effect(map[string]float64{"a": -1, "b": -1, "c": -1, "d": 0}, map[string]float64{"e": 1, "f": 1, "g": 0.5, "h": 0}, DesignLift, 0.05)
	_, lo, _, _ = WelchTTest([]float64{1, 1, 0.5, 0}, []float64{-1, -1, -1, 0})
	if e.Effect != 1 || e.CIHigh != 1 || e.CILow != lo || lo >= 1 || lo <= -1 {
		t.Errorf("clip with spread: %+v", e)
	}
}

func TestLabel(t *testing.T) {
	var prm Params // defaults: ε 0.02, α 0.05, MinPairs 5
	cases := []struct {
		effect, p float64
		n         int
		want      string
	}{
		{0.06, 0.014, 40, schemas.LabelPositive},
		{0.02, 0.049, 5, schemas.LabelPositive}, // ε and MinPairs are inclusive
		{-0.02, 0.01, 5, schemas.LabelNegative},
		{0.019, 0.0001, 40, schemas.LabelNeutral}, // below ε
		{-0.019, 0.0001, 40, schemas.LabelNeutral},
		{0.5, 0.05, 40, schemas.LabelNeutral}, // p must be < α
		{0.5, 0.001, 4, schemas.LabelNeutral}, // too few
		{-0.5, 0.2, 40, schemas.LabelNeutral},
	}
	for _, c := range cases {
		if got := Label(c.effect, c.p, c.n, prm); got != c.want {
			t.Errorf("Label(%v, %v, %d) = %s, want %s", c.effect, c.p, c.n, got, c.want)
		}
	}
	if got := Label(0.03, 0.001, 40, Params{Epsilon: 0.05}); got != schemas.LabelNeutral {
		t.Errorf("ε = 0.05: got %s", got)
	}
	if got := Label(0.5, 0.07, 40, Params{Alpha: 0.1}); got != schemas.LabelPositive {
		t.Errorf("α = 0.1: got %s", got)
	}
}

func TestReasonGrammar(t *testing.T) {
	var prm Params
	cases := []struct {
		name string
		est  Estimate
		prm  Params
		want string
	}{
		{"lift welch", Estimate{Design: DesignLift, Effect: 0.06, CILow: 0.012, CIHigh: 0.108, PValue: 0.014, NBefore: 20, NAfter: 20}, prm,
			"pass rate +6.0 pp on swe over 40 paired tasks, 95% CI [+1.2, +10.8], p = 0.014"},
		{"held-out paired", Estimate{Design: DesignHeldOut, Paired: true, Effect: -0.125, CILow: -0.2, CIHigh: -0.05, PValue: 0.0004, NBefore: 8, NAfter: 8}, prm,
			"pass rate -12.5 pp on swe over 8 paired tasks, 95% CI [-20.0, -5.0], p < 0.001"},
		{"held-out welch", Estimate{Design: DesignHeldOut, Effect: 0.3, CILow: 0.1, CIHigh: 0.5, PValue: 0.002, NBefore: 6, NAfter: 7}, prm,
			"pass rate +30.0 pp on swe over 13 tasks, 95% CI [+10.0, +50.0], p = 0.002"},
		{"unpaired not significant", Estimate{Design: DesignUnpaired, Effect: 0.1, CILow: -0.0004, CIHigh: 0.2, PValue: 0.0501, NBefore: 10, NAfter: 10}, prm,
			"pass rate +10.0 pp on swe over 20 tasks, 95% CI [+0.0, +20.0], p = 0.050; not significant at α = 0.05"},
		{"below ε", Estimate{Design: DesignLift, Effect: 0.01, CILow: 0.01, CIHigh: 0.01, PValue: 0, NBefore: 10, NAfter: 6}, prm,
			"pass rate +1.0 pp on swe over 16 paired tasks, 95% CI [+1.0, +1.0], p < 0.001; below ε = 2.0 pp"},
		{"too few", Estimate{Design: DesignLift, NBefore: 3, NAfter: 2, PValue: 1}, prm,
			"too few paired tasks (3 before, 2 after; need 5)"},
		{"too few unpaired", Estimate{Design: DesignUnpaired, NBefore: 10, NAfter: 1, PValue: 1}, Params{MinPairs: 3},
			"too few tasks (10 before, 1 after; need 3)"},
		{"α 0.1", Estimate{Design: DesignLift, Effect: 0.2, CILow: 0.1, CIHigh: 0.3, PValue: 0.07, NBefore: 5, NAfter: 5}, Params{Alpha: 0.1, Epsilon: 0.05},
			"pass rate +20.0 pp on swe over 10 paired tasks, 90% CI [+10.0, +30.0], p = 0.070"},
		{"α 0.025", Estimate{Design: DesignLift, Effect: 0.01, CILow: -0.02, CIHigh: 0.04, PValue: 0.5, NBefore: 5, NAfter: 5}, Params{Alpha: 0.025, Epsilon: 0.05},
			"pass rate +1.0 pp on swe over 10 paired tasks, 97.5% CI [-2.0, +4.0], p = 0.500; below ε = 5.0 pp"},
	}
	for _, c := range cases {
		if got := Reason(c.est, "swe", c.prm); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

func TestParams(t *testing.T) {
	var p Params
	p.SetDefaults()
	if p != (Params{Epsilon: 0.02, Alpha: 0.05, MinPairs: 5, Lambda: 1}) {
		t.Fatalf("defaults %+v", p)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := Params{Epsilon: -1, Alpha: 1, MinPairs: -2, Lambda: -1}
	err := bad.Validate()
	if err == nil {
		t.Fatal("no error for bad params")
	}
	for _, s := range []string{"epsilon", "alpha", "min pairs", "lambda"} {
		if !contains(err.Error(), s) {
			t.Errorf("error %q does not mention %s", err, s)
		}
	}
	pr := NewPairer("", bad)
	if got := pr.Params(); got.Alpha != 0.05 || got.Epsilon != 0.02 || got.MinPairs != 5 || got.Lambda != 1 {
		t.Errorf("pairer kept invalid params: %+v", got)
	}
	c := &schemas.CellStarted{CampaignID: "c1", Benchmark: "swe", AgentModel: "qwen", Seed: 7}
	if k := PairingKey("acme", c); k != "acme/c1/swe/qwen/7" {
		t.Errorf("PairingKey = %q", k)
	}
	// Projects are isolated: moving a '/' between parts is another key.
	victim := &schemas.CellStarted{CampaignID: "c1", Benchmark: "swe", AgentModel: "meta/llama", Seed: 7}
	other := &schemas.CellStarted{CampaignID: "swe", Benchmark: "meta", AgentModel: "llama", Seed: 7}
	if a, b := PairingKey("acme", victim), PairingKey("acme/c1", other); a == b {
		t.Errorf("projects acme and acme/c1 share the pairing key %q", a)
	}
	// An older stage A's key (unescaped) is still accepted by a pairer.
	cell := *victim
	cell.Project, cell.CellID = "acme", "c-1"
	if err := NewPairer(legacyPairingKey("acme", &cell), Params{}).start(&cell); errors.Is(err, ErrKeyMismatch) {
		t.Errorf("a pairer under the unescaped key refuses its cell: %v", err)
	}
	if err := NewPairer(PairingKey("acme/c1", other), Params{}).start(&cell); !errors.Is(err, ErrKeyMismatch) {
		t.Errorf("a pairer under another project's key accepts the cell: %v", err)
	}
	if a, b := PairingKey("a%2Fb", c), PairingKey("a/b", c); a == b {
		t.Errorf("an escaped and a raw '/' share the pairing key %q", a)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
