package phases

import (
	"context"
	"fmt"
	"time"

	ps3 "github.com/prism-hpc/prism/io/s3"
	"github.com/prism-hpc/prism/report"
)

// StorageOptions choose where a phase's data goes: the POSIX workdir
// (storage empty) or an S3 bucket (storage = "s3://bucket/prefix"), with
// the client settings that reach it. [plan] carries them for every phase
// that runs over object storage; a phase's own keys override the plan's
// one by one. There is deliberately no key for credentials: they come from
// the AWS environment and profile chain (see io/s3).
type StorageOptions struct {
	Storage              string    `toml:"storage" doc:"\"\" (the workdir) or \"s3://bucket/prefix\": prism writes only under <prefix>/prism-<run-id>/, marks it and deletes only what it wrote; credentials come from the AWS chain (AWS_ACCESS_KEY_ID…, AWS_PROFILE), never from the plan"`
	S3Endpoint           string    `toml:"s3_endpoint" doc:"S3 service URL (http://host:port); empty: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's endpoint_url, else AWS's regional endpoint"`
	S3Region             string    `toml:"s3_region" doc:"region requests are signed for; empty: AWS_REGION or the profile's, else us-east-1"`
	S3PathStyle          *bool     `toml:"s3_path_style" doc:"address buckets as endpoint/bucket/key (most on-premises stores need it); default true with an s3_endpoint, false without"`
	S3InsecureSkipVerify *bool     `toml:"s3_insecure_skip_verify" doc:"do not verify the server's TLS certificate (test systems only; recorded in the manifest)"`
	S3CAFile             string    `toml:"s3_ca_file" doc:"PEM bundle of certificate authorities to trust for the endpoint"`
	S3ConnectTimeout     *Duration `toml:"s3_connect_timeout" doc:"bound on a TCP connect and TLS handshake (default 5s)"`
	S3RequestTimeout     *Duration `toml:"s3_request_timeout" doc:"bound on one whole request, body included (default 0: none beyond op_timeout)"`
	S3MaxAttempts        *int      `toml:"s3_max_attempts" doc:"requests per operation; 1 (the default) means no retries, so each latency is one request's; retries are counted in the manifest"`
	S3MaxConns           *int      `toml:"s3_max_conns" doc:"idle connections kept per host (default 64; size it to the concurrency or requests pay new handshakes)"`
}

// Over returns o with every key it leaves unset taken from plan: a
// phase's storage keys over the plan's, key by key.
func (o StorageOptions) Over(plan StorageOptions) StorageOptions {
	if o.Storage == "" {
		o.Storage = plan.Storage
	}
	if o.S3Endpoint == "" {
		o.S3Endpoint = plan.S3Endpoint
	}
	if o.S3Region == "" {
		o.S3Region = plan.S3Region
	}
	if o.S3PathStyle == nil {
		o.S3PathStyle = plan.S3PathStyle
	}
	if o.S3InsecureSkipVerify == nil {
		o.S3InsecureSkipVerify = plan.S3InsecureSkipVerify
	}
	if o.S3CAFile == "" {
		o.S3CAFile = plan.S3CAFile
	}
	if o.S3ConnectTimeout == nil {
		o.S3ConnectTimeout = plan.S3ConnectTimeout
	}
	if o.S3RequestTimeout == nil {
		o.S3RequestTimeout = plan.S3RequestTimeout
	}
	if o.S3MaxAttempts == nil {
		o.S3MaxAttempts = plan.S3MaxAttempts
	}
	if o.S3MaxConns == nil {
		o.S3MaxConns = plan.S3MaxConns
	}
	return o
}

// IsS3 reports whether the options name an S3 bucket.
func (o StorageOptions) IsS3() bool { return o.Storage != "" }

// Validate checks the keys' values; a *KeyError names the key.
func (o StorageOptions) Validate() error {
	if o.Storage != "" {
		if _, err := ps3.ParseURI(o.Storage); err != nil {
			return &KeyError{Key: "storage", Msg: err.Error()}
		}
	}
	if o.S3MaxAttempts != nil && (*o.S3MaxAttempts < 1 || *o.S3MaxAttempts > 20) {
		return &KeyError{Key: "s3_max_attempts", Msg: fmt.Sprintf("%d out of range (1 .. 20)", *o.S3MaxAttempts)}
	}
	if o.S3MaxConns != nil && (*o.S3MaxConns < 1 || *o.S3MaxConns > 65536) {
		return &KeyError{Key: "s3_max_conns", Msg: fmt.Sprintf("%d out of range (1 .. 65536)", *o.S3MaxConns)}
	}
	return nil
}

// S3Config is the io/s3 client configuration the options describe, and the
// parsed URI.
func (o StorageOptions) S3Config() (ps3.Config, ps3.URI, error) {
	u, err := ps3.ParseURI(o.Storage)
	if err != nil {
		return ps3.Config{}, ps3.URI{}, err
	}
	cfg := ps3.Config{Bucket: u.Bucket, Endpoint: o.S3Endpoint, Region: o.S3Region, CAFile: o.S3CAFile,
		// An explicit endpoint is almost always an on-premises store,
		// which wants path-style addressing; AWS itself wants virtual hosts.
		PathStyle: o.S3Endpoint != ""}
	if o.S3PathStyle != nil {
		cfg.PathStyle = *o.S3PathStyle
	}
	if o.S3InsecureSkipVerify != nil {
		cfg.InsecureSkipVerify = *o.S3InsecureSkipVerify
	}
	if o.S3ConnectTimeout != nil {
		cfg.ConnectTimeout = time.Duration(*o.S3ConnectTimeout)
	}
	if o.S3RequestTimeout != nil {
		cfg.RequestTimeout = time.Duration(*o.S3RequestTimeout)
	}
	if o.S3MaxAttempts != nil {
		cfg.MaxAttempts = *o.S3MaxAttempts
	}
	if o.S3MaxConns != nil {
		cfg.MaxIdleConns = *o.S3MaxConns
	}
	return cfg, u, nil
}

// RunCloser is implemented by values a phase keeps in Env.State that hold
// something of the run outside the run directory (a bucket's run prefix).
// Once every phase is done and every rank has passed the final barrier,
// the engine calls ReleaseRun on every rank (delete what this rank wrote
// and still holds), waits for all ranks again, then calls CloseRun (the
// rank that marked the prefix removes the marker), so the marker goes
// last. Neither runs with [plan] keep = true. Errors go to stderr, like
// the run directory's cleanup.
type RunCloser interface {
	ReleaseRun(ctx context.Context) error
	CloseRun(ctx context.Context) error
}

// ObjectStore is one rank's handle on a bucket's run prefix: one client (one
// connection pool for all of the rank's workers and phases) and the Run
// that records every key the rank writes. It lives in Env.State, so the
// phases of a run share it, and the engine hands it back at the end of
// the run (RunCloser).
type ObjectStore struct {
	URI    ps3.URI
	Client *ps3.Client
	Run    *ps3.Run
	owner  bool // this rank wrote the marker, and removes it last
}

// ReleaseRun deletes what this rank wrote and still holds (a phase that
// failed before its Teardown), after checking the marker is the run's.
func (s *ObjectStore) ReleaseRun(ctx context.Context) error { return s.Run.Release(ctx) }

// CloseRun removes the marker on the rank that wrote it, and closes the
// client's connections on every rank.
func (s *ObjectStore) CloseRun(ctx context.Context) error {
	defer s.Client.Close()
	if !s.owner {
		return nil
	}
	return s.Run.Cleanup(ctx)
}

var _ RunCloser = (*ObjectStore)(nil)

// OpenObjectStore returns the rank's store for the phase's storage options,
// creating it on first use: rank 0 of the phase checks the bucket and
// marks <prefix>/prism-<run-id>/ (or joins the mark a concurrent phase
// made), then the other ranks join it. Every rank takes part in both
// agreements whether or not it already holds the store, so a sweep that
// adds ranks stays in step.
func OpenObjectStore(ctx context.Context, env *Env, opts StorageOptions) (*ObjectStore, error) {
	if !opts.IsS3() {
		return nil, env.Errorf("storage: %s needs object storage: set storage = \"s3://bucket/prefix\" on the phase or in [plan]", env.Kind)
	}
	cfg, uri, err := opts.S3Config()
	if err != nil {
		return nil, env.Errorf("storage: %w", err)
	}
	key := fmt.Sprintf("prism.objectstore %s %+v", uri, cfg)
	st, _ := env.State[key].(*ObjectStore)
	var local error
	if st == nil && env.Rank == 0 {
		st, local = startStore(ctx, env, cfg, uri, true)
	}
	if err := env.Agree(ctx, local); err != nil {
		return nil, err
	}
	if st == nil {
		st, local = startStore(ctx, env, cfg, uri, false)
	}
	if err := env.Agree(ctx, local); err != nil {
		return nil, err
	}
	env.State[key] = st
	st.Record(env)
	return st, nil
}

// Record sets the phase's storage record (SetStorage): URI, run prefix,
// client settings and, with retries on, the requests the client has
// retried since the run began. OpenObjectStore records it in Setup; a
// phase calls it again after its Run so the retries include the Run's.
func (s *ObjectStore) Record(env *Env) {
	env.SetStorage(&report.StorageInfo{URI: s.URI.String(), RunPrefix: s.Run.Prefix(), Client: s.Client.Settings(), Retries: retriesOrNil(s.Client)})
}

func retriesOrNil(c *ps3.Client) map[string]int64 {
	if r := c.Retries(); len(r) > 0 {
		return r
	}
	return nil
}

// startStore builds the client and marks (first) or joins the run prefix.
func startStore(ctx context.Context, env *Env, cfg ps3.Config, uri ps3.URI, first bool) (*ObjectStore, error) {
	c, err := ps3.New(ctx, cfg)
	if err != nil {
		return nil, env.Errorf("storage %s: %w", uri, err)
	}
	st := &ObjectStore{URI: uri, Client: c}
	if !first {
		if st.Run, err = c.JoinRun(ctx, uri.Prefix, env.RunID); err != nil {
			return nil, env.Errorf("storage %s: %w", uri, err)
		}
		return st, nil
	}
	// StartRun's first request (a GET of the marker) proves endpoint,
	// credentials and bucket before anything is written; unlike a
	// HeadBucket, its error response has a body, so the S3 error code
	// (SignatureDoesNotMatch, NoSuchBucket) reaches the message.
	st.Run, err = c.StartRun(ctx, uri.Prefix, env.RunID)
	if err != nil {
		// A phase running beside this one (a group) may have marked the
		// run's prefix first: then it is ours to join, not to refuse.
		if r, jerr := c.JoinRun(ctx, uri.Prefix, env.RunID); jerr == nil {
			st.Run = r
			return st, nil
		}
		return nil, env.Errorf("storage %s: %w", uri, err)
	}
	st.owner = true
	return st, nil
}
