// Package slurm owns what prism knows about Slurm: reading the job's
// environment (job id, node list, tasks per node) for the manifest, writing
// batch scripts for a plan, checking a request against the partitions sinfo
// reports before it is submitted (so a job that would pend forever is
// explained instead), and cluster.sh, which brings up the test clusters: one
// node, or N emulated nodes (network namespaces with their own hostnames,
// slurmds and a shared sshfs mount) for multi-host runs on one machine.
// It must not start ranks itself: srun or mpirun does that, and spmd
// discovers the rank identity.
package slurm
