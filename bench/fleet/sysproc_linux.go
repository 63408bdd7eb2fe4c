//go:build linux

package fleet

import "syscall"

// sysProcAttr asks the kernel to SIGKILL the child when the driver dies, so a
// crashed or interrupted run leaves no components behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
