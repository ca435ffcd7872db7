//go:build !linux

package main

import "errors"

func probeDirect(string) error { return errors.New("O_DIRECT is not supported on this OS") }

func memInfo() (total, available int64, err error) {
	return 0, 0, errors.New("memory facts are read from /proc/meminfo, on Linux only")
}
