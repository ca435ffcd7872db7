// Package spmd owns how prism's ranks find each other and talk: the Comm
// interface (barrier, reductions, gather, broadcast, split, abort), its three
// implementations and the discovery of rank identity from the environment.
//
//   - Single: one rank, every collective is a local no-op.
//   - Rendezvous: pure Go; ranks exchange small files in a shared directory
//     (tmp file + rename, readers open exact names so NFS close-to-open
//     consistency is enough). Every wait has a timeout and watches an abort
//     file and the peers' heartbeats, so a dead rank never hangs the others.
//     Its polling backs off to 2 ms; Align (the Aligner interface) releases
//     the ranks within ~50 µs for the start of a timed step.
//   - MPI: a thin cgo binding to the system MPI library (build tag "mpi");
//     without the tag a stub fails loudly when MPI is asked for.
//
// The local launcher (Launch) starts N copies of the current binary with a
// private rendezvous directory, forwards signals and stops every child when
// one dies. With LaunchConfig.Bind it gives each child a disjoint block of
// its own CPUs (CPUBlocks): unbound ranks float over CPUs of unequal speed
// and their helper threads preempt each other. Affinity and CPUList let a
// rank report the binding it got, from whichever launcher.
//
// spmd must not know about phases, plans or reports: it moves bytes and
// numbers between ranks, nothing else. It never prints; callers pass writers.
package spmd
