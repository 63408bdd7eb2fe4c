package fleet

import (
	"math"
	"os"
	"testing"
)

func TestParseStat(t *testing.T) {
	// A command name with a space and a ')' of its own; minflt 500 (cminflt
	// 7 beside it), utime 1234, stime 566.
	line := []byte("4242 (odd) name) S 1 4242 4242 0 -1 4194560 500 7 0 0 1234 566 0 0 20 0 12 0 100 1000 200 18446744073709551615\n")
	got, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if want := 18.0; math.Abs(got.CPUSeconds-want) > 1e-9 {
		t.Fatalf("cpu = %v s, want %v (utime 1234 + stime 566 ticks at 100/s)", got.CPUSeconds, want)
	}
	if got.MinorFaults != 500 {
		t.Fatalf("minor faults = %d, want 500", got.MinorFaults)
	}
	for _, bad := range []string{"no name here", "1 (x) S 1 2 3", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 abc 5 0", "1 (x) S 1 1 1 0 -1 0 x 0 0 0 4 5 0"} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q): no error", bad)
		}
	}
}

func TestReadUsageOfSelf(t *testing.T) {
	u, err := ReadUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Touch fresh memory: each new page (or huge page, where the kernel
	// backs the heap with them) is a minor fault.
	b := make([]byte, 64<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	u2, err := ReadUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if d := u2.MinorFaults - u.MinorFaults; d < 16 {
		t.Fatalf("minor faults rose by %d after touching 64 MiB of fresh memory", d)
	}
	_ = b[len(b)-1]
}

func TestParseProcStat(t *testing.T) {
	in := "cpu  100 1 50 1000 20 3 4 7 0 0\ncpu0 50 1 25 500 10 2 2 4 0 0\ncpu1 50 0 25 500 10 1 2 3 0 0\nintr 1 2 3\n"
	m, err := parseProcStat([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := MachineCPU{CPUs: 2, Busy: (100 + 1 + 50 + 3 + 4) / 100.0, Idle: (1000 + 20) / 100.0, Steal: 7 / 100.0}
	if m != want {
		t.Fatalf("got %+v, want %+v", m, want)
	}
	if d := m.Sub(MachineCPU{Busy: 1, Idle: 2, Steal: 0.05}); math.Abs(d.Busy-0.58) > 1e-9 || math.Abs(d.Idle-8.2) > 1e-9 || math.Abs(d.Steal-0.02) > 1e-9 || d.CPUs != 2 {
		t.Fatalf("Sub = %+v", d)
	}
	if _, err := parseProcStat([]byte("intr 1\n")); err == nil {
		t.Fatal("no cpu line: no error")
	}
}

func TestCPUSecondsGrowsWithWork(t *testing.T) {
	before, err := CPUSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Spin until the kernel has charged at least 5 ticks more: bounded by
	// work done, not by a clock.
	x := 1.0
	for i := 0; ; i++ {
		for j := 0; j < 1_000_000; j++ {
			x = x*1.0000001 + 1e-9
		}
		now, err := CPUSeconds(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if now-before >= 0.05 {
			break
		}
		if i > 100_000 {
			t.Fatalf("cpu time stuck at %v s after heavy work (x=%v)", now, x)
		}
	}
	m, err := ReadMachineCPU()
	if err != nil {
		t.Fatal(err)
	}
	if m.CPUs < 1 || m.Busy <= 0 {
		t.Fatalf("machine cpu %+v", m)
	}
}
