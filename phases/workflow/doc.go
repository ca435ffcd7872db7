// Package workflow is the workflow family (PRISM §3.1.1): what a developer does to a shared
// filesystem besides training — cloning repositories, packing and
// unpacking source trees. Each timed op is a whole user-visible command
// (`git clone`, creating an archive, extracting one); untar also times the
// creation of every file it extracts. Inputs (the repository to clone, the
// tree to archive, the archive to extract) are made untimed in Setup from
// a deterministic tree generator (tree.go).
//
// It imports only the framework (phases), phases/ckpt, io, report and spmd
// (see phases/doc.go); phases/all registers its kinds.
package workflow
