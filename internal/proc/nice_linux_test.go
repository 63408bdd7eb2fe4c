package proc

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// TestMain lets TestSetNiceEveryThread run its check in a child process, so
// that the test binary itself keeps its priority.
func TestMain(m *testing.M) {
	if os.Getenv("HF_PRIO_CHILD") == "1" {
		if err := childCheck(); err != nil {
			fmt.Println("FAIL:", err)
			os.Exit(1)
		}
		fmt.Println("OK")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// lockThreads starts n goroutines that each hold an OS thread of their own
// until release is closed, so the process has at least n more threads.
func lockThreads(n int, release <-chan struct{}) {
	var started sync.WaitGroup
	for i := 0; i < n; i++ {
		started.Add(1)
		go func() {
			runtime.LockOSThread()
			started.Done()
			<-release
		}()
	}
	started.Wait()
}

func childCheck() error {
	before := make(chan struct{})
	defer close(before)
	lockThreads(4, before) // threads that exist before SetNice
	if err := SetNice(7); err != nil {
		return err
	}
	after := make(chan struct{})
	defer close(after)
	lockThreads(4, after) // threads created after it
	tids, err := threads()
	if err != nil {
		return err
	}
	if len(tids) < 9 {
		return fmt.Errorf("only %d threads, want at least 9", len(tids))
	}
	var bad []string
	for _, tid := range tids {
		n, err := niceOf(tid)
		if err != nil {
			continue
		}
		if n != 7 {
			bad = append(bad, fmt.Sprintf("thread %d at %d", tid, n))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%d of %d threads not at nice 7: %s", len(bad), len(tids), strings.Join(bad, ", "))
	}
	return nil
}

func TestSetNiceEveryThread(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "HF_PRIO_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func TestSetNiceRange(t *testing.T) {
	t.Parallel()
	for _, n := range []int{-1, 20} {
		if err := SetNice(n); err == nil {
			t.Errorf("SetNice(%d) accepted", n)
		}
	}
	if err := SetNice(0); err != nil {
		t.Errorf("SetNice(0): %v", err)
	}
}

func TestNiceOf(t *testing.T) {
	t.Parallel()
	own, err := niceOf(os.Getpid()) // the main thread's id is the process id
	if err != nil {
		t.Fatal(err)
	}
	if own < -20 || own > MaxNice {
		t.Errorf("own nice %d out of range", own)
	}
	if _, err := niceOf(-1); err == nil {
		t.Error("thread -1 answered")
	}
}
