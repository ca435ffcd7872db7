#!/usr/bin/env bash
# Installs what `make test` needs on a fresh Debian 12 machine: OpenMPI (the
# MPI build and mpirun tests), fio, xfsprogs (loop-mounted XFS), e2fsprogs
# (chattr), gcc (cgo and the benchmark's syscall-floor program), Chromium
# (the HTML report's screenshot test), git (git_clone), PyTorch and strace
# (phases/ckpt checks its checkpoint formats and call shapes against real
# torch; in CI a missing torch fails those tests), python3-fsspec (the bench
# scripts make test runs small, TestBenchScriptsRun). Slurm and munge are
# installed by slurm/cluster.sh, which the Slurm test runs. VersityGW (the S3
# tests' server) is no package: make test-go builds it from the Go module
# proxy (io/s3/s3test TestBinary, bounded at 10 minutes) into the user's
# cache directory before the tests.
# Idempotent and quiet when everything is present; needs root to install.
set -euo pipefail
need=()
command -v mpicc  >/dev/null || need+=(libopenmpi-dev openmpi-bin)
command -v fio    >/dev/null || need+=(fio)
command -v mkfs.xfs >/dev/null || need+=(xfsprogs)
command -v chattr >/dev/null || need+=(e2fsprogs)
command -v gcc    >/dev/null || need+=(gcc libc6-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v chromium >/dev/null || need+=(chromium fonts-liberation)   # report.html screenshot test
command -v git    >/dev/null || need+=(git)
/usr/bin/python3 -c 'import torch' 2>/dev/null || need+=(python3-torch)   # phases/ckpt: real torch as the oracle
command -v strace >/dev/null || need+=(strace)                          # phases/ckpt: torch's call shapes
[ -e /usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so ] || need+=(libpmix-dev)   # srun --mpi=pmix
# The emulated nodes of slurm/cluster.sh up --nodes (multinode_test.go):
# namespaces and veths, and the shared sshfs filesystem with its sshd.
command -v ip     >/dev/null || need+=(iproute2)
command -v sshfs  >/dev/null || need+=(sshfs)
[ -x /usr/sbin/sshd ]        || need+=(openssh-server)
# fsspec, the list+stat peer of workflow.sh (which also needs GNU tar and
# md5sum, both essential in Debian): make test runs the bench scripts small
# (TestBenchScriptsRun), and workflow.sh refuses to start without it.
/usr/bin/python3 -c 'import fsspec' 2>/dev/null || need+=(python3-fsspec)
# make bench's other peer (.ci/deps.sh --bench): boto3 for the S3 client
# comparison; make test does not need it.
if [ "${1:-}" = --bench ]; then
  /usr/bin/python3 -c 'import boto3' 2>/dev/null || need+=(python3-boto3)
fi
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "deps: missing ${need[*]}; run as root or install them (tests needing them will skip)" >&2
  exit 0
fi
echo "deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
