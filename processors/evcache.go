package processors

import (
	"bytes"
	"context"
	"hash/maphash"
	"sync"

	"github.com/harnessflow/harnessflow/schemas"
)

// evCache hands stage B the events that stage A of the same process decoded
// and admitted to hf.outcomes, so that an outcome read back is not decoded a
// second time. Stage A writes an admitted event's bytes unchanged, so the
// entry is used only for the exact same bytes (compared in full) and is the
// event schemas.Decode returns for them without error; events are never
// modified after decoding. A miss (another process's output, an evicted or
// rebuilt entry) decodes as before. It holds at most evCacheSize entries of
// at most evCacheMaxBytes each (large updates are decoded again), and at
// most evCacheBudget bytes of them in all, oldest dropped first. Safe for
// concurrent use.
type evCache struct {
	seed maphash.Seed
	mu   sync.Mutex
	m    map[uint64]int32 // hash of the bytes -> index in ring
	ring []evEntry        // insertion order, for eviction; taken slots are zero
	head int              // oldest slot
	n    int              // slots in use from head on (taken ones included)
	size int              // bytes of the entries not yet taken
}

type evEntry struct {
	h     uint64
	value []byte
	ev    schemas.Event
}

// evCacheSize and evCacheBudget bound the cache: outcomes admitted but not
// yet read back by this process's stage B. Stage B does more work per event
// than stage A, so it trails; the bound is what it may trail by and still be
// spared the decode (about 64k task attempts of the generated campaigns).
const (
	evCacheSize     = 1 << 16
	evCacheMaxBytes = 2 << 10
	evCacheBudget   = 16 << 20
)

func newEvCache() *evCache {
	return &evCache{seed: maphash.MakeSeed(), m: make(map[uint64]int32, evCacheSize), ring: make([]evEntry, evCacheSize)}
}

// put records admitted events (value: the exact bytes written).
func (c *evCache) put(es []evEntry) {
	if c == nil || len(es) == 0 {
		return
	}
	for i := range es {
		if len(es[i].value) <= evCacheMaxBytes {
			es[i].h = maphash.Bytes(c.seed, es[i].value)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range es {
		v := len(es[i].value)
		if v > evCacheMaxBytes {
			continue
		}
		for c.n == len(c.ring) || (c.n > 0 && c.size+v > evCacheBudget) {
			c.evictOldest()
		}
		slot := (c.head + c.n) % len(c.ring)
		c.ring[slot] = es[i]
		c.m[es[i].h] = int32(slot)
		c.size += v
		c.n++
	}
}

func (c *evCache) evictOldest() {
	if old := &c.ring[c.head]; old.value != nil {
		if j, ok := c.m[old.h]; ok && int(j) == c.head {
			delete(c.m, old.h)
		}
		c.size -= len(old.value)
		*old = evEntry{}
	}
	c.head = (c.head + 1) % len(c.ring)
	c.n--
}

// take fills m.ev for every message of ms whose exact bytes are cached and
// reports, per message, whether it did (hit[i]).
func (c *evCache) take(ms []*inMsg, hit []bool) {
	if c == nil {
		return
	}
	var hs [64]uint64
	for lo := 0; lo < len(ms); lo += len(hs) {
		chunk := ms[lo:min(lo+len(hs), len(ms))]
		for i, m := range chunk {
			hs[i] = maphash.Bytes(c.seed, m.value)
		}
		c.mu.Lock()
		for i, m := range chunk {
			j, ok := c.m[hs[i]]
			if !ok {
				continue
			}
			e := &c.ring[j]
			if !bytes.Equal(e.value, m.value) {
				continue
			}
			// An outcome is read back once per generation; a rebuild decodes.
			delete(c.m, hs[i])
			m.ev, hit[lo+i] = e.ev, true
			c.size -= len(e.value)
			*e = evEntry{}
		}
		c.mu.Unlock()
	}
}

// decodeAll fills ev or rej of every message: from the cache when it holds
// the exact bytes (and they are within Limits.Event), else by decodeMsg
// with dec. It stops at the first message whose schema registry could not
// be asked and returns that error (schemas.ErrRegistryUnavailable): the
// fetch is then tried again.
func decodeAll(ctx context.Context, ms []*inMsg, lim schemas.Limits, cache *evCache, dec *schemas.Decoder) error {
	if cache == nil {
		for _, m := range ms {
			if m.rej == nil {
				if err := decodeMsg(ctx, m, lim, dec); err != nil {
					return err
				}
			}
		}
		return nil
	}
	hit := make([]bool, len(ms))
	cache.take(ms, hit)
	for i, m := range ms {
		if m.rej != nil {
			continue // rejected before decoding (a damaged hf.outcomes record)
		}
		if !hit[i] || len(m.value) > lim.Event {
			m.ev = nil
			if err := decodeMsg(ctx, m, lim, dec); err != nil {
				return err
			}
		}
	}
	return nil
}
