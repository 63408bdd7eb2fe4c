package trainer

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"sort"
	"strings"
)

// HeldoutRecord is one held-out sample's outcome under the model of its time.
type HeldoutRecord struct {
	// Label and Pred are the true and predicted classes.
	Label, Pred int
	// AbsErr is |predicted mean − effect|.
	AbsErr float64
}

// HeldoutMetrics summarizes a window of held-out records.
type HeldoutMetrics struct {
	// N is the window's size.
	N int
	// Acc is label accuracy, MacroF1 the mean F1 over classes that occur (as
	// truth or prediction), MAE the mean absolute effect error.
	Acc, MacroF1, MAE float64
}

// Summarize computes held-out metrics over recs.
func Summarize(recs []HeldoutRecord) HeldoutMetrics {
	m := HeldoutMetrics{N: len(recs)}
	if len(recs) == 0 {
		return m
	}
	var tp, fp, fn [3]float64
	for _, r := range recs {
		if r.Label == r.Pred {
			m.Acc++
			tp[r.Label]++
		} else {
			fp[r.Pred]++
			fn[r.Label]++
		}
		m.MAE += r.AbsErr
	}
	m.Acc /= float64(len(recs))
	m.MAE /= float64(len(recs))
	var f1s float64
	var k int
	for c := 0; c < 3; c++ {
		if tp[c]+fp[c]+fn[c] == 0 {
			continue
		}
		f1s += 2 * tp[c] / (2*tp[c] + fp[c] + fn[c])
		k++
	}
	m.MacroF1 = f1s / float64(k)
	return m
}

// quantile returns the q-quantile (nearest rank) of xs; 0 for none.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// idHash is the hex sha256 of the sorted ids joined by newlines.
func idHash(ids []string) string {
	s := append([]string(nil), ids...)
	sort.Strings(s)
	sum := sha256.Sum256([]byte(strings.Join(s, "\n")))
	return hex.EncodeToString(sum[:])
}

// dedupWindow remembers the last cap sample ids (FIFO eviction).
type dedupWindow struct {
	cap  int
	ring []string
	next int
	set  map[string]struct{}
}

func newDedup(capacity int, recent []string) *dedupWindow {
	d := &dedupWindow{cap: capacity, set: make(map[string]struct{}, min(capacity, 1<<16))}
	for _, id := range recent {
		d.add(id)
	}
	return d
}

func (d *dedupWindow) has(id string) bool { _, ok := d.set[id]; return ok }

func (d *dedupWindow) add(id string) {
	if d.has(id) {
		return
	}
	if len(d.ring) < d.cap {
		d.ring = append(d.ring, id)
	} else {
		delete(d.set, d.ring[d.next])
		d.ring[d.next] = id
		d.next = (d.next + 1) % d.cap
	}
	d.set[id] = struct{}{}
}

// ordered returns the ids oldest first.
func (d *dedupWindow) ordered() []string {
	out := make([]string, 0, len(d.ring))
	out = append(out, d.ring[d.next:]...)
	return append(out, d.ring[:d.next]...)
}
