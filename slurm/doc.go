// Package slurm owns what prism knows about Slurm: reading the job's
// environment (job id, node list, tasks per node) for the manifest, writing
// batch scripts for a plan, and the scripts that bring up a single-node test
// cluster. It must not start ranks itself: srun or mpirun does that, and
// spmd discovers the rank identity.
package slurm
