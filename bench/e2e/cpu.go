package e2e

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/harnessflow/harnessflow/bench/fleet"
)

// CPU is where a phase's CPU time went, from its first emit until its rows
// were visible: each process's user + system time from /proc, and the
// machine's own accounting over the same interval. On a machine the
// pipeline keeps busy, the end-to-end rate is the machine's CPUs divided by
// the pipeline's CPU time per event; this is the budget that explains it.
type CPU struct {
	WallS float64 `json:"wall_s"`
	CPUs  int     `json:"cpus"`
	// CoreS is CPU seconds per process: driver (this process: the SDK
	// producer, the embedded broker, the load generator and the visibility
	// polls), clickhouse, process, sink, train; "pipeline" is their sum;
	// "other" is the machine's busy time that none of them used (other
	// jobs on a shared machine, the kernel's own threads).
	CoreS map[string]float64 `json:"core_s"`
	// USPerEvent is CoreS per event of the phase, in microseconds.
	USPerEvent map[string]float64 `json:"us_per_event"`
	// Busy is the machine's busy time as a fraction of its CPUs' time over
	// the phase (near 1: the phase was bound by CPU).
	Busy float64 `json:"busy"`
	// StealS is CPU time the hypervisor owed this machine and gave to
	// something else (0 on bare metal).
	StealS float64 `json:"steal_s"`
	// BoundEventsPerS is CPUs / (pipeline CPU seconds per event): the rate
	// at which this phase's cost per event would fill every CPU. A pipeline
	// on a busy machine cannot go faster without costing less per event.
	BoundEventsPerS float64 `json:"cpu_bound_events_per_s"`
	// MinorFaults is page faults served without I/O per process over the
	// phase (fresh memory the kernel zeroes; on a virtual machine each also
	// costs the hypervisor's paging): memory a process returns to the
	// kernel and takes back is paid again in each.
	MinorFaults map[string]int64 `json:"minor_faults,omitempty"`
	// BrokerRequests is the requests the embedded broker handled over the
	// phase, per Kafka request name (Produce, Fetch, Metadata, ...). Part of
	// the driver's CPU is paid per request.
	BrokerRequests map[string]int64 `json:"broker_requests,omitempty"`
	// Note says which figures are missing and why.
	Note string `json:"note,omitempty"`
}

// cpuSnap is one reading of every process's and the machine's CPU time.
type cpuSnap struct {
	at      time.Time
	pids    map[string]int
	secs    map[string]float64
	flts    map[string]int64
	machine fleet.MachineCPU
	reqs    map[string]int64
	errs    []string
}

// cpuComponents are the processes of a budget, in print order.
var cpuComponents = []string{"driver", "clickhouse", "process", "sink", "train"}

func (b *bench) cpuSnap() cpuSnap {
	s := cpuSnap{at: time.Now(), pids: map[string]int{"driver": os.Getpid(), "clickhouse": b.cl.ClickHousePid(),
		"process": b.cl.Processors.Pid(), "sink": b.cl.Sink.Pid(), "train": b.cl.Trainer.Pid()}, secs: map[string]float64{}, flts: map[string]int64{}}
	for name, pid := range s.pids {
		if pid == 0 {
			s.errs = append(s.errs, name+" not running")
			continue
		}
		u, err := fleet.ReadUsage(pid)
		if err != nil {
			s.errs = append(s.errs, name+": "+err.Error())
			continue
		}
		s.secs[name], s.flts[name] = u.CPUSeconds, u.MinorFaults
	}
	m, err := fleet.ReadMachineCPU()
	if err != nil {
		s.errs = append(s.errs, "machine: "+err.Error())
	}
	s.machine = m
	s.reqs = b.reqs.snap()
	return s
}

// cpuBudget is the difference of two snapshots over a phase of events.
func cpuBudget(from, to cpuSnap, events int) *CPU {
	c := &CPU{WallS: to.at.Sub(from.at).Seconds(), CPUs: to.machine.CPUs, CoreS: map[string]float64{}, USPerEvent: map[string]float64{},
		MinorFaults: map[string]int64{}}
	notes := append(append([]string(nil), from.errs...), to.errs...)
	complete := true
	var pipeline float64
	for _, name := range cpuComponents {
		a, okA := from.secs[name]
		z, okZ := to.secs[name]
		switch {
		case !okA || !okZ:
			complete = false
		case from.pids[name] != to.pids[name]:
			complete = false
			notes = append(notes, fmt.Sprintf("%s restarted during the phase (pid %d -> %d)", name, from.pids[name], to.pids[name]))
		default:
			c.CoreS[name] = z - a
			c.MinorFaults[name] = to.flts[name] - from.flts[name]
			pipeline += z - a
		}
	}
	if complete {
		c.CoreS["pipeline"] = pipeline
	}
	if m := to.machine.Sub(from.machine); to.machine.CPUs > 0 && from.machine.CPUs > 0 {
		c.StealS = m.Steal
		if c.WallS > 0 {
			c.Busy = m.Busy / (c.WallS * float64(m.CPUs))
		}
		if complete {
			c.CoreS["other"] = max(m.Busy-pipeline, 0)
		}
	}
	if events > 0 {
		for k, v := range c.CoreS {
			c.USPerEvent[k] = v / float64(events) * 1e6
		}
		if complete && pipeline > 0 && c.CPUs > 0 {
			c.BoundEventsPerS = float64(c.CPUs) * float64(events) / pipeline
		}
	}
	if from.reqs != nil && to.reqs != nil {
		c.BrokerRequests = map[string]int64{}
		for k, v := range to.reqs {
			if d := v - from.reqs[k]; d > 0 {
				c.BrokerRequests[k] = d
			}
		}
	}
	sort.Strings(notes)
	c.Note = strings.Join(notes, "; ")
	return c
}

// String is the budget on one line, for the progress output.
func (c *CPU) String() string {
	if c == nil {
		return "not measured"
	}
	var parts []string
	for _, name := range append(append([]string(nil), cpuComponents...), "other") {
		if v, ok := c.CoreS[name]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f s (%.1f us/event)", name, v, c.USPerEvent[name]))
		}
	}
	s := strings.Join(parts, ", ")
	if p, ok := c.CoreS["pipeline"]; ok {
		s += fmt.Sprintf("; pipeline %.1f s = %.1f us/event: %d CPUs carry at most %.0f events/s at that cost",
			p, c.USPerEvent["pipeline"], c.CPUs, c.BoundEventsPerS)
	}
	s += fmt.Sprintf("; machine busy %.2f over %.1f s, steal %.1f s", c.Busy, c.WallS, c.StealS)
	if len(c.MinorFaults) > 0 {
		var fs []string
		for _, name := range cpuComponents {
			if v, ok := c.MinorFaults[name]; ok {
				fs = append(fs, fmt.Sprintf("%s %d", name, v))
			}
		}
		s += "; minor page faults: " + strings.Join(fs, ", ")
	}
	if len(c.BrokerRequests) > 0 {
		names := slices.Collect(maps.Keys(c.BrokerRequests))
		sort.Slice(names, func(i, j int) bool { return c.BrokerRequests[names[i]] > c.BrokerRequests[names[j]] })
		var rs []string
		for _, k := range names {
			rs = append(rs, fmt.Sprintf("%s %d", k, c.BrokerRequests[k]))
		}
		s += "; broker requests: " + strings.Join(rs, ", ")
	}
	if c.Note != "" {
		s += " (" + c.Note + ")"
	}
	return s
}
