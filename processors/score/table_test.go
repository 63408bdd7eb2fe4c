package score

import (
	"fmt"
	"runtime"
	"testing"
)

func TestScoreTableGet(t *testing.T) {
	m := map[string]float64{"t1": 1, "t10": 0.5, "t": 0, "": 0.25, "u-7": 0.75}
	tb := freezeScores(m)
	if tb.len() != len(m) {
		t.Fatalf("len %d, want %d", tb.len(), len(m))
	}
	for k, v := range m {
		if got, ok := tb.get(k); !ok || got != v {
			t.Errorf("get(%q) = %v, %v; want %v", k, got, ok, v)
		}
	}
	for _, k := range []string{"t2", "t1 ", "t100", "u", "zzz", "T1"} {
		if got, ok := tb.get(k); ok {
			t.Errorf("get(%q) = %v, found; want missing", k, got)
		}
	}
	if _, ok := freezeScores(map[string]float64{}).get("t1"); ok {
		t.Error("empty table found t1")
	}
}

// TestScoreTableSmallerThanMap checks why the table exists: a finished
// baseline of 1000 tasks takes well under the live heap of its map (about
// half here; the id bytes themselves are most of what is left).
func TestScoreTableSmallerThanMap(t *testing.T) {
	const tables, tasks = 50, 1000
	live := func(build func() any) uint64 {
		runtime.GC()
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		x := build()
		runtime.GC()
		runtime.ReadMemStats(&b)
		runtime.KeepAlive(x)
		return b.HeapAlloc - a.HeapAlloc
	}
	mk := func(i int) map[string]float64 {
		m := make(map[string]float64, tasks)
		for j := 0; j < tasks; j++ {
			m[fmt.Sprintf("swe-verified/task-%05d", j)] = float64(i+j) / 3000
		}
		return m
	}
	maps := live(func() any {
		var ms []map[string]float64
		for i := 0; i < tables; i++ {
			ms = append(ms, mk(i))
		}
		return ms
	})
	frozen := live(func() any {
		var ts []*scoreTable
		for i := 0; i < tables; i++ {
			ts = append(ts, freezeScores(mk(i)))
		}
		return ts
	})
	t.Logf("%d baselines of %d tasks: maps %d KiB, tables %d KiB", tables, tasks, maps>>10, frozen>>10)
	if frozen*10 > maps*6 {
		t.Fatalf("tables %d bytes, maps %d bytes: not under 60 %%", frozen, maps)
	}
}
