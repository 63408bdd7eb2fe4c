package prio

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

// statNice reads the nice field of a /proc stat line. The command name (field
// 2) is in parentheses and may hold spaces, so fields are counted after the
// last ')'.
func statNice(b []byte) (int, error) {
	i := len(b) - 1
	for i >= 0 && b[i] != ')' {
		i--
	}
	if i < 0 {
		return 0, fmt.Errorf("stat line without a command name")
	}
	// After ')' come field 3 (state) onwards; nice is field 19.
	field, start := 2, -1
	for j := i + 1; j < len(b); j++ {
		if b[j] == ' ' {
			if start >= 0 {
				if field == 19 {
					return strconv.Atoi(string(b[start:j]))
				}
				start = -1
			}
			continue
		}
		if start < 0 {
			start = j
			field++
		}
	}
	return 0, fmt.Errorf("stat line has no field 19")
}
