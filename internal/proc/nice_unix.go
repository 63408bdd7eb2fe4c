//go:build unix && !linux

package proc

import (
	"fmt"
	"syscall"
)

func setNice(n int) error {
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, 0, n); err != nil {
		return fmt.Errorf("set nice %d: %w", n, err)
	}
	return nil
}
