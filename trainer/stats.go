package trainer

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/harnessflow/harnessflow/schemas"
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

// projectKey is the trainer's key of an id that belongs to a project (a
// sample id, a cell id): the project's length, '/', the project, '/', the
// id. Two projects' equal ids are two keys, and no pair of (project, id)
// gives the key of another (the length says where the project ends).
func projectKey(project, id string) string {
	return strconv.Itoa(len(project)) + "/" + project + "/" + id
}

// sampleRevision names a sample's revision: its id and the figures its
// label rests on. The processors correct a labeled sample (events that
// arrived late changed its cells' figures) by publishing it again under
// the same id; the trainer trains each revision once, so a redelivery is a
// duplicate and a correction is trained. (A correction does not unlearn
// the revision before it: it adds the corrected evidence beside it.)
func sampleRevision(s *schemas.LabeledSample) string {
	return s.SampleID + "\x00" + strconv.FormatUint(math.Float64bits(s.Effect), 36) + "/" + s.Label + "/" +
		strconv.Itoa(int(s.NBefore)) + "/" + strconv.Itoa(int(s.NAfter))
}

// legacyKey is the dedup key of a sample id remembered by a checkpoint
// written before the keys held the project (Checkpoint.KeyedByProject
// false): it matches that sample id in every project, as the check did
// then. It never equals a projectKey (which starts with a digit).
func legacyKey(id string) string { return "-/" + id }

// dedupWindow remembers the keys (projectKey of project and sample id) of
// the last cap samples (FIFO eviction).
type dedupWindow struct {
	cap  int
	ring []string
	next int
	set  map[string]struct{}
	// legacy counts the legacyKey entries in the window.
	legacy int
}

// newDedup returns a window of capacity holding recent, oldest first: keys,
// or bare sample ids when legacy (a checkpoint's from before the keys held
// the project).
func newDedup(capacity int, recent []string, legacy bool) *dedupWindow {
	d := &dedupWindow{cap: capacity, set: make(map[string]struct{}, min(capacity, 1<<16))}
	for _, k := range recent {
		if legacy {
			k = legacyKey(k)
		}
		d.add(k)
	}
	return d
}

// hasSample reports whether project's sample id is in the window (or, from
// a legacy checkpoint, the sample id of any project).
func (d *dedupWindow) hasSample(project, id string) bool {
	if d.has(projectKey(project, id)) {
		return true
	}
	return d.legacy > 0 && d.has(legacyKey(id))
}

func (d *dedupWindow) has(key string) bool { _, ok := d.set[key]; return ok }

func (d *dedupWindow) add(id string) {
	if d.has(id) {
		return
	}
	if strings.HasPrefix(id, "-/") {
		d.legacy++
	}
	if len(d.ring) < d.cap {
		d.ring = append(d.ring, id)
	} else {
		if old := d.ring[d.next]; strings.HasPrefix(old, "-/") {
			d.legacy--
		}
		delete(d.set, d.ring[d.next])
		d.ring[d.next] = id
		d.next = (d.next + 1) % d.cap
	}
	d.set[id] = struct{}{}
}

// ordered returns the keys oldest first.
func (d *dedupWindow) ordered() []string {
	out := make([]string, 0, len(d.ring))
	out = append(out, d.ring[d.next:]...)
	return append(out, d.ring[:d.next]...)
}
