package s3

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
)

// Config is how to reach one bucket. It deliberately has no credential
// fields: they come from the AWS chain (see the package doc).
type Config struct {
	Bucket string
	// Endpoint is the service URL (https://s3.example.org:9000). Empty means
	// what the AWS SDKs do: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the
	// profile's endpoint_url, else AWS's own regional endpoint.
	Endpoint string
	// Region signs requests; empty means AWS_REGION / the profile's region,
	// else us-east-1 (what MinIO, Ceph RGW and VersityGW accept by default).
	Region string
	// PathStyle addresses buckets as endpoint/bucket/key instead of
	// bucket.endpoint/key; most on-premises stores need it.
	PathStyle bool
	// InsecureSkipVerify turns TLS certificate verification off (test
	// systems with self-signed certificates); CAFile adds a PEM bundle of
	// authorities to trust instead.
	InsecureSkipVerify bool
	CAFile             string
	// ConnectTimeout bounds the TCP connect and the TLS handshake (default
	// 5s); RequestTimeout bounds a whole request including its body (0: no
	// bound beyond the caller's context).
	ConnectTimeout time.Duration
	RequestTimeout time.Duration
	// MaxIdleConns is the connection pool per host; size it to the number
	// of concurrent requests, or each request beyond it pays a new TCP (and
	// TLS) handshake. Default 64.
	MaxIdleConns int
	// MaxAttempts is requests per operation; 0 or 1 means no retries.
	MaxAttempts int
}

// Settings is what the manifest records about the client: everything that
// shapes a measurement, nothing that authenticates.
type Settings struct {
	Endpoint              string  `json:"endpoint"`
	Region                string  `json:"region"`
	Bucket                string  `json:"bucket"`
	PathStyle             bool    `json:"path_style"`
	TLSVerify             bool    `json:"tls_verify"`
	CAFile                string  `json:"ca_file,omitempty"`
	MaxAttempts           int     `json:"max_attempts"`
	ConnectTimeoutSeconds float64 `json:"connect_timeout_seconds"`
	RequestTimeoutSeconds float64 `json:"request_timeout_seconds"`
	MaxIdleConnsPerHost   int     `json:"max_idle_conns_per_host"`
	Library               string  `json:"library"`
	LibraryVersion        string  `json:"library_version"`
}

const (
	defaultConnectTimeout = 5 * time.Second
	defaultMaxIdleConns   = 64
	library               = "github.com/aws/aws-sdk-go-v2/service/s3"
)

// Client runs requests against one bucket. It is safe for concurrent use;
// share one per process so all workers draw on one connection pool.
type Client struct {
	api *awss3.Client
	// transport is the client's connection pool.
	transport *http.Transport
	bucket    string
	settings  Settings
	// attempts and calls per op, for Retries: an attempt counter that runs
	// inside the SDK's retry loop sees every request sent.
	attempts [numOps]atomic.Int64
	calls    [numOps]atomic.Int64
	// unsettled is set when a write ended without the server's answer
	// (a cancelled step, a timeout): the object may still land later.
	unsettled atomic.Bool
}

// New checks cfg and builds a client; it sends no request (HeadBucket
// does), so it also works before the bucket exists.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if err := ValidateBucket(cfg.Bucket); err != nil {
		return nil, fmt.Errorf("s3: %w", err)
	}
	if cfg.ConnectTimeout < 0 || cfg.RequestTimeout < 0 || cfg.MaxIdleConns < 0 || cfg.MaxAttempts < 0 {
		return nil, fmt.Errorf("s3: connect_timeout, request_timeout, max_idle_conns and max_attempts must not be negative")
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = defaultConnectTimeout
	}
	if cfg.MaxIdleConns == 0 {
		cfg.MaxIdleConns = defaultMaxIdleConns
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 1
	}
	if cfg.Endpoint != "" {
		if err := checkEndpoint(cfg.Endpoint); err != nil {
			return nil, err
		}
	}
	opts, err := httpOptions(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		// The SDK names the file or variable; it never quotes a secret.
		return nil, fmt.Errorf("s3: loading AWS configuration: %w", err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = "us-east-1"
	}
	c := &Client{bucket: cfg.Bucket}
	c.api = awss3.NewFromConfig(awsCfg, func(o *awss3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		o.DisableLogOutputChecksumValidationSkipped = true
		// Built here from the SDK's configured client (its defaults, CA
		// bundle and our options applied), so that the connection pool is
		// one this package can reach (Close). Redirects are not followed,
		// as the SDK's own client does not.
		if bc, ok := o.HTTPClient.(*awshttp.BuildableClient); ok {
			c.transport = bc.GetTransport()
			o.HTTPClient = &http.Client{Timeout: bc.GetTimeout(), Transport: c.transport,
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		}
		// AWS_MAX_ATTEMPTS and AWS_RETRY_MODE are ignored on purpose: the
		// plan decides whether a benchmark retries.
		if cfg.MaxAttempts == 1 {
			o.Retryer = aws.NopRetryer{}
		} else {
			o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) { so.MaxAttempts = cfg.MaxAttempts })
			o.APIOptions = append(o.APIOptions, c.countAttempts)
		}
	})
	endpoint := cfg.Endpoint
	if endpoint == "" {
		if be := c.api.Options().BaseEndpoint; be != nil {
			endpoint = *be
			if err := checkEndpoint(endpoint); err != nil {
				return nil, err
			}
		} else {
			endpoint = "https://s3." + awsCfg.Region + ".amazonaws.com"
		}
	}
	c.settings = Settings{
		Endpoint:              endpoint,
		Region:                awsCfg.Region,
		Bucket:                cfg.Bucket,
		PathStyle:             cfg.PathStyle,
		TLSVerify:             !cfg.InsecureSkipVerify,
		CAFile:                cfg.CAFile,
		MaxAttempts:           cfg.MaxAttempts,
		ConnectTimeoutSeconds: cfg.ConnectTimeout.Seconds(),
		RequestTimeoutSeconds: cfg.RequestTimeout.Seconds(),
		MaxIdleConnsPerHost:   cfg.MaxIdleConns,
		Library:               library,
		LibraryVersion:        sdkVersion,
	}
	return c, nil
}

// checkEndpoint rejects endpoints that are not absolute http(s) URLs, and
// any with user information: a key in a URL would end up in the manifest.
func checkEndpoint(ep string) error {
	u, err := url.Parse(ep)
	if err != nil {
		// url's message quotes the input, which may hold a password.
		return fmt.Errorf("s3: endpoint is not a URL")
	}
	if u.User != nil {
		return fmt.Errorf("s3: endpoint %s://%s: credentials in the endpoint URL are not accepted; use the AWS environment or profile", u.Scheme, u.Host)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("s3: endpoint %q: want http://host[:port] or https://host[:port]", ep)
	}
	return nil
}

// httpOptions builds the HTTP client as the SDK's BuildableClient, so the
// SDK can still add AWS_CA_BUNDLE or the profile's ca_bundle to it, and
// returns the config options that install it (and ca_file, which as an
// explicit option wins over both).
func httpOptions(cfg Config) ([]func(*config.LoadOptions) error, error) {
	hc := awshttp.NewBuildableClient().
		WithTimeout(cfg.RequestTimeout).
		WithDialerOptions(func(d *net.Dialer) {
			d.Timeout = cfg.ConnectTimeout
			d.KeepAlive = 30 * time.Second
		}).
		WithTransportOptions(func(tr *http.Transport) {
			if tr.TLSClientConfig == nil {
				tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
			}
			tr.TLSClientConfig.InsecureSkipVerify = cfg.InsecureSkipVerify
			tr.TLSHandshakeTimeout = cfg.ConnectTimeout
			tr.MaxIdleConns = cfg.MaxIdleConns
			tr.MaxIdleConnsPerHost = cfg.MaxIdleConns
			tr.MaxConnsPerHost = 0
			// The SDK asks for identity encoding; this keeps the transport
			// from adding gzip and decompressing behind the caller's buffer.
			tr.DisableCompression = true
			// 64 KiB socket buffers: a 1 MiB body moves in 16 reads, not 256.
			tr.ReadBufferSize = 64 << 10
			tr.WriteBufferSize = 64 << 10
			// S3 is HTTP/1.1, one request per connection at a time: that is
			// what S3 clients measure, and h2 would multiplex a concurrency
			// sweep onto one TCP connection.
			tr.ForceAttemptHTTP2 = false
		})
	opts := []func(*config.LoadOptions) error{config.WithHTTPClient(hc)}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("s3: ca_file: %w", err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("s3: ca_file %s: no PEM certificate in it", cfg.CAFile)
		}
		opts = append(opts, config.WithCustomCABundle(bytes.NewReader(pem)))
	}
	return opts, nil
}

// sdkVersion is the service/s3 module this package is built and tested
// with; TestSDKVersion keeps it equal to go.mod's. (Build info would have
// it in the prism binary, but not in test binaries.)
const sdkVersion = "v1.114.10"

// Close closes the client's idle connections, so a server (or a test's)
// does not wait on them; requests after it open new ones.
func (c *Client) Close() {
	if c.transport != nil {
		c.transport.CloseIdleConnections()
	}
}

// Settings returns the client's settings for the manifest.
func (c *Client) Settings() Settings { return c.settings }

// Bucket is the bucket the client works on.
func (c *Client) Bucket() string { return c.bucket }

// The operations, for the retry counters and errors.
const (
	opPut = iota
	opGet
	opHead
	opList
	opDelete
	opDeleteBatch
	opCreateMultipart
	opUploadPart
	opCompleteMultipart
	opAbortMultipart
	opCreateBucket
	opHeadBucket
	numOps
)

var opNames = [numOps]string{"put", "get", "head", "list", "delete", "delete_batch",
	"multipart_create", "multipart_part", "multipart_complete", "multipart_abort",
	"create_bucket", "head_bucket"}

var sdkOps = map[string]int{
	"PutObject": opPut, "GetObject": opGet, "HeadObject": opHead, "ListObjectsV2": opList,
	"DeleteObject": opDelete, "DeleteObjects": opDeleteBatch,
	"CreateMultipartUpload": opCreateMultipart, "UploadPart": opUploadPart,
	"CompleteMultipartUpload": opCompleteMultipart, "AbortMultipartUpload": opAbortMultipart,
	"CreateBucket": opCreateBucket, "HeadBucket": opHeadBucket,
}

// countAttempts adds a middleware inside the retry loop, so it runs once per
// request sent.
func (c *Client) countAttempts(st *middleware.Stack) error {
	return st.Finalize.Insert(middleware.FinalizeMiddlewareFunc("PrismAttempts",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			if op, ok := sdkOps[awsmiddleware.GetOperationName(ctx)]; ok {
				c.attempts[op].Add(1)
			}
			return next.HandleFinalize(ctx, in)
		}), "Retry", middleware.After)
}

// Retries returns, per operation that retried at least once, the number of
// requests sent beyond the first of each call. It is empty with retries off.
func (c *Client) Retries() map[string]int64 {
	m := map[string]int64{}
	for op := range numOps {
		if r := c.attempts[op].Load() - c.calls[op].Load(); r > 0 {
			m[opNames[op]] = r
		}
	}
	return m
}

func (c *Client) call(op int) {
	if c.settings.MaxAttempts > 1 {
		c.calls[op].Add(1)
	}
}

// Put writes body as the object key. The body is sent from the caller's
// slice (the SDK seeks it to sign and to send, it does not copy it).
func (c *Client) Put(ctx context.Context, key string, body []byte) error {
	c.call(opPut)
	_, err := c.api.PutObject(ctx, &awss3.PutObjectInput{
		Bucket:        &c.bucket,
		Key:           &key,
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
	})
	if err != nil {
		c.unsettled.Store(true)
		return c.newError("put", key, err)
	}
	return nil
}

// Get reads the whole object into buf and returns its size. An object
// larger than buf, or a body shorter than the Content-Length the server
// announced, is an error.
func (c *Client) Get(ctx context.Context, key string, buf []byte) (int, error) {
	c.call(opGet)
	out, err := c.api.GetObject(ctx, &awss3.GetObjectInput{Bucket: &c.bucket, Key: &key})
	if err != nil {
		return 0, c.newError("get", key, err)
	}
	defer out.Body.Close()
	size := int64(-1)
	if out.ContentLength != nil {
		size = *out.ContentLength
	}
	if size > int64(len(buf)) {
		return 0, c.readError("get", key, fmt.Errorf("object is %d bytes, the buffer %d", size, len(buf)))
	}
	if size >= 0 {
		n, err := io.ReadFull(out.Body, buf[:size])
		if err != nil {
			return n, c.readError("get", key, fmt.Errorf("short read: %d of %d bytes: %w", n, size, err))
		}
		return n, nil
	}
	// No Content-Length (chunked): read to EOF, refusing to overflow buf.
	n, err := io.ReadFull(out.Body, buf)
	switch {
	case err == io.ErrUnexpectedEOF || err == io.EOF:
		return n, nil
	case err != nil:
		return n, c.readError("get", key, err)
	}
	var one [1]byte
	if m, _ := out.Body.Read(one[:]); m > 0 {
		return n, c.readError("get", key, fmt.Errorf("object is larger than the %d-byte buffer", len(buf)))
	}
	return n, nil
}

// GetRange reads n bytes at off into buf[:n] and returns n. A range that
// comes back shorter (it runs past the end of the object) or as the whole
// object (a server that ignores Range) is an error, never a silent short
// read.
func (c *Client) GetRange(ctx context.Context, key string, off, n int64, buf []byte) (int, error) {
	if off < 0 || n <= 0 || n > int64(len(buf)) {
		return 0, &Error{Op: "get_range", Bucket: c.bucket, Key: key, Endpoint: c.settings.Endpoint,
			Message: fmt.Sprintf("bad range: offset %d, length %d, buffer %d", off, n, len(buf))}
	}
	c.call(opGet)
	rng := "bytes=" + strconv.FormatInt(off, 10) + "-" + strconv.FormatInt(off+n-1, 10)
	out, err := c.api.GetObject(ctx, &awss3.GetObjectInput{Bucket: &c.bucket, Key: &key, Range: &rng})
	if err != nil {
		return 0, c.newError("get_range", key, err)
	}
	defer out.Body.Close()
	if out.ContentRange == nil {
		return 0, c.readError("get_range", key, fmt.Errorf("the server ignored Range %s and sent the whole object", rng))
	}
	if out.ContentLength != nil && *out.ContentLength != n {
		return 0, c.readError("get_range", key, fmt.Errorf("short read: range %s gave %d bytes (%s)", rng, *out.ContentLength, *out.ContentRange))
	}
	m, err := io.ReadFull(out.Body, buf[:n])
	if err != nil {
		return m, c.readError("get_range", key, fmt.Errorf("short read: %d of %d bytes: %w", m, n, err))
	}
	return m, nil
}

func (c *Client) readError(op, key string, err error) *Error {
	return &Error{Op: op, Bucket: c.bucket, Key: key, Endpoint: c.settings.Endpoint, Message: err.Error(), Attempts: 1, Err: err}
}

// ObjectInfo is what Head and List report about an object.
type ObjectInfo struct {
	Key          string
	Size         int64
	ETag         string // as the server sent it, quotes included
	LastModified time.Time
}

// Head returns the object's size and ETag.
func (c *Client) Head(ctx context.Context, key string) (ObjectInfo, error) {
	c.call(opHead)
	out, err := c.api.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: &c.bucket, Key: &key})
	if err != nil {
		return ObjectInfo{}, c.newError("head", key, err)
	}
	return ObjectInfo{Key: key, Size: aws.ToInt64(out.ContentLength), ETag: aws.ToString(out.ETag), LastModified: aws.ToTime(out.LastModified)}, nil
}

// Page is one ListObjectsV2 response. Next is the continuation token for the
// following page, "" after the last.
type Page struct {
	Objects []ObjectInfo
	Next    string
}

// List returns one page of at most pageSize keys under prefix, starting at
// the continuation token (empty for the first page).
func (c *Client) List(ctx context.Context, prefix string, pageSize int, token string) (Page, error) {
	if pageSize <= 0 || pageSize > 1000 {
		return Page{}, &Error{Op: "list", Bucket: c.bucket, Key: prefix, Endpoint: c.settings.Endpoint,
			Message: fmt.Sprintf("page size %d: want 1 to 1000", pageSize)}
	}
	c.call(opList)
	in := &awss3.ListObjectsV2Input{Bucket: &c.bucket, Prefix: &prefix, MaxKeys: aws.Int32(int32(pageSize))}
	if token != "" {
		in.ContinuationToken = &token
	}
	out, err := c.api.ListObjectsV2(ctx, in)
	if err != nil {
		return Page{}, c.newError("list", prefix, err)
	}
	p := Page{Objects: make([]ObjectInfo, len(out.Contents))}
	for i, o := range out.Contents {
		p.Objects[i] = ObjectInfo{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size), ETag: aws.ToString(o.ETag), LastModified: aws.ToTime(o.LastModified)}
	}
	if aws.ToBool(out.IsTruncated) {
		p.Next = aws.ToString(out.NextContinuationToken)
		if p.Next == "" {
			return p, c.readError("list", prefix, errors.New("the server says the listing is truncated but sent no continuation token"))
		}
	}
	return p, nil
}

// Delete removes one object. S3 answers 204 whether or not it existed.
func (c *Client) Delete(ctx context.Context, key string) error {
	c.call(opDelete)
	if _, err := c.api.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: &c.bucket, Key: &key}); err != nil {
		return c.newError("delete", key, err)
	}
	return nil
}

// CreateBucket creates the client's bucket (setup and tests).
func (c *Client) CreateBucket(ctx context.Context) error {
	c.call(opCreateBucket)
	if _, err := c.api.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: &c.bucket}); err != nil {
		return c.newError("create_bucket", "", err)
	}
	return nil
}

// HeadBucket checks that the bucket exists and the credentials reach it:
// the cheapest request that proves the configuration before a timed run.
func (c *Client) HeadBucket(ctx context.Context) error {
	c.call(opHeadBucket)
	if _, err := c.api.HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: &c.bucket}); err != nil {
		return c.newError("head_bucket", "", err)
	}
	return nil
}
