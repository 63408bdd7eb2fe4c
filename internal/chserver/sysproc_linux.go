//go:build linux

package chserver

import "syscall"

// sysProcAttr makes the child its own process group (so a terminal's SIGINT
// reaches only harnessflow, which then stops the server cleanly) and asks the
// kernel to SIGKILL it if the parent dies without stopping it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
