//go:build !linux

package chserver

import "syscall"

// sysProcAttr puts the child in its own process group; outside Linux there is
// no parent-death signal, so callers must Stop the server (testenv.Main does).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
