package critic

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/harnessflow/harnessflow/schemas"
)

// TestFitOracleRecoversPlantedCoefficients: effects exactly a_cell + 0.5·x
// + 2·t, with truths whose level differs by cell (as a lift's does: its
// mean is the cell's mean increment), are fitted exactly: both slopes, each
// cell's level, and the forecast of a new row. A fit of the truth on the
// context regression's residuals alone would shrink β by the cells' spread
// of t. Singular data is refused.
func TestFitOracleRecoversPlantedCoefficients(t *testing.T) {
	level := map[string]float64{"e1": -0.1, "e2": 0.3}
	tLevel := map[string]float64{"e1": 0.05, "e2": 0.4}
	var rows []*schemas.LabeledSample
	var truth []float64
	for _, ev := range []string{"e1", "e2"} {
		for i := range 6 {
			x := 0.1 * float64(i)
			tr := tLevel[ev] + 0.01*float64((i*7)%5)
			rows = append(rows, &schemas.LabeledSample{SampleID: fmt.Sprint(ev, i), EvolverModel: ev, AgentModel: "a", Benchmark: "b",
				Effect: level[ev] + 0.5*x + 2*tr, Query: fmt.Sprintf("task t: pass score=%g", x)})
			truth = append(truth, tr)
		}
	}
	f, err := fitOracle(rows, truth)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(f.bx-0.5) > 1e-9 || math.Abs(f.bt-2) > 1e-9 {
		t.Fatalf("bx %v, bt %v: want 0.5 and 2", f.bx, f.bt)
	}
	s := &schemas.LabeledSample{EvolverModel: "e2", AgentModel: "a", Benchmark: "b", Query: "task t: fail score=0.35"}
	if got, want := f.predict(s, 0.42, 0), 0.3+0.5*0.35+2*0.42; math.Abs(got-want) > 1e-9 {
		t.Fatalf("forecast %v, want %v", got, want)
	}
	unseen := &schemas.LabeledSample{EvolverModel: "e9", AgentModel: "a", Benchmark: "b", Query: "task t: fail score=0.35"}
	if got, want := f.predict(unseen, f.tMean+0.1, 0.25), 0.25+2*0.1; math.Abs(got-want) > 1e-9 {
		t.Fatalf("unseen cell: %v, want the base plus bt·(t − mean t) = %v", got, want)
	}
	flat := make([]float64, len(truth)) // no spread of t
	if _, err := fitOracle(rows, flat); !errors.Is(err, ErrNoSamples) {
		t.Fatalf("constant truth: %v, want ErrNoSamples (singular)", err)
	}
}
