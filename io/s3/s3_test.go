package s3_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ps3 "github.com/prism-hpc/prism/io/s3"
	"github.com/prism-hpc/prism/io/s3/s3test"
)

// server starts a VersityGW for the test, points the AWS environment at
// it, and returns a client on a fresh bucket.
func server(t *testing.T, cfg ps3.Config) (*s3test.Server, *ps3.Client) {
	t.Helper()
	srv := s3test.StartT(t)
	srv.SetEnv(t)
	return srv, client(t, srv, cfg)
}

func client(t *testing.T, srv *s3test.Server, cfg ps3.Config) *ps3.Client {
	t.Helper()
	if cfg.Bucket == "" {
		cfg.Bucket = "prism-test"
	}
	if cfg.Endpoint == "" {
		cfg.Endpoint = srv.Endpoint
	}
	cfg.PathStyle = true
	c, err := ps3.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.HeadBucket(context.Background()); ps3.IsNotFound(err) {
		if err := c.CreateBucket(context.Background()); err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
	return c
}

func random(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	r.Read(b)
	return b
}

func md5ETag(b []byte) string {
	s := md5.Sum(b)
	return `"` + hex.EncodeToString(s[:]) + `"`
}

func asError(t *testing.T, err error) *ps3.Error {
	t.Helper()
	var e *ps3.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *s3.Error", err, err)
	}
	return e
}

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	_, c := server(t, ps3.Config{})
	for i, size := range []int{1, 4096, 1<<20 + 3} {
		key := fmt.Sprintf("rt/obj-%d", size)
		body := random(uint64(i), size)
		if err := c.Put(ctx, key, body); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, size+100)
		n, err := c.Get(ctx, key, buf)
		if err != nil || n != size || !bytes.Equal(buf[:n], body) {
			t.Fatalf("Get %s = %d, %v; want the %d bytes put", key, n, err, size)
		}
		info, err := c.Head(ctx, key)
		if err != nil || info.Size != int64(size) || info.ETag != md5ETag(body) {
			t.Fatalf("Head %s = %+v, %v; want size %d ETag %s", key, info, err, size, md5ETag(body))
		}
		for _, r := range [][2]int{{0, 1}, {0, size}, {size / 2, size - size/2}, {size - 1, 1}, {size / 3, size / 3}} {
			off, ln := r[0], r[1]
			if ln == 0 {
				continue
			}
			rb := make([]byte, ln)
			n, err := c.GetRange(ctx, key, int64(off), int64(ln), rb)
			if err != nil || n != ln || !bytes.Equal(rb, body[off:off+ln]) {
				t.Fatalf("GetRange %s [%d,+%d) = %d, %v; want the bytes put", key, off, ln, n, err)
			}
		}
		if size > 1 {
			// The object does not fit: refused, not truncated.
			if _, err := c.Get(ctx, key, make([]byte, size-1)); err == nil || !strings.Contains(err.Error(), "the buffer") {
				t.Errorf("Get into a buffer one byte short: %v, want a refusal", err)
			}
			// A range past the end comes back short: refused.
			if _, err := c.GetRange(ctx, key, int64(size-1), 2, make([]byte, 2)); err == nil || !strings.Contains(err.Error(), "short read") {
				t.Errorf("GetRange past the end: %v, want a short-read error", err)
			}
		}
	}
	_, err := c.Get(ctx, "rt/missing", make([]byte, 10))
	if e := asError(t, err); e.Status != 404 || e.Code != "NoSuchKey" || !e.NotFound() || e.Key != "rt/missing" {
		t.Errorf("Get of a missing key: %+v", e)
	}
	_, err = c.Head(ctx, "rt/missing")
	if e := asError(t, err); e.Status != 404 || !ps3.IsNotFound(err) {
		t.Errorf("Head of a missing key: %+v", e)
	}
	if err := c.Delete(ctx, "rt/obj-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Head(ctx, "rt/obj-1"); !ps3.IsNotFound(err) {
		t.Errorf("Head after Delete: %v, want not found", err)
	}
}

func TestListPages(t *testing.T) {
	ctx := context.Background()
	_, c := server(t, ps3.Config{})
	var want []string
	for i := range 25 {
		k := fmt.Sprintf("list/k%03d", i)
		want = append(want, k)
		if err := c.Put(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Put(ctx, "listed-not/x", []byte("x")); err != nil {
		t.Fatal(err)
	}
	var got []string
	var sizes []int
	token := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("more than 10 pages for 25 keys at 7 a page")
		}
		p, err := c.List(ctx, "list/", 7, token)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(p.Objects))
		for _, o := range p.Objects {
			got = append(got, o.Key)
			if o.Size != int64(len(o.Key)) {
				t.Errorf("%s: listed size %d, want %d", o.Key, o.Size, len(o.Key))
			}
		}
		if p.Next == "" {
			break
		}
		token = p.Next
	}
	if !slices.Equal(got, want) || !slices.Equal(sizes, []int{7, 7, 7, 4}) {
		t.Errorf("listed %v in pages %v; want %v in pages [7 7 7 4]", got, sizes, want)
	}
	if _, err := c.List(ctx, "list/", 1001, ""); err == nil {
		t.Error("page size 1001 accepted")
	}
}

func TestDeleteBatch(t *testing.T) {
	ctx := context.Background()
	_, c := server(t, ps3.Config{})
	var all, doomed, kept []string
	for i := range 20 {
		k := fmt.Sprintf("del/k%02d", i)
		all = append(all, k)
		if i%2 == 0 {
			doomed = append(doomed, k)
		} else {
			kept = append(kept, k)
		}
		if err := c.Put(ctx, k, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// A key that never existed is deleted without complaint, as in S3.
	kerrs, err := c.DeleteBatch(ctx, append(slices.Clone(doomed), "del/never"))
	if err != nil || len(kerrs) != 0 {
		t.Fatalf("DeleteBatch = %v, %v", kerrs, err)
	}
	p, err := c.List(ctx, "del/", 1000, "")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, o := range p.Objects {
		left = append(left, o.Key)
	}
	if !slices.Equal(left, kept) {
		t.Errorf("after deleting the even keys, left %v; want %v", left, kept)
	}
	if _, err := c.DeleteBatch(ctx, make([]string, ps3.MaxBatch+1)); err == nil || !strings.Contains(err.Error(), "1001 keys") {
		t.Errorf("a batch of 1001: %v, want a refusal", err)
	}
	if _, err := c.DeleteBatch(ctx, nil); err == nil {
		t.Error("an empty batch accepted")
	}
}

func TestMultipart(t *testing.T) {
	ctx := context.Background()
	_, c := server(t, ps3.Config{})
	const part = ps3.MinPartSize
	body := random(7, 3*part+part/3) // 4 parts, the last short
	var calls, bytesSeen atomic.Int64
	var maxWorker atomic.Int64
	etag, err := c.UploadMultipart(ctx, "mp/big", body, ps3.Multipart{
		PartSize: part, Concurrency: 4,
		Observe: func(w int, start time.Time, n int, err error) {
			calls.Add(1)
			bytesSeen.Add(int64(n))
			if int64(w) > maxWorker.Load() {
				maxWorker.Store(int64(w))
			}
			if err != nil {
				t.Errorf("part from worker %d: %v", w, err)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	// S3's multipart ETag: the MD5 of the parts' MD5s, a dash, the count.
	var sums []byte
	for off := 0; off < len(body); off += part {
		s := md5.Sum(body[off:min(off+part, len(body))])
		sums = append(sums, s[:]...)
	}
	whole := md5.Sum(sums)
	if want := `"` + hex.EncodeToString(whole[:]) + `-4"`; etag != want {
		t.Errorf("ETag %s, want %s", etag, want)
	}
	if calls.Load() != 4 || bytesSeen.Load() != int64(len(body)) || maxWorker.Load() > 3 {
		t.Errorf("Observe saw %d parts, %d bytes, worker up to %d; want 4, %d, ≤3", calls.Load(), bytesSeen.Load(), maxWorker.Load(), len(body))
	}
	got := make([]byte, len(body))
	if n, err := c.Get(ctx, "mp/big", got); err != nil || n != len(body) || !bytes.Equal(got, body) {
		t.Fatalf("reading the multipart object back: %d, %v, equal %v", n, err, bytes.Equal(got, body))
	}
	if info, err := c.Head(ctx, "mp/big"); err != nil || info.Size != int64(len(body)) || info.ETag != etag {
		t.Errorf("Head = %+v, %v", info, err)
	}

	// The raw calls: an aborted upload cannot be completed.
	id, err := c.CreateMultipart(ctx, "mp/aborted")
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.UploadPart(ctx, "mp/aborted", id, 1, body[:part])
	if err != nil || p.Number != 1 || p.ETag != md5ETag(body[:part]) {
		t.Fatalf("UploadPart = %+v, %v", p, err)
	}
	if err := c.AbortMultipart(ctx, "mp/aborted", id); err != nil {
		t.Fatal(err)
	}
	_, err = c.CompleteMultipart(ctx, "mp/aborted", id, []ps3.Part{p})
	if e := asError(t, err); e.Code != "NoSuchUpload" || e.Op != "multipart_complete" {
		t.Errorf("completing an aborted upload: %v", err)
	}
	if _, err := c.Head(ctx, "mp/aborted"); !ps3.IsNotFound(err) {
		t.Errorf("the aborted upload left an object: %v", err)
	}
	if _, err := c.UploadMultipart(ctx, "mp/small", body, ps3.Multipart{PartSize: 1 << 20}); err == nil || !strings.Contains(err.Error(), "5 MiB") {
		t.Errorf("1 MiB parts: %v, want a refusal naming 5 MiB", err)
	}
}

func TestWrongCredentials(t *testing.T) {
	ctx := context.Background()
	srv, _ := server(t, ps3.Config{})
	for _, tc := range []struct {
		name, env, value, code string
		status                 int
	}{
		{"secret", "AWS_SECRET_ACCESS_KEY", "wrong-secret-0123456789abcdefghijklmnop", "SignatureDoesNotMatch", 403},
		// S3 says 403 InvalidAccessKeyId; VersityGW in single-account mode
		// says this, and the remedy treats both alike.
		{"access key", "AWS_ACCESS_KEY_ID", "PRISMNOSUCHKEY000000", "XAdminUserNotFound", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			// Retries on, to show a 403 is not retried into a storm.
			c, err := ps3.New(ctx, ps3.Config{Bucket: "prism-test", Endpoint: srv.Endpoint, PathStyle: true, MaxAttempts: 5})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err = c.Put(ctx, "creds/x", []byte("x"))
			took := time.Since(start)
			t.Log(err)
			e := asError(t, err)
			if e.Status != tc.status || e.Code != tc.code || e.NotFound() || e.Endpoint != srv.Endpoint || e.Op != "put" || e.Bucket != "prism-test" || e.Attempts != 1 {
				t.Errorf("got %+v; want HTTP %d %s from put at %s after one attempt", e, tc.status, tc.code, srv.Endpoint)
			}
			msg := err.Error()
			for _, want := range []string{srv.Endpoint, tc.code, fmt.Sprint(tc.status), "AWS_"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q lacks %q", msg, want)
				}
			}
			for _, secret := range []string{srv.SecretKey, "wrong-secret-0123456789abcdefghijklmnop"} {
				if strings.Contains(msg, secret) || strings.Contains(fmt.Sprintf("%+v", e), secret) {
					t.Errorf("the error contains a secret key: %s", msg)
				}
			}
			if len(c.Retries()) != 0 {
				t.Errorf("a 403 was retried: %v", c.Retries())
			}
			if took > 5*time.Second {
				t.Errorf("the refusal took %v", took)
			}
		})
	}
}

func TestSettings(t *testing.T) {
	srv, c := server(t, ps3.Config{ConnectTimeout: 2 * time.Second, RequestTimeout: time.Minute, MaxIdleConns: 32, MaxAttempts: 3})
	s := c.Settings()
	if s.Endpoint != srv.Endpoint || s.Region != "us-east-1" || !s.PathStyle || !s.TLSVerify || s.MaxAttempts != 3 ||
		s.ConnectTimeoutSeconds != 2 || s.RequestTimeoutSeconds != 60 || s.MaxIdleConnsPerHost != 32 ||
		s.Library != "github.com/aws/aws-sdk-go-v2/service/s3" || !strings.HasPrefix(s.LibraryVersion, "v1.") {
		t.Errorf("settings %+v", s)
	}
	j, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{srv.SecretKey, srv.AccessKey} {
		if strings.Contains(string(j), secret) {
			t.Errorf("recorded settings %s contain a credential", j)
		}
	}
	if !strings.Contains(string(j), `"connect_timeout_seconds":2`) {
		t.Errorf("settings JSON %s: want units in the keys", j)
	}
}

func TestEndpointFromEnvironment(t *testing.T) {
	ctx := context.Background()
	srv, _ := server(t, ps3.Config{})
	for _, env := range []string{"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, srv.Endpoint)
			c, err := ps3.New(ctx, ps3.Config{Bucket: "prism-test", PathStyle: true})
			if err != nil {
				t.Fatal(err)
			}
			if c.Settings().Endpoint != srv.Endpoint {
				t.Errorf("endpoint %q, want %s from %s", c.Settings().Endpoint, srv.Endpoint, env)
			}
			if err := c.Put(ctx, "env/"+env, []byte(env)); err != nil {
				t.Fatal(err)
			}
		})
	}
	// AWS_ENDPOINT_URL_S3 wins over AWS_ENDPOINT_URL, as in the SDKs.
	t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
	t.Setenv("AWS_ENDPOINT_URL_S3", srv.Endpoint)
	c, err := ps3.New(ctx, ps3.Config{Bucket: "prism-test", PathStyle: true})
	if err != nil || c.Settings().Endpoint != srv.Endpoint {
		t.Fatalf("with both set: %v, %+v", err, c)
	}
}

func TestConfigRefusals(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		cfg   ps3.Config
		err   string
		leaks string
	}{
		{ps3.Config{Bucket: "b_x"}, "not allowed", ""},
		{ps3.Config{Bucket: "bucket", Endpoint: "http://AKIAXXX:supersecretvalue@127.0.0.1:9000"}, "credentials in the endpoint URL", "supersecretvalue"},
		{ps3.Config{Bucket: "bucket", Endpoint: "ftp://127.0.0.1"}, "want http", ""},
		{ps3.Config{Bucket: "bucket", CAFile: "/nonexistent/ca.pem"}, "ca_file", ""},
		{ps3.Config{Bucket: "bucket", ConnectTimeout: -1}, "negative", ""},
	} {
		_, err := ps3.New(ctx, tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.cfg, err, tc.err)
		}
		if tc.leaks != "" && err != nil && strings.Contains(err.Error(), tc.leaks) {
			t.Errorf("error %q repeats the password", err)
		}
	}
}
