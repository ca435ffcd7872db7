// Package s3 is prism's object-storage client: the layer the object phase
// family and the S3 side of the checkpoint and dataload storage seam stand
// on. It owns the connection to one bucket (endpoint, region, addressing,
// TLS, timeouts, pool size), the operations a benchmark times (Put, Get,
// GetRange, Head, List, Delete, DeleteBatch, multipart), the streaming
// shapes a file-like writer and reader need (Upload: a multipart upload fed
// by Write in bounded memory; RangeReader: ReadAt by ranged GETs through a
// readahead window), one typed error
// (*Error) that names op, bucket, key, endpoint, HTTP status and S3 code with
// a remedy, s3:// URI parsing, the run-prefix discipline (Run) and the
// settings the manifest records (Settings).
//
// It is built on the AWS SDK for Go v2, so credentials, profiles and
// AWS_ENDPOINT_URL resolve exactly as in every other AWS SDK. Credentials
// come only from that chain (environment, shared config and credentials
// files, AWS_PROFILE, SSO, credential_process, instance roles); Config has no
// field for them, so a plan cannot carry one, and nothing here prints or
// records them.
//
// Retries are off unless Config.MaxAttempts asks for them: a benchmark must
// see the latency of each request, not of a request plus its silent retries.
// When they are on, the retries of each operation are counted (Retries).
// Checksums beyond what the protocol requires (the SDK's default CRC32 on
// every PUT) are off for the same reason: they are client CPU the storage
// under test never asked for.
//
// Bodies above 2 MiB go with "Expect: 100-continue", the SDK's default (and
// boto3's): one more round trip per large PUT or part, which is what users
// of either see. Every payload is hashed (SHA-256) into the signature, as
// the SDK does when no flexible checksum replaces it.
//
// Buffers belong to the caller: Put sends the caller's slice, Get and
// GetRange read into the caller's slice, so a timed loop allocates its
// buffers once, before the clock starts. The package must not time anything
// or know about phases: callers wrap its calls with their own Recorder.
//
// The package's own name collides with the SDK's service package; importers
// that use both alias this one (ps3 "github.com/prism-hpc/prism/io/s3").
package s3
