package s3

import (
	"context"
	"fmt"
	"sync"
	"time"

	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
)

// Timer times one kind of request of an Upload or a RangeReader: BeginOn
// (with the object's s3:// URL, which a stall report names) when a request
// starts (it may be called from several goroutines at once,
// so it must be safe for that: report.Recorder's only stores atomics), then
// Observe with its start, the bytes it carried and its error. Observe is
// called one request at a time (under the Upload's or RangeReader's lock),
// so one report.Recorder may take the requests that run in parallel.
type Timer interface {
	BeginOn(target *string) time.Time
	Observe(start time.Time, n int, err error)
}

// UploadObservers time the requests of an Upload; any may be nil.
type UploadObservers struct {
	Put      Timer // an object that fit one part: a single PutObject
	Create   Timer // CreateMultipartUpload
	Part     Timer // each UploadPart
	Complete Timer // CompleteMultipartUpload
}

// Upload is a streaming multipart upload: Write buffers bytes into parts
// of the buffers' size and sends each part (UploadPart) as it fills, at
// most len(bufs) at once, so the memory it uses is the caller's buffers
// (part size × concurrency) however large the object. Close sends the
// last part and completes the upload; an object no larger than one part
// goes as one PutObject instead (S3 clients do the same: boto3's
// upload_fileobj below its multipart threshold). Any failure, and Abort,
// aborts the upload, so no parts stay on the server.
//
// An Upload is used by one goroutine; its parts go out on their own.
type Upload struct {
	c      *Client
	ctx    context.Context
	cancel context.CancelFunc
	key    string
	url    string // s3://bucket/key, the stall monitor's name for it
	obs    UploadObservers
	free   chan []byte
	cur    []byte
	id     string
	parts  []Part
	next   int32
	size   int64
	wg     sync.WaitGroup
	mu     sync.Mutex // parts, err and the observers
	err    error
	closed bool
}

// NewUpload starts an upload of key (no request is sent before the first
// part fills). Every buffer of bufs must have the same length, the part
// size, of at least MinPartSize; the Upload owns them until Close or
// Abort returns.
func (c *Client) NewUpload(ctx context.Context, key string, bufs [][]byte, obs UploadObservers) (*Upload, error) {
	if len(bufs) == 0 {
		return nil, &Error{Op: "multipart", Bucket: c.bucket, Key: key, Endpoint: c.settings.Endpoint, Message: "no part buffers"}
	}
	for _, b := range bufs {
		if int64(cap(b)) < MinPartSize || cap(b) != cap(bufs[0]) {
			return nil, &Error{Op: "multipart", Bucket: c.bucket, Key: key, Endpoint: c.settings.Endpoint,
				Message: fmt.Sprintf("part buffers of %d bytes: want equal buffers of at least %d (5 MiB)", cap(b), MinPartSize)}
		}
	}
	u := &Upload{c: c, key: key, url: c.objectURL(key), obs: obs, free: make(chan []byte, len(bufs))}
	u.ctx, u.cancel = context.WithCancel(ctx)
	for _, b := range bufs {
		u.free <- b[:0]
	}
	return u, nil
}

// Size is the bytes written so far.
func (u *Upload) Size() int64 { return u.size }

func (u *Upload) failed() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.err
}

func (u *Upload) fail(err error) {
	u.mu.Lock()
	if u.err == nil {
		u.err = err
		u.cancel()
	}
	u.mu.Unlock()
}

func begin(t Timer, url *string) time.Time {
	if t == nil {
		return time.Now()
	}
	return t.BeginOn(url)
}

func (u *Upload) observe(t Timer, start time.Time, n int, err error) {
	if t == nil {
		return
	}
	u.mu.Lock()
	t.Observe(start, n, err)
	u.mu.Unlock()
}

// Write copies p into the current part, sending each part that fills. It
// blocks while every buffer is in flight. An error is the upload's first
// failure; the upload is then aborted by Close or Abort.
func (u *Upload) Write(p []byte) (int, error) {
	done := 0
	for len(p) > 0 {
		if err := u.failed(); err != nil {
			return done, err
		}
		if u.cur == nil {
			select {
			case b := <-u.free:
				u.cur = b
			case <-u.ctx.Done():
				if err := u.failed(); err != nil {
					return done, err
				}
				return done, u.ctx.Err()
			}
		}
		k := copy(u.cur[len(u.cur):cap(u.cur)], p)
		u.cur = u.cur[:len(u.cur)+k]
		p = p[k:]
		done += k
		u.size += int64(k)
		if len(u.cur) == cap(u.cur) {
			if err := u.send(); err != nil {
				return done, err
			}
		}
	}
	return done, nil
}

// send starts the upload if needed and sends the current part.
func (u *Upload) send() error {
	if u.id == "" {
		start := begin(u.obs.Create, &u.url)
		id, err := u.c.CreateMultipart(u.ctx, u.key)
		u.observe(u.obs.Create, start, 0, err)
		if err != nil {
			// The request may have reached the server before the client
			// gave up (a cancel): an upload this Upload has no id of.
			u.c.unsettled.Store(true)
			actx, acancel := context.WithTimeout(context.WithoutCancel(u.ctx), 10*time.Second)
			if aerr := u.c.AbortUploads(actx, u.key, func(k string) bool { return k == u.key }); aerr != nil {
				err = fmt.Errorf("%w (and aborting its uploads failed: %v)", err, aerr)
			}
			acancel()
			u.fail(err)
			return err
		}
		u.id = id
	}
	if u.next >= 10000 {
		err := &Error{Op: "multipart", Bucket: u.c.bucket, Key: u.key, Endpoint: u.c.settings.Endpoint,
			Message: fmt.Sprintf("more than 10000 parts of %d bytes: raise part_size", cap(u.cur))}
		u.fail(err)
		return err
	}
	u.next++
	number, body := u.next, u.cur
	u.cur = nil
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		start := begin(u.obs.Part, &u.url)
		p, err := u.c.UploadPart(u.ctx, u.key, u.id, number, body)
		u.observe(u.obs.Part, start, len(body), err)
		u.free <- body[:0]
		if err != nil {
			u.fail(err)
			return
		}
		u.mu.Lock()
		u.parts = append(u.parts, p)
		u.mu.Unlock()
	}()
	return nil
}

// Close sends what is buffered and completes the object; on any failure
// it aborts the upload and returns the first error.
func (u *Upload) Close() error {
	if u.closed {
		return u.failed()
	}
	u.closed = true
	defer u.cancel()
	if err := u.failed(); err != nil {
		return u.abort(err)
	}
	if u.id == "" {
		// One part's worth or less: a single PUT.
		var body []byte
		if u.cur != nil {
			body = u.cur
		}
		start := begin(u.obs.Put, &u.url)
		err := u.c.Put(u.ctx, u.key, body)
		u.observe(u.obs.Put, start, len(body), err)
		u.release()
		return err
	}
	if len(u.cur) > 0 {
		if err := u.send(); err != nil {
			return u.abort(err)
		}
	}
	u.wg.Wait()
	if err := u.failed(); err != nil {
		return u.abort(err)
	}
	start := begin(u.obs.Complete, &u.url)
	_, err := u.c.CompleteMultipart(u.ctx, u.key, u.id, u.parts)
	u.observe(u.obs.Complete, start, 0, err)
	if err != nil {
		return u.abort(err)
	}
	u.release()
	return nil
}

// Abort stops the upload: parts in flight are cancelled and the upload,
// if one was started, is aborted on the server. cause is returned,
// annotated if the abort itself failed.
func (u *Upload) Abort(cause error) error {
	if u.closed {
		return cause
	}
	u.closed = true
	defer u.cancel()
	u.fail(cause)
	return u.abort(cause)
}

func (u *Upload) abort(cause error) error {
	u.cancel()
	u.wg.Wait()
	u.release()
	if u.id == "" {
		return cause
	}
	// Its own short deadline: the caller's context may be the one that
	// ended, and the server may be the thing that died.
	actx, acancel := context.WithTimeout(context.WithoutCancel(u.ctx), 10*time.Second)
	defer acancel()
	if aerr := u.c.AbortMultipart(actx, u.key, u.id); aerr != nil {
		return fmt.Errorf("%w (and aborting upload %s failed: %v)", cause, u.id, aerr)
	}
	return cause
}

// release hands the buffer being filled back (the others come back from
// their parts).
func (u *Upload) release() {
	if u.cur != nil {
		u.free <- u.cur[:0]
		u.cur = nil
	}
}

// RangeReader reads one object by ranged GETs, the shape of a loader
// reading a file through an object store (s3fs, fsspec, torch.load of a
// stream): a read inside the current window is a copy; a smaller read
// outside it fills the window with one GET of the window's size at the
// read (readahead); a read of a window or more goes straight into the
// caller's buffer as GETs of a window each, up to Concurrency at once.
type RangeReader struct {
	c           *Client
	key         string
	url         string // s3://bucket/key
	size        int64
	win         []byte
	winOff      int64
	winLen      int
	concurrency int
	obs         Timer
	mu          sync.Mutex
}

// NewRangeReader reads key, of size bytes, through the window win (the
// caller's buffer, the part size) and at most concurrency GETs at once;
// obs (optional) times each GET.
func (c *Client) NewRangeReader(key string, size int64, win []byte, concurrency int, obs Timer) *RangeReader {
	return &RangeReader{c: c, key: key, url: c.objectURL(key), size: size, win: win[:cap(win)], winOff: -1, concurrency: max(concurrency, 1), obs: obs}
}

// Size is the object's size.
func (r *RangeReader) Size() int64 { return r.size }

// ReadAt reads len(b) bytes at off, fewer only at the end of the object
// (then it returns the count and no error, as a file read past its end).
func (r *RangeReader) ReadAt(ctx context.Context, b []byte, off int64) (int, error) {
	if off < 0 {
		return 0, &Error{Op: "get_range", Bucket: r.c.bucket, Key: r.key, Endpoint: r.c.settings.Endpoint, Message: fmt.Sprintf("negative offset %d", off)}
	}
	if end := r.size - off; int64(len(b)) > end {
		b = b[:max(end, 0)]
	}
	done := 0
	for done < len(b) {
		at := off + int64(done)
		if r.winOff >= 0 && at >= r.winOff && at < r.winOff+int64(r.winLen) {
			done += copy(b[done:], r.win[at-r.winOff:r.winLen])
			continue
		}
		rest := b[done:]
		if len(rest) >= len(r.win) {
			n, err := r.fetch(ctx, rest, at)
			done += n
			return done, err
		}
		n := int(min(int64(len(r.win)), r.size-at))
		start := begin(r.obs, &r.url)
		got, err := r.c.GetRange(ctx, r.key, at, int64(n), r.win)
		r.observe(start, got, err)
		if err != nil {
			r.winOff = -1
			return done, err
		}
		r.winOff, r.winLen = at, got
	}
	return done, nil
}

func (r *RangeReader) observe(start time.Time, n int, err error) {
	if r.obs == nil {
		return
	}
	r.mu.Lock()
	r.obs.Observe(start, n, err)
	r.mu.Unlock()
}

// fetch reads b at off as GETs of a window each, concurrency at once.
func (r *RangeReader) fetch(ctx context.Context, b []byte, off int64) (int, error) {
	step := len(r.win)
	chunks := (len(b) + step - 1) / step
	if chunks == 1 || r.concurrency == 1 {
		for i := 0; i < len(b); i += step {
			n := min(step, len(b)-i)
			start := begin(r.obs, &r.url)
			got, err := r.c.GetRange(ctx, r.key, off+int64(i), int64(n), b[i:i+n])
			r.observe(start, got, err)
			if err != nil {
				return i + got, err
			}
		}
		return len(b), nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		next  int
		first error
	)
	for range min(r.concurrency, chunks) {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				stop := first != nil
				mu.Unlock()
				if stop || i >= chunks {
					return
				}
				lo := i * step
				n := min(step, len(b)-lo)
				start := begin(r.obs, &r.url)
				got, err := r.c.GetRange(ctx, r.key, off+int64(lo), int64(n), b[lo:lo+n])
				r.observe(start, got, err)
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
						cancel()
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return 0, first
	}
	return len(b), nil
}

// AbortUploads aborts the multipart uploads in progress under prefix whose
// key mine accepts: what a client that gave up on a request (a cancelled
// CreateMultipartUpload, a lost abort) may have left on the server.
func (c *Client) AbortUploads(ctx context.Context, prefix string, mine func(string) bool) error {
	var keyMarker, idMarker *string
	for {
		out, err := c.api.ListMultipartUploads(ctx, &awss3.ListMultipartUploadsInput{Bucket: &c.bucket, Prefix: &prefix, KeyMarker: keyMarker, UploadIdMarker: idMarker})
		if err != nil {
			return c.newError("list_uploads", prefix, err)
		}
		for _, up := range out.Uploads {
			if up.Key == nil || up.UploadId == nil || !mine(*up.Key) {
				continue
			}
			if err := c.AbortMultipart(ctx, *up.Key, *up.UploadId); err != nil && !IsNotFound(err) {
				return err
			}
		}
		if out.IsTruncated == nil || !*out.IsTruncated {
			return nil
		}
		keyMarker, idMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
}

// ListUploads returns the keys of the multipart uploads in progress under
// prefix (what a failed upload would leave behind if it were not aborted).
func (c *Client) ListUploads(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	var keyMarker, idMarker *string
	for {
		out, err := c.api.ListMultipartUploads(ctx, &awss3.ListMultipartUploadsInput{Bucket: &c.bucket, Prefix: &prefix, KeyMarker: keyMarker, UploadIdMarker: idMarker})
		if err != nil {
			return keys, c.newError("list_uploads", prefix, err)
		}
		for _, u := range out.Uploads {
			if u.Key != nil {
				keys = append(keys, *u.Key)
			}
		}
		if out.IsTruncated == nil || !*out.IsTruncated {
			return keys, nil
		}
		keyMarker, idMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
}

// objectURL is key's s3:// URL, as stall reports and errors name objects.
func (c *Client) objectURL(key string) string { return "s3://" + c.bucket + "/" + key }
