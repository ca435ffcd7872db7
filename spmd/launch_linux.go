package spmd

import "syscall"

// childProcAttr puts each child in a process group of its own, so that a
// terminal's Ctrl-C reaches the children once, through Launch's forwarding,
// instead of twice; and has the kernel kill a child whose launcher died, so
// no rank outlives its job.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
