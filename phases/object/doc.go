// Package object is the object-storage phase family: s3_put, s3_get
// (whole objects or range_size ranges), s3_stat (HEAD), s3_list
// (ListObjectsV2, page_size keys a page), s3_delete (DeleteObject, or
// DeleteObjects batches of batch keys) and s3_multipart (part_size parts,
// part_concurrency in flight), the operations warp and elbencho measure.
//
// Every kind takes count objects of size bytes per rank, workers requests
// in flight per rank, and objects_per_prefix objects under one prefix;
// keys are <prefix>/prism-<run-id>/<phase>/r<rank>/d<j>/o<i>. A phase
// that reads, stats, lists or deletes writes its objects in Setup,
// untimed, as the metadata family's list and delete phases create their
// files; every phase deletes its objects in Teardown.
//
// Storage is [plan] storage = "s3://bucket/prefix" or the phase's own
// storage key, with the s3_* keys of phases.StorageOptions. The first
// phase to use a bucket checks it (reading the marker) and marks the run's prefix
// (io/s3 Run); every key is recorded before its first request, and the
// engine deletes what is left and then the marker at the end of the run
// (phases.ObjectStore, a RunCloser), refusing when the marker is not the
// run's.
//
// # Allocation
//
// The timed loops allocate nothing of their own per request: keys, key
// prefixes, buffers (one per worker, of size bytes, patterned) and the
// per-request closures are made in Setup, bodies are sent from and read
// into those buffers without a copy, and each worker records into its own
// report.Set. The AWS SDK itself does allocate per request, and that is
// not avoidable from outside it: the input struct, the middleware stack
// and its context values, the http.Request and its headers, the SigV4
// signature strings and the output struct: about 500 allocations per PUT,
// 470 per GET and 450 per HEAD with service/s3 v1.114.10, measured by
// TestSDKAllocations, which also checks a timed op allocates no more than
// the SDK call alone. s3_list also allocates the page
// of keys it returns, DeleteObjects batches the request's key list, and
// s3_multipart each upload's part list, goroutines and context.
package object
