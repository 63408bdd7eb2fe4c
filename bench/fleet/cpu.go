package fleet

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/harnessflow/harnessflow/internal/proc"
)

// userHZ is the unit of the CPU times in /proc: Linux reports them in
// USER_HZ ticks, fixed at 100 per second for user space on every
// architecture Go supports.
const userHZ = 100

// CPUSeconds reads the CPU time (user + system) a process has used so far,
// in seconds, from /proc/PID/stat (all its threads; not its children). It
// fails where /proc is not available or the process is gone.
func CPUSeconds(pid int) (float64, error) {
	u, err := ReadUsage(pid)
	return u.CPUSeconds, err
}

// Usage is what a process has used so far (all its threads, not its
// children), from /proc/PID/stat.
type Usage struct {
	// CPUSeconds is user + system time.
	CPUSeconds float64
	// MinorFaults is page faults served without I/O: on a virtual machine
	// each is a trip through the hypervisor's paging as well as the
	// kernel's zeroing of a fresh page, so they are worth counting apart.
	MinorFaults int64
}

// ReadUsage reads a process's Usage. It fails where /proc is not available
// or the process is gone.
func ReadUsage(pid int) (Usage, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Usage{}, err
	}
	return parseStat(b)
}

// parseStat takes minflt (field 10), utime and stime (fields 14 and 15)
// from a /proc/PID/stat line (procstat.Fields).
func parseStat(b []byte) (Usage, error) {
	f, err := proc.StatFields(b, 13)
	if err != nil {
		return Usage{}, fmt.Errorf("fleet: %w", err)
	}
	var ticks float64
	for _, s := range f[11:13] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return Usage{}, fmt.Errorf("fleet: /proc stat cpu time %q: %w", s, err)
		}
		ticks += float64(v)
	}
	flt, err := strconv.ParseInt(f[7], 10, 64)
	if err != nil {
		return Usage{}, fmt.Errorf("fleet: /proc stat minflt %q: %w", f[7], err)
	}
	return Usage{CPUSeconds: ticks / userHZ, MinorFaults: flt}, nil
}

// MachineCPU is the whole machine's CPU time so far, in seconds summed over
// its CPUs, from the first line of /proc/stat.
type MachineCPU struct {
	// CPUs is the number of CPUs the line sums over.
	CPUs int
	// Busy is user, nice, system, irq and softirq time (guest time is
	// already inside user and nice).
	Busy float64
	// Idle is idle and iowait time.
	Idle float64
	// Steal is time the hypervisor ran something else while this machine
	// had work: CPU a virtual machine was owed and did not get.
	Steal float64
}

// Sub returns m - o, field by field (CPUs is m's).
func (m MachineCPU) Sub(o MachineCPU) MachineCPU {
	return MachineCPU{CPUs: m.CPUs, Busy: m.Busy - o.Busy, Idle: m.Idle - o.Idle, Steal: m.Steal - o.Steal}
}

// ReadMachineCPU reads /proc/stat.
func ReadMachineCPU() (MachineCPU, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return MachineCPU{}, err
	}
	return parseProcStat(b)
}

func parseProcStat(b []byte) (MachineCPU, error) {
	var m MachineCPU
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		if f[0] != "cpu" {
			m.CPUs++
			continue
		}
		// cpu user nice system idle iowait irq softirq steal [guest guest_nice]
		if len(f) < 9 {
			return MachineCPU{}, fmt.Errorf("fleet: /proc/stat cpu line with %d fields, want >= 9", len(f))
		}
		var v [8]float64
		for i := range v {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return MachineCPU{}, fmt.Errorf("fleet: /proc/stat cpu field %d %q: %w", i+1, f[i+1], err)
			}
			v[i] = float64(n) / userHZ
		}
		m.Busy = v[0] + v[1] + v[2] + v[5] + v[6]
		m.Idle = v[3] + v[4]
		m.Steal = v[7]
		found = true
	}
	if !found {
		return MachineCPU{}, fmt.Errorf("fleet: no aggregate cpu line in /proc/stat")
	}
	return m, nil
}
