package trainer

import (
	"math/rand/v2"

	"github.com/harnessflow/harnessflow/schemas"
)

// ring keeps the most recent cap values added (FIFO eviction; cap ≤ 0
// keeps none). The held-out set and the training window of the checkpoint
// evaluation (samples) and the replay window (examples) are rings. The
// values are shared, never copied or modified. Owned by the training loop.
type ring[T any] struct {
	cap  int
	buf  []T
	next int
}

func newRing[T any](capacity int) *ring[T] { return &ring[T]{cap: capacity} }

// newSampleRing is the ring of the evaluation's held-out set and training
// window.
func newSampleRing(capacity int) *ring[*schemas.LabeledSample] {
	return newRing[*schemas.LabeledSample](capacity)
}

// newReplayWindow is the ring of admitted training examples replays draw
// from (replay.go). An Example's strings are the decoded sample's, shared.
func newReplayWindow(capacity int) *ring[Example] { return newRing[Example](capacity) }

func (r *ring[T]) add(v T) {
	if r.cap <= 0 {
		return
	}
	if len(r.buf) < r.cap {
		r.buf = append(r.buf, v)
		return
	}
	r.buf[r.next] = v
	r.next = (r.next + 1) % r.cap
}

func (r *ring[T]) len() int { return len(r.buf) }

// snapshot returns the values oldest first, in a new slice.
func (r *ring[T]) snapshot() []T {
	out := make([]T, 0, len(r.buf))
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}

// draw returns k ≤ len() distinct values chosen uniformly by rng (Floyd's
// algorithm), in dst's storage.
func (r *ring[T]) draw(rng *rand.Rand, k int, dst []T) []T {
	n := len(r.buf)
	k = min(k, n)
	dst = dst[:0]
	chosen := make(map[int]struct{}, k)
	for j := n - k; j < n; j++ {
		i := rng.IntN(j + 1)
		if _, dup := chosen[i]; dup {
			i = j
		}
		chosen[i] = struct{}{}
		dst = append(dst, r.buf[i])
	}
	return dst
}

// drawRounds draws up to k examples as draw does, but whole rounds: each
// example drawn brings the others of its round (Example.Round) in the
// window along, so a replayed batch holds the candidates of a round
// together and the loss's within-round term sees them (lossAndGrad). It
// stops at k; examples without a round come alone.
func drawRounds(r *ring[Example], rng *rand.Rand, k int, dst []Example) []Example {
	n := len(r.buf)
	k = min(k, n)
	dst = dst[:0]
	if k == 0 {
		return dst
	}
	byRound := map[string][]int{}
	for i := range r.buf {
		if rd := r.buf[i].Round; rd != "" {
			byRound[rd] = append(byRound[rd], i)
		}
	}
	taken := make(map[int]bool, k)
	for tries := 0; len(dst) < k && tries < 4*k; tries++ {
		i := rng.IntN(n)
		if taken[i] {
			continue
		}
		group := []int{i}
		if rd := r.buf[i].Round; rd != "" {
			group = byRound[rd]
		}
		for _, j := range group {
			if len(dst) == k {
				break
			}
			if !taken[j] {
				taken[j] = true
				dst = append(dst, r.buf[j])
			}
		}
	}
	return dst
}
