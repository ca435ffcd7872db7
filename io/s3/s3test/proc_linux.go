package s3test

import "syscall"

// The server dies with the thread that started it (Pdeathsig), so a test
// binary killed by its timeout does not leave it running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
