package main

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	pio "github.com/prism-hpc/prism/io"
)

// probeDirect proves that dir's filesystem takes O_DIRECT: it creates a
// file of a new name prism makes (O_EXCL, so never one that was there),
// opened with O_DIRECT, writes one aligned block through it and removes
// it. Only that file is ever removed.
func probeDirect(dir string) error {
	rnd := make([]byte, 6)
	_, _ = rand.Read(rnd)
	name := filepath.Join(dir, ".prism-check-direct-"+hex.EncodeToString(rnd))
	p, err := pio.NewPath(name)
	if err != nil {
		return err
	}
	fd, err := pio.OpenDirect(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	var de *pio.DirectError
	switch {
	case err == nil:
		defer os.Remove(name)
	case errors.As(err, &de):
		// O_CREAT made the file before the kernel refused O_DIRECT.
		os.Remove(name)
		return err
	default:
		return err // not created (EEXIST: not prism's, left alone)
	}
	_, err = pio.PwriteFull(fd, pio.AlignedBuffer(pio.DirectAlign, pio.DirectAlign), 0)
	if cerr := pio.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("O_DIRECT write of %d bytes to %s: %w", pio.DirectAlign, name, err)
	}
	return nil
}

// memInfo reads MemTotal and MemAvailable from /proc/meminfo, in bytes.
func memInfo() (total, available int64, err error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, perr := strconv.ParseInt(fields[1], 10, 64)
		switch {
		case perr != nil:
		case fields[0] == "MemTotal:":
			total = kb << 10
		case fields[0] == "MemAvailable:":
			available = kb << 10
		}
	}
	if total == 0 {
		return 0, 0, errors.New("/proc/meminfo: no MemTotal")
	}
	return total, available, sc.Err()
}
