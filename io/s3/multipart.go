package s3

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// MaxBatch is the most keys one DeleteObjects request may name.
const MaxBatch = 1000

// KeyError is one key that a DeleteBatch could not delete.
type KeyError struct {
	Key     string
	Code    string
	Message string
}

func (e KeyError) Error() string { return e.Key + ": " + e.Code + ": " + e.Message }

// DeleteBatch deletes up to MaxBatch keys in one DeleteObjects request. The
// error is for the request; keys the server refused come back one by one.
func (c *Client) DeleteBatch(ctx context.Context, keys []string) ([]KeyError, error) {
	if len(keys) == 0 || len(keys) > MaxBatch {
		return nil, &Error{Op: "delete_batch", Bucket: c.bucket, Endpoint: c.settings.Endpoint,
			Message: fmt.Sprintf("%d keys: want 1 to %d", len(keys), MaxBatch)}
	}
	objs := make([]types.ObjectIdentifier, len(keys))
	for i := range keys {
		objs[i].Key = &keys[i]
	}
	c.call(opDeleteBatch)
	out, err := c.api.DeleteObjects(ctx, &awss3.DeleteObjectsInput{
		Bucket: &c.bucket,
		Delete: &types.Delete{Objects: objs, Quiet: aws.Bool(true)},
	})
	if err != nil {
		e := c.newError("delete_batch", "", err)
		e.Message = fmt.Sprintf("%d keys from %s: %s", len(keys), keys[0], e.Message)
		return nil, e
	}
	var kerrs []KeyError
	for _, e := range out.Errors {
		kerrs = append(kerrs, KeyError{Key: aws.ToString(e.Key), Code: aws.ToString(e.Code), Message: aws.ToString(e.Message)})
	}
	return kerrs, nil
}

// Part is an uploaded part of a multipart upload.
type Part struct {
	Number int32
	ETag   string
}

// CreateMultipart starts a multipart upload of key and returns its upload ID.
func (c *Client) CreateMultipart(ctx context.Context, key string) (string, error) {
	c.call(opCreateMultipart)
	out, err := c.api.CreateMultipartUpload(ctx, &awss3.CreateMultipartUploadInput{Bucket: &c.bucket, Key: &key})
	if err != nil {
		return "", c.newError("multipart_create", key, err)
	}
	return aws.ToString(out.UploadId), nil
}

// UploadPart sends part number (1..10000) of an upload from body.
func (c *Client) UploadPart(ctx context.Context, key, uploadID string, number int32, body []byte) (Part, error) {
	c.call(opUploadPart)
	out, err := c.api.UploadPart(ctx, &awss3.UploadPartInput{
		Bucket:        &c.bucket,
		Key:           &key,
		UploadId:      &uploadID,
		PartNumber:    &number,
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
	})
	if err != nil {
		c.unsettled.Store(true)
		e := c.newError("multipart_part", key, err)
		e.Message = fmt.Sprintf("part %d: %s", number, e.Message)
		return Part{}, e
	}
	return Part{Number: number, ETag: aws.ToString(out.ETag)}, nil
}

// CompleteMultipart assembles the parts (in any order; they are sorted by
// number) and returns the object's ETag, "<md5 of part md5s>-<parts>" on S3.
func (c *Client) CompleteMultipart(ctx context.Context, key, uploadID string, parts []Part) (string, error) {
	sorted := make([]types.CompletedPart, len(parts))
	for i, p := range parts {
		sorted[i] = types.CompletedPart{PartNumber: aws.Int32(p.Number), ETag: aws.String(p.ETag)}
	}
	sort.Slice(sorted, func(i, j int) bool { return *sorted[i].PartNumber < *sorted[j].PartNumber })
	c.call(opCompleteMultipart)
	out, err := c.api.CompleteMultipartUpload(ctx, &awss3.CompleteMultipartUploadInput{
		Bucket:          &c.bucket,
		Key:             &key,
		UploadId:        &uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: sorted},
	})
	if err != nil {
		c.unsettled.Store(true)
		return "", c.newError("multipart_complete", key, err)
	}
	return aws.ToString(out.ETag), nil
}

// AbortMultipart discards an upload and the parts it holds.
func (c *Client) AbortMultipart(ctx context.Context, key, uploadID string) error {
	c.call(opAbortMultipart)
	if _, err := c.api.AbortMultipartUpload(ctx, &awss3.AbortMultipartUploadInput{Bucket: &c.bucket, Key: &key, UploadId: &uploadID}); err != nil {
		return c.newError("multipart_abort", key, err)
	}
	return nil
}

// MinPartSize is S3's smallest part other than the last.
const MinPartSize = 5 << 20

// Multipart says how UploadMultipart cuts and sends a body.
type Multipart struct {
	PartSize    int64 // every part but the last; at least MinPartSize
	Concurrency int   // parts in flight at once; default 1
	// Observe, when set, is called by worker w (0..Concurrency-1) after
	// each part with its start time, size and error, so a caller can time
	// parts into one Recorder per worker without a lock.
	Observe func(worker int, start time.Time, n int, err error)
	// Created and Completed, when set, are called after the upload's
	// CreateMultipartUpload and CompleteMultipartUpload requests with their
	// start time and error, so a caller can time those requests too.
	Created   func(start time.Time, err error)
	Completed func(start time.Time, err error)
}

// UploadMultipart uploads body as key in parts of PartSize, Concurrency at a
// time, sliced from body without copying, and returns the object's ETag.
// On any failure it aborts the upload (so no parts are left behind on the
// server) and returns the first error.
func (c *Client) UploadMultipart(ctx context.Context, key string, body []byte, m Multipart) (string, error) {
	if m.PartSize < MinPartSize {
		return "", &Error{Op: "multipart", Bucket: c.bucket, Key: key, Endpoint: c.settings.Endpoint,
			Message: fmt.Sprintf("part size %d: S3 needs at least %d (5 MiB)", m.PartSize, MinPartSize)}
	}
	nparts := (int64(len(body)) + m.PartSize - 1) / m.PartSize
	if nparts == 0 {
		nparts = 1 // an empty object is one empty part
	}
	if nparts > 10000 {
		return "", &Error{Op: "multipart", Bucket: c.bucket, Key: key, Endpoint: c.settings.Endpoint,
			Message: fmt.Sprintf("%d bytes in %d-byte parts is %d parts; S3 allows 10000: raise part_size", len(body), m.PartSize, nparts)}
	}
	workers := max(m.Concurrency, 1)
	start := time.Now()
	id, err := c.CreateMultipart(ctx, key)
	if m.Created != nil {
		m.Created(start, err)
	}
	if err != nil {
		return "", err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	parts := make([]Part, nparts)
	var (
		next     int64
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				stop := firstErr != nil
				mu.Unlock()
				if stop || i >= nparts {
					return
				}
				lo := i * m.PartSize
				hi := min(lo+m.PartSize, int64(len(body)))
				start := time.Now()
				p, err := c.UploadPart(wctx, key, id, int32(i+1), body[lo:hi])
				if m.Observe != nil {
					m.Observe(w, start, int(hi-lo), err)
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
						cancel()
					}
					mu.Unlock()
					return
				}
				parts[i] = p
			}
		})
	}
	wg.Wait()
	if firstErr == nil {
		var etag string
		start := time.Now()
		etag, firstErr = c.CompleteMultipart(ctx, key, id, parts)
		if m.Completed != nil {
			m.Completed(start, firstErr)
		}
		if firstErr == nil {
			return etag, nil
		}
	}
	// The abort gets its own short deadline: the caller's context may be
	// the one that ended, and the server may be the thing that died.
	actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer acancel()
	if aerr := c.AbortMultipart(actx, key, id); aerr != nil {
		return "", fmt.Errorf("%w (and aborting upload %s failed: %v)", firstErr, id, aerr)
	}
	return "", firstErr
}
