//go:build !linux

package spmd

import "syscall"

// childProcAttr leaves the children in Launch's process group on systems
// without a parent-death signal: there, a launcher killed outright would
// leave its children running, which is worse than a doubled Ctrl-C.
func childProcAttr() *syscall.SysProcAttr { return nil }
