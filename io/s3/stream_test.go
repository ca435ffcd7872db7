package s3_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	ps3 "github.com/prism-hpc/prism/io/s3"
)

// counter is a Timer that counts, and keeps the last target it was given;
// Observe runs under the caller's lock, BeginOn may not.
type counter struct {
	begun    atomic.Int64
	target   atomic.Pointer[string]
	n, bytes int
}

func (c *counter) BeginOn(target *string) time.Time {
	c.begun.Add(1)
	c.target.Store(target)
	return time.Now()
}

// names tells whether every request c timed named url (what a stall
// report would print).
func (c *counter) names(url string) bool {
	p := c.target.Load()
	return p != nil && *p == url
}
func (c *counter) Observe(_ time.Time, n int, _ error) {
	c.n++
	c.bytes += n
}

func partBufs(n, size int) [][]byte {
	b := make([][]byte, n)
	for i := range b {
		b[i] = make([]byte, size)
	}
	return b
}

// A streamed upload of 3.4 parts, written in odd-sized pieces, reads back
// byte for byte through ranged reads at every kind of offset (inside the
// window, across its end, larger than it); an object of less than a part
// is one PUT; each request is observed.
func TestUploadAndRangeReader(t *testing.T) {
	_, c := server(t, ps3.Config{})
	ctx := context.Background()
	const part = ps3.MinPartSize
	body := make([]byte, part*3+2<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range body {
		body[i] = byte(rng.Uint32())
	}
	put, part_, complete := &counter{}, &counter{}, &counter{}
	obs := ps3.UploadObservers{Put: put, Part: part_, Complete: complete}
	up, err := c.NewUpload(ctx, "big", partBufs(2, part), obs)
	if err != nil {
		t.Fatal(err)
	}
	for rest := body; len(rest) > 0; {
		n := min(len(rest), 777_777)
		if _, err := up.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	if err := up.Close(); err != nil {
		t.Fatal(err)
	}
	if part_.n != 4 || complete.n != 1 || put.n != 0 || part_.bytes != len(body) || part_.begun.Load() != 4 {
		t.Errorf("%d parts (%d begun) of %d bytes, %d completes, %d puts; want 4 parts of %d, 1 complete", part_.n, part_.begun.Load(), part_.bytes, complete.n, put.n, len(body))
	}
	if !part_.names("s3://prism-test/big") || !complete.names("s3://prism-test/big") {
		t.Errorf("the upload's requests are not timed on the object's URL: part %v, complete %v", part_.target.Load(), complete.target.Load())
	}
	get := &counter{}
	r := c.NewRangeReader("big", int64(len(body)), make([]byte, part), 3, get)
	for _, rg := range [][2]int64{{0, 4096}, {100, 4096}, {part - 10, 20}, {4096, part * 2}, {int64(len(body)) - 5, 100}} {
		b := make([]byte, rg[1])
		n, err := r.ReadAt(ctx, b, rg[0])
		if err != nil {
			t.Fatalf("ReadAt %v: %v", rg, err)
		}
		want := body[rg[0]:min(rg[0]+rg[1], int64(len(body)))]
		if n != len(want) || !bytes.Equal(b[:n], want) {
			t.Errorf("ReadAt %v: %d bytes, want %d, equal %v", rg, n, len(want), bytes.Equal(b[:n], want))
		}
	}
	// window fill, (inside), fill across, 2 parts direct, fill at the end
	if get.n != 5 || get.begun.Load() != 5 || !get.names("s3://prism-test/big") {
		t.Errorf("%d GETs (%d begun) on %v, want 5 on s3://prism-test/big", get.n, get.begun.Load(), get.target.Load())
	}
	// A read inside the window is a copy: no request, no allocation.
	hit := make([]byte, 4)
	if a := testing.AllocsPerRun(100, func() { r.ReadAt(ctx, hit, int64(len(body))-5) }); a != 0 || get.n != 5 {
		t.Errorf("a read inside the window: %v allocations, %d GETs", a, get.n)
	}
	small, err := c.NewUpload(ctx, "small", partBufs(1, part), obs)
	if err != nil {
		t.Fatal(err)
	}
	small.Write([]byte("tiny"))
	if err := small.Close(); err != nil || put.n != 1 || !put.names("s3://prism-test/small") {
		t.Errorf("small object: %v, %d puts on %v", err, put.n, put.target.Load())
	}
	noUploadsLeft(t, c)
}

func noUploadsLeft(t *testing.T, c *ps3.Client) {
	t.Helper()
	ups, err := c.ListUploads(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(ups) != 0 {
		t.Errorf("uploads left in progress: %v", ups)
	}
}

// An upload cancelled after parts went out, or aborted by its writer,
// leaves neither the object nor the upload on the server.
func TestUploadCancelledIsAborted(t *testing.T) {
	_, c := server(t, ps3.Config{})
	for _, how := range []string{"cancel", "abort"} {
		ctx, cancel := context.WithCancel(context.Background())
		up, err := c.NewUpload(ctx, how, partBufs(2, ps3.MinPartSize), ps3.UploadObservers{})
		if err != nil {
			t.Fatal(err)
		}
		chunk := make([]byte, ps3.MinPartSize)
		for range 2 {
			if _, err := up.Write(chunk); err != nil {
				t.Fatal(err)
			}
		}
		switch how {
		case "cancel":
			cancel()
			_, err = up.Write(chunk)
			if err == nil {
				err = up.Close()
			} else {
				err = up.Abort(err)
			}
		case "abort":
			err = up.Abort(errors.New("the writer failed"))
		}
		cancel()
		if err == nil {
			t.Errorf("%s: no error", how)
		}
		if _, herr := c.Head(context.Background(), how); !ps3.IsNotFound(herr) {
			t.Errorf("%s: the object exists after the failed upload (%v)", how, herr)
		}
	}
	noUploadsLeft(t, c)
}

// Writes that fill no part are copies into the part buffer: no request,
// no allocation (a checkpoint writer calls Write per tensor chunk).
func TestUploadWriteAllocs(t *testing.T) {
	c, err := ps3.New(context.Background(), ps3.Config{Bucket: "no-server", Endpoint: "http://127.0.0.1:1", PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	up, err := c.NewUpload(context.Background(), "k", partBufs(1, ps3.MinPartSize), ps3.UploadObservers{})
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	if a := testing.AllocsPerRun(200, func() { up.Write(chunk) }); a != 0 {
		t.Errorf("Write: %v allocations per call", a)
	}
	if up.Size() != 201*4096 {
		t.Errorf("size %d after 201 writes of 4096", up.Size())
	}
	if err := up.Abort(errors.New("test done")); err == nil || err.Error() != "test done" {
		t.Errorf("Abort before any request: %v", err)
	}
}
