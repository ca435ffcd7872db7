package io

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// Inputs prism reads from the user (plans, fio job files, model configs)
// are small text files. ReadInput reads one so that a careless or hostile
// name cannot take prism down: /dev/zero or a huge file is refused at
// MaxInput bytes instead of being read whole into memory, a device or a
// directory is refused outright, and a file that never answers
// (/proc/kmsg, a FIFO nobody writes, a hung network filesystem) fails at
// the deadline instead of hanging.

// MaxInput bounds every input file prism reads (16 MiB): far above any
// real plan, job file or config.json.
const MaxInput = 16 << 20

// InputTimeout is how long ReadInput waits for an input file's bytes.
const InputTimeout = 10 * time.Second

// ErrInputTooLarge is returned for an input file over its limit.
var ErrInputTooLarge = errors.New("io: input file too large")

// ReadInput reads the regular file (or pipe: `prism run /dev/stdin`) at
// path, at most limit bytes, within timeout. What it is not — a device, a
// directory, a socket — is an error naming what it is.
func ReadInput(path string, limit int64, timeout time.Duration) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	// The open is inside the deadline too: opening a FIFO blocks until a
	// writer comes, and a stat of a dead NFS mount never returns.
	go func() {
		b, err := readInput(path, limit)
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		return r.b, r.err
	case <-time.After(timeout):
		// The reader goroutine stays blocked in the kernel; a process that
		// fails its input has nothing better to do with it.
		return nil, fmt.Errorf("%s: no data after %s: not a file prism can read (a device, a FIFO without a writer, a hung filesystem?)", path, timeout)
	}
}

func readInput(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	switch m := st.Mode(); {
	case m.IsRegular():
		if st.Size() > limit {
			return nil, fmt.Errorf("%s: %d bytes: %w (the limit is %d bytes)", path, st.Size(), ErrInputTooLarge, limit)
		}
	case m&fs.ModeNamedPipe != 0:
	default:
		return nil, fmt.Errorf("%s: a %s, not a regular file", path, fileKind(m))
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: more than %d bytes: %w", path, limit, ErrInputTooLarge)
	}
	return b, nil
}

func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	}
	return "special file"
}
