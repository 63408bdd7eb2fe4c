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

// dedupDigestLen is the bytes of one dedup window entry: the first 16 bytes
// of the sha256 of its key.
const dedupDigestLen = 16

// dedupDigest is a dedup window entry: the first dedupDigestLen bytes of the
// sha256 of a key (projectKey of a project and a sample revision or id, or
// legacyKey of a bare sample id). Two keys share one with probability about
// 2^-128 per pair: with a full window of 200 000, a new sample is taken for
// a duplicate it is not about once in 10^33 samples.
type dedupDigest [dedupDigestLen]byte

func digestOf(key string) dedupDigest {
	sum := sha256.Sum256([]byte(key))
	return dedupDigest(sum[:dedupDigestLen])
}

// dedupWindow remembers the keys (projectKey of project and sample
// revision) of the last cap samples (FIFO eviction), as digests: 16 bytes
// in the ring and 16 in the set's slot, about 55 B of live heap an entry
// when full with the map's slack, whatever the ids' length (the keys
// themselves took about 150 B with 32-hex ids; TestDedupWindowEntryIsCompact).
type dedupWindow struct {
	cap  int
	ring []dedupDigest
	next int
	set  map[dedupDigest]struct{}
	// legacy counts the legacyKey entries in the window: always its
	// oldest (they come only from a restored checkpoint, before any
	// other), so an eviction while legacy > 0 evicts one of them.
	legacy int
}

func newDedupWindow(capacity int) *dedupWindow {
	return &dedupWindow{cap: capacity, set: make(map[dedupDigest]struct{}, min(capacity, 1<<16))}
}

// newDedup returns a window of capacity holding recent, oldest first: keys,
// or bare sample ids when legacy (a checkpoint's from before the keys held
// the project; before the window kept digests, checkpoints held the keys).
func newDedup(capacity int, recent []string, legacy bool) *dedupWindow {
	d := newDedupWindow(capacity)
	for _, k := range recent {
		if legacy {
			k = legacyKey(k)
		}
		d.addDigest(digestOf(k), legacy)
	}
	return d
}

// dedupFromDigests returns a window of capacity holding digests (ordered's
// bytes, oldest first), the oldest legacy of them legacy keys.
func dedupFromDigests(capacity int, digests []byte, legacy int) *dedupWindow {
	d := newDedupWindow(capacity)
	for i := 0; i+dedupDigestLen <= len(digests); i += dedupDigestLen {
		d.addDigest(dedupDigest(digests[i:i+dedupDigestLen]), i/dedupDigestLen < legacy)
	}
	return d
}

// restoreDedup is ck's dedup window with capacity: its digests, or the
// keys (or bare sample ids) of a file written before them.
func restoreDedup(capacity int, ck *Checkpoint) *dedupWindow {
	if len(ck.RecentDigests) > 0 {
		return dedupFromDigests(capacity, ck.RecentDigests, ck.RecentLegacy)
	}
	return newDedup(capacity, ck.Recent, !ck.KeyedByProject)
}

// hasSample reports whether project's sample id is in the window (or, from
// a legacy checkpoint, the sample id of any project).
func (d *dedupWindow) hasSample(project, id string) bool {
	if d.has(projectKey(project, id)) {
		return true
	}
	return d.legacy > 0 && d.has(legacyKey(id))
}

func (d *dedupWindow) has(key string) bool { _, ok := d.set[digestOf(key)]; return ok }

// add remembers key (a projectKey).
func (d *dedupWindow) add(key string) { d.addDigest(digestOf(key), false) }

func (d *dedupWindow) addDigest(k dedupDigest, legacy bool) {
	if _, ok := d.set[k]; ok {
		return
	}
	if len(d.ring) < d.cap {
		d.ring = append(d.ring, k)
	} else {
		if d.legacy > 0 { // the oldest entry, evicted, is a legacy one
			d.legacy--
		}
		delete(d.set, d.ring[d.next])
		d.ring[d.next] = k
		d.next = (d.next + 1) % d.cap
	}
	if legacy {
		d.legacy++
	}
	d.set[k] = struct{}{}
}

// len is the number of entries.
func (d *dedupWindow) len() int { return len(d.ring) }

// ordered returns the digests oldest first, dedupDigestLen bytes each (the
// oldest legacy of them legacy keys), as checkpoints keep them.
func (d *dedupWindow) ordered() []byte {
	out := make([]byte, 0, len(d.ring)*dedupDigestLen)
	for _, k := range d.ring[d.next:] {
		out = append(out, k[:]...)
	}
	for _, k := range d.ring[:d.next] {
		out = append(out, k[:]...)
	}
	return out
}
