//go:build !linux

package phases

// prism runs on Linux; these twins let the framework build and vet
// elsewhere (GOOS=darwin go vet ./...), where the io package refuses
// every operation with io.ErrUnsupported.

func hostMemory() int64 { return 0 }

func isTerminal(fd uintptr) bool { return false }

func termWidth(fd uintptr) int { return 0 }
