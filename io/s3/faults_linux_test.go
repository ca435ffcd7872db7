package s3_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	ps3 "github.com/prism-hpc/prism/io/s3"
	"github.com/prism-hpc/prism/io/s3/s3test"
)

// An endpoint that never answers the SYN: the error comes after the
// connect timeout, says so, and names the endpoint.
func TestConnectTimeout(t *testing.T) {
	ctx := context.Background()
	ep := "http://" + s3test.Blackhole(t)
	s3test.ServerEnv(t)
	const timeout = 500 * time.Millisecond
	c, err := ps3.New(ctx, ps3.Config{Bucket: "prism-test", Endpoint: ep, PathStyle: true, ConnectTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = c.HeadBucket(ctx)
	took := time.Since(start)
	t.Log(err)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !strings.Contains(err.Error(), "connect_timeout") || !strings.Contains(err.Error(), ep) {
		t.Fatalf("got %v; want a dial timeout naming %s and connect_timeout", err, ep)
	}
	if took < timeout || took > 10*timeout {
		t.Errorf("failed after %v with a %v connect timeout", took, timeout)
	}
}

// VersityGW's posix backend keeps ETags in user xattrs; on ramfs, which has
// none, the harness switches it to a sidecar directory and it still works.
func TestServerWithoutXattrs(t *testing.T) {
	if unix.Geteuid() != 0 {
		t.Skip("mounting a ramfs needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("s3-ramfs", dir, "ramfs", 0, "mode=0755"); err != nil {
		t.Fatalf("mount ramfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	srv, err := s3test.Start(s3test.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	if !srv.Sidecar {
		t.Fatal("on ramfs the server did not switch to a sidecar")
	}
	srv.SetEnv(t)
	c := client(t, srv, ps3.Config{})
	body := random(3, 10000)
	if err := c.Put(context.Background(), "side/x", body); err != nil {
		t.Fatal(err)
	}
	info, err := c.Head(context.Background(), "side/x")
	if err != nil || info.Size != int64(len(body)) || info.ETag != md5ETag(body) {
		t.Errorf("Head on the sidecar server = %+v, %v; want size %d ETag %s", info, err, len(body), md5ETag(body))
	}
	// And the ordinary test directory (ext4 or tmpfs here) keeps xattrs.
	if plain := s3test.StartT(t); plain.Sidecar {
		t.Errorf("%s has user xattrs but the server used a sidecar", plain.DataDir)
	}
}
