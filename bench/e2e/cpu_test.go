package e2e

import (
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/bench/fleet"
)

func TestCPUBudget(t *testing.T) {
	t0 := time.Unix(1000, 0)
	pids := map[string]int{"driver": 1, "clickhouse": 2, "process": 3, "sink": 4, "train": 5}
	from := cpuSnap{at: t0, pids: pids,
		secs:    map[string]float64{"driver": 10, "clickhouse": 20, "process": 30, "sink": 40, "train": 50},
		flts:    map[string]int64{"driver": 100, "clickhouse": 200, "process": 300, "sink": 400, "train": 500},
		reqs:    map[string]int64{"Produce": 10, "Fetch": 20, "Metadata": 5},
		machine: fleet.MachineCPU{CPUs: 2, Busy: 500, Idle: 100, Steal: 1}}
	to := cpuSnap{at: t0.Add(10 * time.Second), pids: pids,
		secs:    map[string]float64{"driver": 14, "clickhouse": 24, "process": 35, "sink": 43, "train": 52},
		flts:    map[string]int64{"driver": 150, "clickhouse": 1200, "process": 300, "sink": 410, "train": 507},
		reqs:    map[string]int64{"Produce": 110, "Fetch": 320, "Metadata": 5, "Heartbeat": 3},
		machine: fleet.MachineCPU{CPUs: 2, Busy: 519, Idle: 101, Steal: 1.5}}
	c := cpuBudget(from, to, 200000)
	want := map[string]float64{"driver": 4, "clickhouse": 4, "process": 5, "sink": 3, "train": 2, "pipeline": 18, "other": 1}
	for k, v := range want {
		if math.Abs(c.CoreS[k]-v) > 1e-9 {
			t.Errorf("core_s[%s] = %v, want %v", k, c.CoreS[k], v)
		}
		if math.Abs(c.USPerEvent[k]-v/200000*1e6) > 1e-9 {
			t.Errorf("us_per_event[%s] = %v, want %v", k, c.USPerEvent[k], v/200000*1e6)
		}
	}
	// 19 busy seconds of 2 CPUs x 10 s; 2 CPUs / 90 us per event.
	if math.Abs(c.Busy-0.95) > 1e-9 || math.Abs(c.StealS-0.5) > 1e-9 || c.WallS != 10 || c.CPUs != 2 {
		t.Errorf("busy %v steal %v wall %v cpus %d", c.Busy, c.StealS, c.WallS, c.CPUs)
	}
	if math.Abs(c.BoundEventsPerS-2*200000/18.0) > 1e-6 || c.Note != "" {
		t.Errorf("bound %v note %q", c.BoundEventsPerS, c.Note)
	}
	wantFlt := map[string]int64{"driver": 50, "clickhouse": 1000, "process": 0, "sink": 10, "train": 7}
	if !maps.Equal(c.MinorFaults, wantFlt) {
		t.Errorf("minor faults %v, want %v", c.MinorFaults, wantFlt)
	}
	// Request kinds with no new request are left out; new kinds count from 0.
	if wantReq := map[string]int64{"Produce": 100, "Fetch": 300, "Heartbeat": 3}; !maps.Equal(c.BrokerRequests, wantReq) {
		t.Errorf("broker requests %v, want %v", c.BrokerRequests, wantReq)
	}
	if s := c.String(); !strings.Contains(s, "process 5.0 s (25.0 us/event)") || !strings.Contains(s, "at most 22222 events/s") ||
		!strings.Contains(s, "minor page faults: driver 50, clickhouse 1000, process 0, sink 10, train 7") ||
		!strings.Contains(s, "broker requests: Fetch 300, Produce 100, Heartbeat 3") {
		t.Errorf("String() = %s", s)
	}

	// A restarted child: its figure and the totals are left out, and said so.
	restarted := to
	restarted.pids = map[string]int{"driver": 1, "clickhouse": 2, "process": 9, "sink": 4, "train": 5}
	c = cpuBudget(from, restarted, 200000)
	if _, ok := c.CoreS["process"]; ok {
		t.Errorf("restarted process counted: %v", c.CoreS)
	}
	if _, ok := c.CoreS["pipeline"]; ok || c.BoundEventsPerS != 0 || !strings.Contains(c.Note, "process restarted") {
		t.Errorf("incomplete budget: core_s %v bound %v note %q", c.CoreS, c.BoundEventsPerS, c.Note)
	}
}
