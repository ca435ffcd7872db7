// Package s3test runs a real S3 server for tests and benchmarks: VersityGW
// (github.com/versity/versitygw) with its posix backend serving a directory,
// on 127.0.0.1 at a free port, with credentials generated per server.
//
// The binary is built from the Go module proxy on first use (go install
// …/cmd/versitygw@Version: 4m15s wall and 2.5 CPU-minutes measured on two
// busy cores with an empty module cache, ~30s with a warm one) into the
// user's cache directory, outside any repository, and reused after; a file
// lock makes concurrent test processes build it once. PRISM_VERSITYGW names
// a prebuilt binary instead.
//
// The posix backend keeps object metadata (ETags, content types) in
// extended attributes; on a filesystem without user xattrs (ramfs, older
// tmpfs) Start finds that out with a probe and switches the server to a
// sidecar metadata directory, so it serves from any local directory.
//
// Servers are processes this package started, stopped and killed by their
// PID, never by name; on Linux each dies with the process that started it,
// so a test killed by its timeout leaves no server behind.
package s3test
