package fleet

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestKillRestartStop(t *testing.T) {
	log := filepath.Join(t.TempDir(), "child.log")
	p := &Proc{Name: "sleeper", Bin: "/bin/sh", Args: []string{"-c", "echo up; exec sleep 30"}, LogPath: log}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err == nil {
		t.Fatal("second Start while running succeeded")
	}
	waitLog(t, log, 1)
	first := p.Pid()
	if first == 0 || !p.Running() {
		t.Fatal("not running after Start")
	}
	if mb := p.PeakRSSMB(); mb <= 0 {
		t.Fatalf("peak RSS %v, want > 0", mb)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Done not closed after Kill")
	}
	if p.Running() || p.ExitErr() == nil {
		t.Fatalf("after SIGKILL: running %v, exit %v", p.Running(), p.ExitErr())
	}
	if err := p.Kill(); err == nil {
		t.Fatal("Kill of a dead child succeeded")
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	waitLog(t, log, 2)
	if p.Pid() == first || p.Starts() != 2 || p.Kills() != 1 {
		t.Fatalf("pid %d (first %d), starts %d, kills %d", p.Pid(), first, p.Starts(), p.Kills())
	}
	// sleep dies of SIGTERM: not a clean exit, reported as such.
	if err := p.Close(5 * time.Second); err == nil || !strings.Contains(err.Error(), "sleeper") {
		t.Fatalf("Close of a child killed by SIGTERM: %v", err)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(b), "up\n"); got != 2 {
		t.Fatalf("log has %d lives' output, want 2:\n%s", got, b)
	}
}

func TestStopEscalatesToKill(t *testing.T) {
	log := filepath.Join(t.TempDir(), "child.log")
	p := &Proc{Name: "stubborn", Bin: "/bin/sh", Args: []string{"-c", "trap '' TERM; echo up; while :; do sleep 0.05; done"}, LogPath: log}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	waitLog(t, log, 1) // the trap is set
	err := p.Stop(300 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("Stop of a child ignoring SIGTERM: %v", err)
	}
	if p.Running() {
		t.Fatal("still running")
	}
}

func TestStopClean(t *testing.T) {
	log := filepath.Join(t.TempDir(), "child.log")
	p := &Proc{Name: "clean", Bin: "/bin/sh", Args: []string{"-c", "trap 'exit 0' TERM; echo up; while :; do sleep 0.05; done"}, LogPath: log}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	waitLog(t, log, 1) // the trap is set
	if err := p.Stop(5 * time.Second); err != nil {
		t.Fatalf("clean stop: %v", err)
	}
}

func TestPeakRSSKBSelf(t *testing.T) {
	kb, err := PeakRSSKB(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if kb < 1024 {
		t.Fatalf("own VmHWM %d kB, implausibly small", kb)
	}
}

// TestResetPeakStartsANewMeasurement runs a child that touches 256 MiB,
// returns it to the kernel and idles: its peak is over 256 MiB, and after
// ResetPeak the peak is what it holds now.
func TestResetPeakStartsANewMeasurement(t *testing.T) {
	log := filepath.Join(t.TempDir(), "child.log")
	p := &Proc{Name: "alloc", Bin: os.Args[0], Args: []string{"-test.run=^TestHelperAllocThenFree$"},
		Env: []string{"FLEET_HELPER=alloc"}, LogPath: log}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	waitLog(t, log, 1)
	before := p.PeakRSSMB()
	if before < 256 {
		t.Fatalf("peak RSS %.0f MiB after touching 256 MiB", before)
	}
	if err := p.ResetPeak(); err != nil {
		t.Fatal(err)
	}
	// The 256 MiB returned to the kernel is no longer in the peak (the
	// child's other memory, larger under -race, is).
	if after := p.PeakRSSMB(); after > before-128 {
		t.Fatalf("peak RSS after ResetPeak %.0f MiB, before %.0f MiB: not reset", after, before)
	}
}

// TestHelperAllocThenFree is the child of TestResetPeakStartsANewMeasurement;
// it does nothing unless FLEET_HELPER=alloc.
func TestHelperAllocThenFree(t *testing.T) {
	if os.Getenv("FLEET_HELPER") != "alloc" {
		return
	}
	b := make([]byte, 256<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	b = nil
	debug.FreeOSMemory()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	fmt.Println("up")
	<-stop // idle until the parent stops or kills it
}

// waitLog waits until the child log holds n lives' "up" lines. The
// deadline is generous: under -race on a loaded two-core CI machine, a test
// binary touching 256 MiB can take well over five seconds to say "up". It is
// a deadline for a hung child, not a speed assertion.
func waitLog(t *testing.T, path string, n int) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(path)
		if strings.Count(string(b), "up\n") >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	b, _ := os.ReadFile(path)
	t.Fatalf("child log %s never showed %d starts; it holds:\n%s", path, n, b)
}
