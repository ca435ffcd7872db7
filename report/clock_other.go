//go:build !amd64

package report

func rdtsc() int64 { return 0 }
