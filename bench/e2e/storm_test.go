package e2e

import (
	"slices"
	"strings"
	"testing"
)

// The storm's blocks come in groups S C C S, and a block count that does not
// fill whole groups is refused with what to use instead.
func TestStormOrderIsWholeGroups(t *testing.T) {
	want := []bool{true, false, false, true, true, false, false, true, true, false, false, true}
	if got := stormOrder(12); !slices.Equal(got, want) {
		t.Errorf("stormOrder(12) = %v, want %v", got, want)
	}
	for _, n := range []int{-4, 2, 6, 10} {
		c := Config{Bin: "hf", StormBlocks: n}
		c.setDefaults()
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "multiple of 4") {
			t.Errorf("storm blocks %d: err %v, want a multiple-of-4 error", n, err)
		}
	}
	c := Config{Bin: "hf"}
	c.setDefaults()
	if err := c.Validate(); err != nil || c.StormBlocks != 16 {
		t.Errorf("default storm blocks %d, err %v", c.StormBlocks, err)
	}
}

// A group's ratio pools its blocks' events over their summed times, per
// kind: two storm blocks of 100 events in 1 s and 3 s against clean ones of
// 100 in 1 s each run at 50 vs 100 events/s.
func TestRatesPoolEventsOverTime(t *testing.T) {
	var r rates
	r.add(true, &Phase{Events: 100, VisibleS: 1})
	r.add(false, &Phase{Events: 100, VisibleS: 1})
	r.add(false, &Phase{Events: 100, VisibleS: 1})
	r.add(true, &Phase{Events: 100, VisibleS: 3})
	if r.storm() != 50 || r.clean() != 100 || r.ratio() != 0.5 {
		t.Errorf("storm %v clean %v ratio %v, want 50 100 0.5", r.storm(), r.clean(), r.ratio())
	}
}
