package report

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Result files are created mode 0666 masked by the umask, as open(2) with
// O_CREAT does and as fio, IOR and mdtest leave theirs, so colleagues, CI
// runners and web servers can read them from a shared filesystem.
// os.CreateTemp (needed for the atomic rename) makes 0600 files whatever
// the umask, so WriteFileAtomic chmods the temporary file before the
// rename. The umask is read once, at start: umask(2) can only be read by
// setting it, and setting it while other goroutines create files would
// give those files the wrong mode.
var umask atomic.Uint32

func init() { umask.Store(uint32(readUmask())) }

// readUmask returns the process umask: from /proc/self/status (Linux
// 4.7+), which reads it without changing it, else by setting and
// restoring it at once (done before any goroutine creates files).
func readUmask() int {
	if f, err := os.Open("/proc/self/status"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "Umask:"); ok {
				if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
					return int(m) & 0o777
				}
			}
		}
	}
	old := unix.Umask(0o022)
	unix.Umask(old)
	return old & 0o777
}

// ResultFileMode is the mode of the result files: 0666 masked by the
// process umask.
func ResultFileMode() os.FileMode { return os.FileMode(0o666 &^ umask.Load()) }
