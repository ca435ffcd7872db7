// Package dataload is the data-loading family (PRISM §3.1.3, §3.1.5): create_dataset writes a
// deterministic dataset and records the MD5 of every file as it is
// generated; md5_check reads a dataset back in a seeded order and checks
// every file against those sums; train (train.go) emulates MLPerf
// Storage's training workload on such files.
//
// A dataset's content is io.Generator "deterministic" data: file i is
// stream i of the generator keyed by the seed, so the same seed gives the
// same bytes on every run and machine, whatever the chunk size or the
// number of ranks that wrote it. Files are assigned to ranks round-robin by
// index. At the end of create_dataset every rank holds the manifest of the
// whole dataset (paths, sizes, MD5s) in Env.State, so the phases after it
// can read any file, also at another rank count.
//
// With storage = "s3://…" (s3.go), create_dataset and md5_check put and
// get every file as one object named like it below the run's prefix, on
// the framework's phases.ObjectStore, and train (dataset = "latest") reads
// its samples as ranged GETs of those objects.
//
// With persist = "<name>" (persist.go), create_dataset writes the dataset
// once into a persistent directory outside the run directory
// (phases/persist.go) and a later one reuses it; a job that finds another
// creating it waits for it, at most persist_wait (phases/persistclaim.go);
// train and md5_check read it with dataset = "<name>" after a stat (or
// MD5) pass on every rank.
//
// It imports only the framework (phases), phases/ckpt, io, report and spmd
// (see phases/doc.go); phases/all registers its kinds.
package dataload
