package phases

import "golang.org/x/sys/unix"

// hostMemory is this host's memory in bytes (0 when unknown).
func hostMemory() int64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}

// isTerminal tells whether fd is a terminal (progress lines redraw there).
func isTerminal(fd uintptr) bool {
	_, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
	return err == nil
}

// termWidth is the width in columns of the terminal fd, 0 when unknown.
func termWidth(fd uintptr) int {
	ws, err := unix.IoctlGetWinsize(int(fd), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}
