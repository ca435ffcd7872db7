#!/usr/bin/env bash
# Installs what `make test` needs on a fresh Debian 12 machine: OpenMPI (the
# MPI build and mpirun tests), fio, xfsprogs (loop-mounted XFS), e2fsprogs
# (chattr), gcc (cgo and the benchmark's syscall-floor program), Chromium
# (the HTML report's screenshot test), git (git_clone). Slurm and munge are
# installed by slurm/cluster.sh, which the Slurm test runs.
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
[ -e /usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so ] || need+=(libpmix-dev)   # srun --mpi=pmix
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "deps: missing ${need[*]}; run as root or install them (tests needing them will skip)" >&2
  exit 0
fi
echo "deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
