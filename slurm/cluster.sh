#!/usr/bin/env bash
# A single-node Slurm cluster for prism's tests and for trying
# `sbatch examples/prism.sbatch` on a workstation (Debian 12, as root).
#
#   slurm/cluster.sh up      install what is missing, write slurm.conf, start
#                            munged, slurmctld and slurmd; return once
#                            `srun -n1 true` runs (bounded wait)
#   slurm/cluster.sh down    stop what `up` started (by pid file); fine when
#                            nothing runs
#   slurm/cluster.sh status  exit 0 when the cluster answers
#
# The node is `localhost` with CPUs=8 whatever the machine has (the tests
# oversubscribe a 2-core box on purpose). Everything the daemons write —
# state, spool, pid files, logs, slurm.conf — lives under $PRISM_SLURM_DIR
# (default /var/tmp/prism-slurm). Clients find the cluster through
# SLURM_CONF=$PRISM_SLURM_DIR/slurm.conf; /etc/slurm/slurm.conf becomes a
# symlink to it only when that path is free, so a real Slurm configuration
# is never touched.
#
# Packages (Debian 12, Slurm 22.05): slurmctld slurmd slurm-client
# slurm-wlm-basic-plugins munge. `srun --mpi=pmix` needs mpi_pmix_v4.so
# (in slurm-wlm-basic-plugins), which dlopens
# /usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so from libpmix-dev (OpenMPI's
# libopenmpi-dev depends on it, so an MPI build machine has it already).
# The packages start no daemons here (no systemd); this script does.
set -euo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
STATE=${PRISM_SLURM_DIR:-/var/tmp/prism-slurm}
CONF=$STATE/slurm.conf
export SLURM_CONF=$CONF
WAIT=${PRISM_SLURM_WAIT:-30} # seconds per readiness check
MARK="# written by prism slurm/cluster.sh"

say() { echo "slurm/cluster.sh: $*" >&2; }
die() { say "$*"; exit 1; }

# tail_logs prints the end of every daemon log, for failure messages.
tail_logs() {
  local f
  for f in "$STATE/slurmctld.log" "$STATE/slurmd.log" /var/log/munge/munged.log; do
    [ -s "$f" ] || continue
    echo "---- last lines of $f" >&2
    tail -n 20 "$f" >&2
  done
}

alive() { # alive PIDFILE: the process it names runs
  [ -s "$1" ] && kill -0 "$(cat "$1" 2>/dev/null)" 2>/dev/null
}

# wait_for SECONDS WHAT CMD...: poll CMD every 0.2 s until it succeeds.
wait_for() {
  local secs=$1 what=$2 i
  shift 2
  for ((i = 0; i < secs * 5; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  say "timed out after ${secs}s waiting for $what"
  tail_logs
  exit 1
}

install_packages() {
  local need=()
  command -v munged >/dev/null || need+=(munge)
  command -v slurmctld >/dev/null || need+=(slurmctld)
  command -v slurmd >/dev/null || need+=(slurmd)
  command -v sbatch >/dev/null || need+=(slurm-client)
  [ -e /usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix.so ] || need+=(slurm-wlm-basic-plugins)
  [ -e /usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so ] || need+=(libpmix-dev)
  [ ${#need[@]} -eq 0 ] && return 0
  say "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  local apt=(apt-get -o DPkg::Lock::Timeout=120 install -y -qq --no-install-recommends "${need[@]}")
  # Try with the package lists the machine has; refresh them only if that fails.
  if ! "${apt[@]}" >"$STATE/apt.log" 2>&1; then
    apt-get -o DPkg::Lock::Timeout=120 update -qq >>"$STATE/apt.log" 2>&1 || true
    "${apt[@]}" >>"$STATE/apt.log" 2>&1 || { tail -n 20 "$STATE/apt.log" >&2; die "apt-get install ${need[*]} failed"; }
  fi
}

write_conf() {
  local tmp=$CONF.tmp
  cat >"$tmp" <<EOF
$MARK — a one-node test cluster; rewritten by every \`up\`.
ClusterName=prism
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups in containers: track processes by their parent, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SchedulerParameters=batch_sched_delay=0
# The node claims 8 CPUs whatever the machine has: tests oversubscribe.
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
KillWait=5
InactiveLimit=0
# sbatch --wait polls every 2 s only while MinJobAge is below 6 (else after 2,
# 8, then every 32 s): 5 s of job records are plenty for one node.
MinJobAge=5
NodeName=localhost NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
EOF
  if cmp -s "$tmp" "$CONF"; then
    rm -f "$tmp"
    return 1 # unchanged
  fi
  mv "$tmp" "$CONF"
  return 0
}

link_etc_conf() {
  local etc=/etc/slurm/slurm.conf
  mkdir -p /etc/slurm
  if [ -L "$etc" ] && [ "$(readlink "$etc")" = "$CONF" ]; then return 0; fi
  if [ -e "$etc" ] || [ -L "$etc" ]; then
    say "note: $etc exists and is not ours; use SLURM_CONF=$CONF with sinfo/sbatch/srun"
    return 0
  fi
  ln -s "$CONF" "$etc"
}

munge_ok() { munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
  if munge_ok; then return 0; fi
  id munge >/dev/null 2>&1 || die "no munge user: reinstall the munge package"
  install -d -o munge -g munge -m 0700 /etc/munge /var/log/munge
  install -d -o munge -g munge -m 0711 /var/lib/munge
  install -d -o munge -g munge -m 0755 /run/munge
  if [ ! -s /etc/munge/munge.key ]; then
    say "creating /etc/munge/munge.key"
    if command -v mungekey >/dev/null; then
      runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key
    else
      dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
  # A stale pid file or socket from a killed munged makes it refuse to start.
  alive /run/munge/munged.pid || rm -f /run/munge/munged.pid
  runuser -u munge -- munged --force 9>&- || { tail_logs; die "munged did not start"; }
  touch "$STATE/munged.ours"
  wait_for "$WAIT" "munged to answer (munge -n | unmunge)" munge_ok
}

# cluster_ok: both daemons run and the node is idle. The pid files are
# checked first: sinfo against a stopped slurmctld retries for seconds.
cluster_ok() {
  alive "$STATE/slurmctld.pid" && alive "$STATE/slurmd.pid" &&
    sinfo -h -N -o %T 2>/dev/null | grep -qx idle
}

up() {
  [ "$(id -u)" = 0 ] || die "up needs root (it installs packages and starts daemons)"
  mkdir -p "$STATE/ctld" "$STATE/spool"
  chmod 0755 "$STATE"
  install_packages
  local changed=0
  write_conf && changed=1
  link_etc_conf
  start_munge
  if [ $changed = 1 ] && { alive "$STATE/slurmctld.pid" || alive "$STATE/slurmd.pid"; }; then
    say "slurm.conf changed: restarting the daemons"
    stop_slurm
  fi
  if ! alive "$STATE/slurmctld.pid"; then
    # -i: ignore saved state, so a crashed earlier cluster leaves no jobs.
    slurmctld -i -f "$CONF" 9>&- || { tail_logs; die "slurmctld did not start"; }
  fi
  wait_for "$WAIT" "slurmctld to answer (scontrol ping)" bash -c 'scontrol ping | grep -q "is UP"'
  if ! alive "$STATE/slurmd.pid"; then
    slurmd -N localhost -f "$CONF" 9>&- || { tail_logs; die "slurmd did not start"; }
  fi
  wait_for "$WAIT" "the node to be idle (sinfo)" cluster_ok
  if ! timeout "$WAIT" srun -n1 -t 1 true >/dev/null 2>"$STATE/srun-check.err"; then
    cat "$STATE/srun-check.err" >&2
    tail_logs
    die "srun -n1 true failed on the new cluster"
  fi
  say "up: node localhost idle (SLURM_CONF=$CONF, logs in $STATE)"
}

# stop NAME:PIDFILE...: SIGTERM to all at once, wait up to 10 s for them
# to exit, then SIGKILL what is left.
stop() {
  local spec pf i left
  for spec in "$@"; do
    pf=${spec#*:}
    if alive "$pf"; then kill "$(cat "$pf")" 2>/dev/null || true; else rm -f "$pf"; fi
  done
  for ((i = 0; i < 50; i++)); do
    left=0
    for spec in "$@"; do
      pf=${spec#*:}
      if alive "$pf"; then left=1; else rm -f "$pf"; fi
    done
    [ $left = 0 ] && return 0
    sleep 0.2
  done
  for spec in "$@"; do
    pf=${spec#*:}
    if alive "$pf"; then
      say "${spec%%:*} (pid $(cat "$pf")) ignored SIGTERM; killing it"
      kill -9 "$(cat "$pf")" 2>/dev/null || true
    fi
    rm -f "$pf"
  done
}

stop_slurm() {
  if alive "$STATE/slurmctld.pid"; then
    # Jobs still running would outlive slurmd (their slurmstepd stays).
    local jobs
    jobs=$(timeout 5 squeue -h -o %i 2>/dev/null || true)
    if [ -n "$jobs" ]; then
      # shellcheck disable=SC2086
      timeout 5 scancel $jobs 2>/dev/null || true
      sleep 1
    fi
  fi
  stop "slurmd:$STATE/slurmd.pid" "slurmctld:$STATE/slurmctld.pid"
}

down() {
  [ -d "$STATE" ] || return 0
  stop_slurm
  if [ -e "$STATE/munged.ours" ]; then
    stop munged:/run/munge/munged.pid
    rm -f "$STATE/munged.ours"
  fi
  say "down"
}

# One up or down at a time (two test runs on one machine).
lock() {
  mkdir -p "$STATE"
  exec 9>"$STATE/lock"
  flock -w 180 9 || die "another slurm/cluster.sh holds $STATE/lock"
}

case "${1:-}" in
up) lock && up ;;
down) [ -d "$STATE" ] || exit 0; lock && down ;;
status) cluster_ok ;;
*)
  echo "usage: slurm/cluster.sh up|down|status" >&2
  exit 2
  ;;
esac
