// Package proc holds helpers about this and other processes on Linux: the
// fields of /proc/PID/stat files, and a process's CPU scheduling priority (its
// nice value), so that a background component yields the CPUs to the ingest
// path when they share a machine.
package proc

import "fmt"

// MaxNice is the lowest priority Linux knows.
const MaxNice = 19

// SetNice gives the whole process the nice value n (0 to MaxNice; 0 leaves
// the priority alone). Raising the nice value needs no privilege. On Linux a
// nice value belongs to each thread and a new thread inherits its creator's,
// so every thread the process has is set, and so is every thread it creates
// afterwards. Elsewhere the process's priority is set.
func SetNice(n int) error {
	if n < 0 || n > MaxNice {
		return fmt.Errorf("nice %d: must be between 0 and %d (0 keeps the priority)", n, MaxNice)
	}
	if n == 0 {
		return nil
	}
	return setNice(n)
}
