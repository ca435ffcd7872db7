package phases

import (
	"context"
	"os/exec"
	"syscall"
	"time"
)

// Command returns the exec.Cmd of a program a phase runs (git, fio), in
// dir, bounded the way every wait of prism is: it runs in a process group
// of its own, which is killed as a whole when ctx ends (SIGKILL to the
// group: git's remote helpers, fio's job processes go with it), and Wait
// gives up WaitDelay after that even if a grandchild still holds the
// output pipes open (a git helper stuck on a server that never answers
// would otherwise keep Wait, and with it SIGINT and SIGTERM, waiting
// forever). A program that must stop gracefully can set Cancel itself.
func Command(ctx context.Context, dir, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return KillGroup(cmd, syscall.SIGKILL) }
	cmd.WaitDelay = CommandWaitDelay
	return cmd
}

// CommandWaitDelay is how long Wait waits for a killed program's output
// pipes to close.
const CommandWaitDelay = 2 * time.Second

// KillGroup sends sig to the process group of a started cmd (Command puts
// it in a group of its own).
func KillGroup(cmd *exec.Cmd, sig syscall.Signal) error {
	if cmd.Process == nil {
		return nil
	}
	if err := syscall.Kill(-cmd.Process.Pid, sig); err != nil {
		return cmd.Process.Signal(sig)
	}
	return nil
}
