package proc

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
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
			cur, err := niceOf(tid)
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

// niceOf returns the nice value (field 19 of /proc/self/task/TID/stat) of
// thread tid of this process.
func niceOf(tid int) (int, error) {
	f, err := ReadStat("/proc/self/task/"+strconv.Itoa(tid)+"/stat", 19-2)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(f[19-3])
}
