package processors

import (
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/producers/gen"
	"github.com/harnessflow/harnessflow/schemas"
)

// retainedMeasure is what both stages keep of finished cells within their
// retention window for late events (issue 42), in live heap bytes per raw
// event of those cells.
type retainedMeasure struct {
	events       int
	cells        int
	total, onlyA float64 // bytes per event: both stages; stage A alone
}

// measureRetained drives a generated campaign (agents pairing keys, each a
// baseline and three in-situ cells of rounds × tasks attempts, with skill
// events, judgments and updates) through both stages until every cell
// finished, keeps them within the grace window, and measures the live heap
// they hold after a GC (HeapAlloc delta). With HF_RETAINED_HEAPPROFILE set,
// it writes a heap profile of that state to the named file.
func measureRetained(t testing.TB, agents, rounds, tasks int) retainedMeasure {
	t.Helper()
	profile := os.Getenv("HF_RETAINED_HEAPPROFILE")
	if profile != "" {
		old := runtime.MemProfileRate
		runtime.MemProfileRate = 1
		defer func() { runtime.MemProfileRate = old }()
	}
	c := gen.Generate(gen.Config{Seed: 9, Agents: agents, Evolvers: 3, Rounds: rounds, TasksPerRound: tasks})
	// Grace far beyond the campaign's log time (1 ms per event): every
	// finished cell stays held; no cap forgets one early.
	l := newLocal(t, Config{MinPairs: 2, MaxStateBytes: 1 << 40, FinishHold: -1})
	now := time.Now()
	var derived []kafka.Message
	var before, after, afterA runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	events := 0
	for _, r := range c.Records {
		// Encoded one at a time: the input bytes are garbage once fed,
		// unless the state holds them.
		b, err := schemas.Encode(r.Event)
		if err != nil {
			t.Fatal(err)
		}
		l.feed(r.Topic, kafka.Message{Key: []byte(r.Event.PartitionKey()), Value: b, Time: r.Time}, now, &derived)
		if r.Topic != schemas.TopicCampaigns {
			events++
		}
		clear(derived)
		derived = derived[:0]
	}
	l.end(now, &derived)
	clear(derived)
	derived = nil
	l.outA.reset()
	l.outB.reset()
	if len(l.a.finished) != len(c.Cells) || len(l.b.finished) != len(c.Cells) || len(l.a.byID) != len(c.Cells) {
		t.Fatalf("stage A holds %d cells (%d finished), stage B %d finished, want all %d finished and held",
			len(l.a.byID), len(l.a.finished), len(l.b.finished), len(c.Cells))
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	// Stage A's part: stage B's state dropped.
	l.b.byKey, l.b.finished, l.b.fin, l.b.done = nil, nil, nil, nil
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&afterA)
	runtime.KeepAlive(l)
	runtime.KeepAlive(c)
	per := func(m *runtime.MemStats) float64 {
		return float64(int64(m.HeapAlloc)-int64(before.HeapAlloc)) / float64(events)
	}
	return retainedMeasure{events: events, cells: len(c.Cells), total: per(&after), onlyA: per(&afterA)}
}

// TestRetainedFinishedStateIsCompact measures the live heap both stages
// keep of finished cells held within their retention window for late
// events (issue 42), per raw event of those cells, and fails past a
// bound about twice the measured figure. Two shapes of gen campaigns (a
// baseline and three in-situ cells per pairing key): 200 cells of 100
// tasks in rounds of 10 (an update per 10 tasks: the per-cell and
// per-update parts weigh more), and 40 cells of 1000 tasks in rounds of
// 100, the end-to-end bench's shape. Kept whole (score's maps of decoded
// strings, event ids as map keys, outputs kept for comparison) they cost
// 436 bytes per event in the first shape; compact (processors/score,
// compact.go), about 104 and 71.
func TestRetainedFinishedStateIsCompact(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		agents, rounds, size int
		bound                float64
	}{
		{"200 cells x 100 tasks", 50, 10, 10, 200},
		{"40 cells x 1000 tasks", 10, 10, 100, 140},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := measureRetained(t, tc.agents, tc.rounds, tc.size)
			t.Logf("%d events of %d finished cells: %.0f bytes retained per event (stage A %.0f, stage B %.0f; bound %.0f)",
				m.events, m.cells, m.total, m.onlyA, m.total-m.onlyA, tc.bound)
			if m.total > tc.bound {
				t.Errorf("finished cells keep %.0f bytes per event, over the bound %.0f", m.total, tc.bound)
			}
		})
	}
}
