package s3test

import (
	"fmt"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Blackhole returns a local address whose SYNs go unanswered: a listener
// with a backlog of 0 whose one queue slot is taken, so the kernel drops
// further connection attempts, as a firewall that drops packets would.
func Blackhole(t testing.TB) string {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
	for range 8 {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return addr // the queue is full: this dial went unanswered
		}
		t.Cleanup(func() { conn.Close() })
	}
	t.Fatalf("%s accepted 8 connections with a backlog of 0; cannot build a blackhole", addr)
	return ""
}
