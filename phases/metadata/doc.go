// Package metadata is the metadata family (PRISM §3.1.2): storms of create, readdir+stat,
// rename and unlink, and directory trees. Every path is prepared in Setup;
// a timed op is exactly the syscalls the op name says. synthetic_workload
// (PRISM's generate family) creates files with seeded arrivals and sizes.
//
// It imports only the framework (phases), phases/ckpt, io, report and spmd
// (see phases/doc.go); phases/all registers its kinds.
package metadata
