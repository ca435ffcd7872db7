package s3test

import (
	"context"
	"fmt"
	"net"
	"testing"

	ps3 "github.com/prism-hpc/prism/io/s3"
)

// Client returns a client of bucket on the server, creating the bucket
// when it does not exist. The test's AWS environment must reach the
// server (SetEnv). Its connections are closed when the test ends.
func (s *Server) Client(t testing.TB, bucket string) *ps3.Client {
	t.Helper()
	ctx := context.Background()
	c, err := ps3.New(ctx, ps3.Config{Bucket: bucket, Endpoint: s.Endpoint, PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	// Idle keep-alive connections hold up the server's exit on SIGTERM;
	// this cleanup runs before StartT's stop.
	t.Cleanup(c.Close)
	if err := c.HeadBucket(ctx); ps3.IsNotFound(err) {
		if err := c.CreateBucket(ctx); err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
	return c
}

// PlanLines are the [plan] keys that point a prism plan at prefix of
// bucket on the server.
func (s *Server) PlanLines(bucket, prefix string) string {
	return fmt.Sprintf("storage = %q\ns3_endpoint = %q", "s3://"+bucket+"/"+prefix, s.Endpoint)
}

// Keys lists every key of the bucket, for tests that check what a run
// left behind.
func Keys(t testing.TB, c *ps3.Client) []string {
	t.Helper()
	var keys []string
	token := ""
	for {
		p, err := c.List(context.Background(), "", 1000, token)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range p.Objects {
			keys = append(keys, o.Key)
		}
		if token = p.Next; token == "" {
			return keys
		}
	}
}

// ClosedPort is an endpoint on 127.0.0.1 where nothing listens: a port
// taken from the kernel and given back, so a connection is refused at once.
func ClosedPort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := "http://" + l.Addr().String()
	l.Close()
	return ep
}
