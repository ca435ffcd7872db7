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
//     the ranks within ~50 µs for the start of a timed step. The directory
//     records the job's token (JobToken: the launcher's nonce, the Slurm
//     job and step, or PRISM_RENDEZVOUS_TOKEN), so two jobs given one
//     directory, or a job and the leftovers of a dead one, are refused
//     instead of merged (rendezvous_job.go). Each rank opens the directory
//     once and reaches every file through that descriptor, never by path,
//     and fails with ErrDirReplaced when the path comes to lead elsewhere
//     (rendezvous_dir.go): another user who can write the parent cannot
//     redirect root's creates and removals.
//   - MPI: a thin cgo binding to the system MPI library (build tag "mpi");
//     without the tag a stub fails loudly when MPI is asked for.
//
// # Bounded collectives under MPI
//
// A blocking MPI collective waits forever for a rank that stopped
// answering (SIGSTOPped, stuck in the kernel, on a frozen node), and so
// does the whole job, silently. So every collective of the MPI Comm is
// the non-blocking one (MPI_Ibarrier, MPI_Iallreduce, MPI_Ireduce,
// MPI_Igather(v), MPI_Ibcast; Split meets in an MPI_Ibarrier before its
// MPI_Comm_split, which has no non-blocking form), polled with MPI_Test
// until it completes, ctx is done, or the communicator's timeout
// (OpenOptions.Timeout, the plan's coordination_timeout, default 3m;
// (*MPI).SetTimeout) passes. Polling spins for 1 ms, where in-step
// collectives complete, then sleeps (in C, off the Go scheduler) in
// doubling steps from 50 µs to 1 ms: a rank waiting for a late peer uses
// ~10% of a CPU over a 20 ms wait and ~5% over longer ones, where a
// blocking MPI_Barrier uses 70-100%, and sees the completion at most ~1 ms
// late; Align, used before a timed step, adds a second barrier that
// releases the ranks together. The buffers of a pending collective are
// pinned (runtime.Pinner). For jobs of up to 4 ranks NewMPI has OpenMPI's
// libnbc reduce large arrays binomially, as it does for larger jobs: its
// segmented chain made a histogram's MPI_Ireduce 10-20 times slower.
//
// A pending collective cannot say whom it waits for, so a rank whose
// collective timed out probes: every process runs a responder goroutine
// on a private duplicate of MPI_COMM_WORLD, which keeps a receive posted,
// tests it every 20 ms and answers each ping with how many collectives it
// has entered on the communicator named and which one it is in. Those
// answers need nothing of the rank's main goroutine, so a rank that is
// merely slow (in a long phase, or blocked in a system call) answers; a
// stopped, wholly hung or unreachable process does not. The prober pings
// every other member, waits a tenth of the timeout (0.5 s to 3 s) and
// returns a *TimeoutError naming each rank that had not reached the
// collective, with its host (gathered when MPI is set up) and whether it
// answered; errors.Is(err, ErrTimeout) holds and errors.As gives a
// *RankError for the first. The probe costs one small message each way per
// member, only after a timeout.
//
// The collective stays pending inside MPI (MPI cannot cancel a
// collective), so its communicator is out of step: later collectives on it
// fail at once, Close leaves it allocated, and closing the world skips
// MPI_Finalize, which would wait for the missing rank. MPI_Finalize is
// bounded by the timeout in any case. The caller writes what it has and
// calls Abort (MPI_Abort needs no other rank), or exits non-zero; either
// way mpirun kills the job, resuming a stopped rank to do so.
//
// The local launcher (Launch) starts N copies of the current binary with a
// private rendezvous directory and a random job token, forwards signals and
// stops every child when one dies. Its verdict follows prism's exit codes,
// whatever the children's statuses: 1 for a rank that failed or was killed,
// 2 when the first to fail reported bad usage, 130/143 only when the user
// interrupted the launcher; a *JobError says which rank and how. With
// LaunchConfig.Bind it gives each child a disjoint block of its own CPUs
// (CPUBlocks): unbound ranks float over CPUs of unequal speed and their
// helper threads preempt each other. Affinity and CPUList let a
// rank report the binding it got, from whichever launcher.
//
// Outside the collectives, two side channels ride each communicator:
// alerts (Alerter: a failed rank stops its peers' long steps) and reports
// (Reporter: each rank tells rank 0 a few numbers, live progress), as
// files in the rendezvous directory or messages on a private duplicate
// communicator under MPI. Neither ever waits for another rank.
//
// spmd must not know about phases, plans or reports: it moves bytes and
// numbers between ranks, nothing else. It never prints; callers pass writers.
package spmd
