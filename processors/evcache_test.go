package processors

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/schemas"
)

func TestEvCache(t *testing.T) {
	ev := &schemas.TaskAttempt{Envelope: schemas.Envelope{EventTime: time.Unix(100, 0).UTC(), Source: "t", Project: "p"},
		CellID: "c1", TaskID: "t1", HarnessVersion: "h0", Score: 1, Status: schemas.StatusOK}
	v, err := schemas.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	decoded, err := schemas.Decode(v)
	if err != nil {
		t.Fatal(err)
	}
	lim := schemas.DefaultLimits()
	c := newEvCache()
	c.put([]evEntry{{value: v, ev: decoded}})

	// Same bytes (another slice): the cached event, once.
	m := &inMsg{value: append([]byte(nil), v...)}
	decodeAll(context.Background(), []*inMsg{m}, lim, c, nil)
	if m.ev != decoded || m.rej != nil {
		t.Fatalf("hit: ev %p rej %v, want the cached %p", m.ev, m.rej, decoded)
	}
	m2 := &inMsg{value: v}
	decodeAll(context.Background(), []*inMsg{m2}, lim, c, nil)
	if m2.ev == decoded || !reflect.DeepEqual(m2.ev, decoded) {
		t.Fatalf("second read: want a fresh decode equal to the cached event, got %+v", m2.ev)
	}

	// Other bytes are decoded, never served from the cache.
	c.put([]evEntry{{value: v, ev: decoded}})
	bad := append([]byte(nil), v...)
	bad[len(bad)-1] ^= 0xff
	m3 := &inMsg{value: bad}
	decodeAll(context.Background(), []*inMsg{m3}, lim, c, nil)
	if m3.ev == decoded {
		t.Fatal("different bytes were served the cached event")
	}

	// The limit stage still applies to cached bytes.
	small := lim
	small.Event = len(v) - 1
	m4 := &inMsg{value: v}
	decodeAll(context.Background(), []*inMsg{m4}, small, c, nil)
	if m4.ev != nil || m4.rej == nil || m4.rej.code != CodePayloadTooLarge {
		t.Fatalf("over the limit: ev %v rej %+v, want %s", m4.ev, m4.rej, CodePayloadTooLarge)
	}

	// Bounded: the oldest entries go first.
	c = newEvCache()
	var es []evEntry
	for i := 0; i < evCacheSize+10; i++ {
		e := *ev
		e.TaskID = "t" + time.Duration(i).String()
		b, err := schemas.Encode(&e)
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, evEntry{value: b, ev: &e})
	}
	c.put(es)
	if len(c.m) > evCacheSize {
		t.Fatalf("%d entries held, bound %d", len(c.m), evCacheSize)
	}
	first, last := &inMsg{value: es[0].value}, &inMsg{value: es[len(es)-1].value}
	hit := make([]bool, 2)
	c.take([]*inMsg{first, last}, hit)
	if hit[0] || !hit[1] {
		t.Fatalf("hits %v, want the oldest evicted and the newest held", hit)
	}
}

// TestEvCacheBudget: the bytes held stay within evCacheBudget, the oldest
// entries go first, and taken entries free their share.
func TestEvCacheBudget(t *testing.T) {
	c := newEvCache()
	val := func(i int) []byte {
		b := make([]byte, evCacheMaxBytes)
		copy(b, fmt.Sprintf("%08d", i))
		return b
	}
	n := 2 * evCacheBudget / evCacheMaxBytes
	for i := 0; i < n; i++ {
		c.put([]evEntry{{value: val(i), ev: &schemas.CellFinished{}}})
		if c.size > evCacheBudget {
			t.Fatalf("after %d puts: %d bytes held, budget %d", i+1, c.size, evCacheBudget)
		}
	}
	first, last := &inMsg{value: val(0)}, &inMsg{value: val(n - 1)}
	hit := make([]bool, 2)
	before := c.size
	c.take([]*inMsg{first, last}, hit)
	if hit[0] || !hit[1] {
		t.Fatalf("hits %v, want the oldest evicted and the newest held", hit)
	}
	if c.size != before-evCacheMaxBytes {
		t.Fatalf("after a take: %d bytes held, want %d", c.size, before-evCacheMaxBytes)
	}
	// Over the per-entry cap: never held.
	c.put([]evEntry{{value: make([]byte, evCacheMaxBytes+1), ev: &schemas.CellFinished{}}})
	if c.size != before-evCacheMaxBytes {
		t.Fatalf("an entry over %d bytes was held", evCacheMaxBytes)
	}
}
