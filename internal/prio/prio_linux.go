package prio

import (
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/harnessflow/harnessflow/internal/procstat"
)

// setNice sets n on every thread in /proc/self/task. A thread cloned while
// the list is walked may have copied its creator's old value, so the walk
// repeats until a pass finds every thread already at n.
func setNice(n int) error {
	for pass := 0; pass < 10; pass++ {
		tids, err := threads()
		if err != nil {
			return err
		}
		changed := false
		for _, tid := range tids {
			cur, err := Nice(tid)
			if err != nil {
				continue // the thread exited
			}
			if cur == n {
				continue
			}
			if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, n); err != nil {
				if err == syscall.ESRCH {
					continue
				}
				return fmt.Errorf("set nice %d on thread %d: %w", n, tid, err)
			}
			changed = true
		}
		if !changed {
			return nil
		}
	}
	return fmt.Errorf("set nice %d: threads kept appearing with another value", n)
}

// threads lists the process's thread ids.
func threads() ([]int, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("list threads: %w", err)
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// Nice returns the nice value of thread tid of this process (field 19 of
// /proc/self/task/TID/stat).
func Nice(tid int) (int, error) {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		return 0, err
	}
	return statNice(b)
}

// statNice reads the nice field (19) of a /proc stat line.
func statNice(b []byte) (int, error) {
	f, err := procstat.Fields(b, 19-2)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(f[19-3])
}
