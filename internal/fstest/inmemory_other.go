//go:build !linux

package fstest

// inMemory is false off Linux, where prism's file layer refuses every
// operation anyway.
func inMemory(string) bool { return false }
