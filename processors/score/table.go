package score

import (
	"sort"
	"strings"
)

// scoreTable is a finished baseline's task_id → score map frozen into
// sorted arrays: a done Pairer keeps its baseline for Config.Grace (a later
// evolved cell of the key still pairs with it), and a map of the decoded
// task id strings takes about twice the memory.
type scoreTable struct {
	ids  string    // the task ids, sorted, concatenated
	ends []uint32  // ends[i] is where the i-th id ends in ids
	vals []float64 // vals[i] is the i-th id's score
}

func freezeScores(m map[string]float64) *scoreTable {
	keys := make([]string, 0, len(m))
	n := 0
	for k := range m {
		keys = append(keys, k)
		n += len(k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.Grow(n)
	t := &scoreTable{ends: make([]uint32, len(keys)), vals: make([]float64, len(keys))}
	for i, k := range keys {
		b.WriteString(k)
		t.ends[i] = uint32(b.Len())
		t.vals[i] = m[k]
	}
	t.ids = b.String()
	return t
}

func (t *scoreTable) id(i int) string {
	start := uint32(0)
	if i > 0 {
		start = t.ends[i-1]
	}
	return t.ids[start:t.ends[i]]
}

func (t *scoreTable) get(id string) (float64, bool) {
	i := sort.Search(len(t.ends), func(i int) bool { return t.id(i) >= id })
	if i < len(t.ends) && t.id(i) == id {
		return t.vals[i], true
	}
	return 0, false
}

func (t *scoreTable) len() int { return len(t.ends) }
