package s3_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	ps3 "github.com/prism-hpc/prism/io/s3"
	"github.com/prism-hpc/prism/io/s3/s3test"
)

// A server killed during a loop of PUTs: the next PUT fails at once with
// an error that names the endpoint and why. That PUT may take a pooled
// connection the kernel has not yet reported closed (then the write meets
// a reset or broken pipe); the one after dials, and is refused.
func TestServerKilledDuringPuts(t *testing.T) {
	ctx := context.Background()
	srv, c := server(t, ps3.Config{RequestTimeout: 10 * time.Second})
	body := random(1, 4096)
	var err error
	var at int
	start := time.Now()
	for at = 0; at < 10000; at++ {
		if at == 50 {
			srv.Kill()
			start = time.Now()
		}
		if err = c.Put(ctx, fmt.Sprintf("loop/%d", at), body); err != nil {
			break
		}
	}
	took := time.Since(start)
	t.Log(err)
	if at != 50 {
		t.Fatalf("the first failure came at PUT %d (err %v), want the first after the kill (50)", at, err)
	}
	e := asError(t, err)
	refused := errors.Is(err, syscall.ECONNREFUSED) && strings.Contains(err.Error(), "nothing listens")
	broken := (errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) || strings.Contains(err.Error(), "EOF")) &&
		strings.Contains(err.Error(), "closed the connection")
	if e.Status != 0 || e.Endpoint != srv.Endpoint || !refused && !broken {
		t.Errorf("after the kill: %v (%+v); want refused or broken at %s, with a remedy", err, e, srv.Endpoint)
	}
	err = c.Put(ctx, "loop/after", body)
	t.Log(err)
	if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "nothing listens") {
		t.Errorf("the PUT after the first failure: %v; want connection refused", err)
	}
	if took > 5*time.Second {
		t.Errorf("the failure took %v", took)
	}
}

// A server killed while a multipart upload is in flight: the upload fails
// within the request timeout, says which part and where, and reports that
// the abort could not reach the server either.
func TestServerKilledDuringMultipart(t *testing.T) {
	ctx := context.Background()
	srv, c := server(t, ps3.Config{RequestTimeout: 20 * time.Second})
	body := random(2, 16*ps3.MinPartSize)
	var once sync.Once
	var killedAt time.Time
	_, err := c.UploadMultipart(ctx, "mp/killed", body, ps3.Multipart{
		PartSize: ps3.MinPartSize, Concurrency: 4,
		Observe: func(w int, start time.Time, n int, err error) {
			if err == nil {
				once.Do(func() { srv.Kill(); killedAt = time.Now() })
			}
		},
	})
	if killedAt.IsZero() {
		t.Fatalf("no part succeeded before the kill: %v", err)
	}
	took := time.Since(killedAt)
	t.Log(err)
	if err == nil {
		t.Fatal("the upload succeeded with the server killed after its first part")
	}
	e := asError(t, err)
	if e.Op != "multipart_part" || e.Endpoint != srv.Endpoint || e.Key != "mp/killed" || !strings.Contains(e.Message, "part ") {
		t.Errorf("got %v (%+v); want a multipart_part error naming the part, key and endpoint", err, e)
	}
	if !strings.Contains(err.Error(), "aborting upload") {
		t.Errorf("%v: want it to say the abort failed too", err)
	}
	if took > 20*time.Second {
		t.Errorf("the upload took %v to fail after the kill", took)
	}
}

// Nothing listens on the port: refused at once, with the remedy. With
// retries on, every attempt is counted.
func TestClosedPort(t *testing.T) {
	ctx := context.Background()
	ep := s3test.ClosedPort(t)
	s3test.ServerEnv(t)
	for _, attempts := range []int{1, 3} {
		c, err := ps3.New(ctx, ps3.Config{Bucket: "prism-test", Endpoint: ep, PathStyle: true, MaxAttempts: attempts})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = c.Put(ctx, "x", []byte("x"))
		took := time.Since(start)
		t.Log(err)
		e := asError(t, err)
		if !errors.Is(err, syscall.ECONNREFUSED) || e.Endpoint != ep || e.Attempts != attempts || !strings.Contains(err.Error(), "nothing listens") {
			t.Errorf("attempts %d: %v (%+v); want connection refused at %s after %d attempts", attempts, err, e, ep, attempts)
		}
		want := map[string]int64{}
		if attempts > 1 {
			want["put"] = int64(attempts - 1)
		}
		if got := c.Retries(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("attempts %d: Retries() = %v, want %v", attempts, got, want)
		}
		// The SDK's backoff is at most 2s, then 4s, between attempts.
		if took > time.Duration(1+2*attempts*attempts)*time.Second {
			t.Errorf("attempts %d: took %v", attempts, took)
		}
	}
}

// A server that accepts and then never answers: the request timeout ends
// the request, and the error says which timeout it was.
func TestRequestTimeout(t *testing.T) {
	ctx := context.Background()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, conn)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	s3test.ServerEnv(t)
	ep := "http://" + l.Addr().String()
	const timeout = 700 * time.Millisecond
	c, err := ps3.New(ctx, ps3.Config{Bucket: "prism-test", Endpoint: ep, PathStyle: true, RequestTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Get(ctx, "stalled", make([]byte, 10))
	took := time.Since(start)
	t.Log(err)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !strings.Contains(err.Error(), "request_timeout") {
		t.Fatalf("got %v; want a request timeout", err)
	}
	if took < timeout || took > 10*timeout {
		t.Errorf("failed after %v with a %v request timeout", took, timeout)
	}
}
