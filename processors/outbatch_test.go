package processors

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/schemas"
)

// outcomeValues returns the events an hf.outcomes message carries, batched
// or not, with their timestamps.
func outcomeValues(t testing.TB, m kafka.Message) ([][]byte, []time.Time) {
	t.Helper()
	if !isOutcomeBatch(m.Value) {
		return [][]byte{m.Value}, []time.Time{m.Time}
	}
	var vs [][]byte
	var ts []time.Time
	if err := splitOutcomes(m.Value, func(at time.Time, ev []byte) { vs, ts = append(vs, ev), append(ts, at) }); err != nil {
		t.Fatal(err)
	}
	return vs, ts
}

// TestAddOutcomePacksPerKeyInOrder: a batch's admitted events come out as one
// record per key (up to the limit), each holding its key's events in order
// with their timestamps; with limit 1 every event is a record of its own,
// unframed.
func TestAddOutcomePacksPerKeyInOrder(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000)
	type in struct {
		key string
		v   string
		ms  int
	}
	input := []in{{"a", "a1", 0}, {"b", "b1", 1}, {"a", "a2", 2}, {"a", "a3", 3}, {"b", "b2", 4}, {"a", "a4", 5}}
	var s sink
	s.msgs = append(s.msgs, kafka.Message{Topic: schemas.TopicDLQ, Value: []byte("dead letter")})
	for _, e := range input {
		s.addOutcome([]byte(e.key), []byte(e.v), t0.Add(time.Duration(e.ms)*time.Millisecond), 3)
	}
	if s.outcomes != len(input) {
		t.Fatalf("outcomes counted %d, want %d", s.outcomes, len(input))
	}
	// a: [a1 a2 a3] then [a4] (limit 3); b: [b1 b2].
	want := []struct {
		key string
		vs  []string
		ms  []int
	}{{"a", []string{"a1", "a2", "a3"}, []int{0, 2, 3}}, {"b", []string{"b1", "b2"}, []int{1, 4}}, {"a", []string{"a4"}, []int{5}}}
	got := s.msgs[1:]
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	for i, w := range want {
		m := got[i]
		if m.Topic != schemas.TopicOutcomes || string(m.Key) != w.key {
			t.Fatalf("record %d: topic %s key %s, want %s %s", i, m.Topic, m.Key, schemas.TopicOutcomes, w.key)
		}
		vs, ts := outcomeValues(t, m)
		if len(vs) != len(w.vs) {
			t.Fatalf("record %d holds %d events, want %d", i, len(vs), len(w.vs))
		}
		for j := range vs {
			if string(vs[j]) != w.vs[j] || !ts[j].Equal(t0.Add(time.Duration(w.ms[j])*time.Millisecond)) {
				t.Errorf("record %d event %d: %q at %v, want %q at +%dms", i, j, vs[j], ts[j], w.vs[j], w.ms[j])
			}
		}
		if last := t0.Add(time.Duration(w.ms[len(w.ms)-1]) * time.Millisecond); !m.Time.Equal(last) {
			t.Errorf("record %d timestamp %v, want its newest event's %v", i, m.Time, last)
		}
	}
	// A new batch starts new records.
	s.reset()
	s.addOutcome([]byte("a"), []byte("a5"), t0, 3)
	if len(s.msgs) != 1 || len(s.open) != 1 {
		t.Fatalf("after reset: %d records, %d open", len(s.msgs), len(s.open))
	}

	var one sink
	for _, e := range input {
		one.addOutcome([]byte(e.key), []byte(e.v), t0, 1)
	}
	for i, m := range one.msgs {
		if isOutcomeBatch(m.Value) || string(m.Value) != input[i].v {
			t.Errorf("limit 1, record %d: %q, want the bare event %q", i, m.Value, input[i].v)
		}
	}
}

// TestAddOutcomeByteLimit: a record stays within outcomeBatchMaxBytes; an
// event larger than that travels alone.
func TestAddOutcomeByteLimit(t *testing.T) {
	var s sink
	ev := bytes.Repeat([]byte("x"), outcomeBatchMaxBytes/3)
	for i := 0; i < 4; i++ {
		s.addOutcome([]byte("k"), ev, time.Time{}, 64)
	}
	big := bytes.Repeat([]byte("y"), outcomeBatchMaxBytes+10)
	s.addOutcome([]byte("k"), big, time.Time{}, 64)
	n := 0
	for i, m := range s.msgs {
		vs, _ := outcomeValues(t, m)
		n += len(vs)
		if len(m.Value) > outcomeBatchMaxBytes && len(vs) > 1 {
			t.Errorf("record %d: %d bytes holding %d events, over the %d-byte bound", i, len(m.Value), len(vs), outcomeBatchMaxBytes)
		}
	}
	if n != 5 || len(s.msgs) != 3 {
		t.Errorf("%d events in %d records, want 5 in 3 (2 + 2 + the large one)", n, len(s.msgs))
	}
}

// TestSplitOutcomesRejectsDamage: truncations and overruns are framing
// errors, never a panic or a silently shorter record.
func TestSplitOutcomesRejectsDamage(t *testing.T) {
	v := appendOutcome(append([]byte{}, outcomeBatchMagic...), time.UnixMilli(5), []byte("hello"))
	v = appendOutcome(v, time.UnixMilli(-7), []byte("world"))
	var got []string
	if err := splitOutcomes(v, func(_ time.Time, ev []byte) { got = append(got, string(ev)) }); err != nil || len(got) != 2 {
		t.Fatalf("intact record: %v, %q", err, got)
	}
	for cut := len(outcomeBatchMagic); cut < len(v); cut++ {
		err := splitOutcomes(v[:cut], func(time.Time, []byte) {})
		if cut == len(v)-len("world")-2 {
			continue // ends exactly after the first event: a valid record of one
		}
		if !errors.Is(err, errOutcomeFraming) {
			t.Errorf("cut at %d of %d: err %v, want a framing error", cut, len(v), err)
		}
	}
}

func FuzzSplitOutcomes(f *testing.F) {
	v := appendOutcome(append([]byte{}, outcomeBatchMagic...), time.UnixMilli(5), []byte("hello"))
	f.Add(v)
	f.Add(append(append([]byte{}, outcomeBatchMagic...), 0xff, 0xff, 0xff))
	f.Add([]byte("HFB\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var evs [][]byte
		err := splitOutcomes(b, func(_ time.Time, ev []byte) { evs = append(evs, ev) })
		if err != nil {
			if !errors.Is(err, errOutcomeFraming) {
				t.Fatalf("error %v is not a framing error", err)
			}
			return
		}
		// The events must lie within the input.
		total := 0
		for _, ev := range evs {
			total += len(ev)
		}
		if total > len(b) {
			t.Fatalf("%d event bytes out of a %d-byte record", total, len(b))
		}
	})
}

// TestAddOutcomeSizesRecordsFromTheLastBatch: once a batch has shown how many
// events a record takes, the next batch's records are allocated for that many
// and filling them allocates nothing (no key string per event, no regrowth).
func TestAddOutcomeSizesRecordsFromTheLastBatch(t *testing.T) {
	var s sink
	ev := bytes.Repeat([]byte("e"), 300)
	key := []byte("agent-7")
	for i := 0; i < 40; i++ {
		s.addOutcome(key, ev, time.Time{}, 64)
	}
	s.reset()
	s.addOutcome(key, ev, time.Time{}, 64)
	if got := cap(s.msgs[0].Value); got < len(outcomeBatchMagic)+40*(len(ev)+2) {
		t.Fatalf("a new record holds %d bytes, want room for the 40 events per record of the last batch", got)
	}
	allocs := testing.AllocsPerRun(38, func() { s.addOutcome(key, ev, time.Time{}, 64) })
	if allocs != 0 {
		t.Fatalf("adding to an open record allocated %.1f times per event, want 0", allocs)
	}
	if len(s.msgs) != 1 {
		t.Fatalf("%d records, want the one open record", len(s.msgs))
	}
	if vs, _ := outcomeValues(t, s.msgs[0]); len(vs) != 40 {
		t.Fatalf("record holds %d events, want 40", len(vs))
	}
}
