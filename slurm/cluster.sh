#!/usr/bin/env bash
# Test clusters for prism on one Debian 12 machine, as root: a one-node Slurm
# cluster, or N emulated nodes, each its own host as far as Slurm, OpenMPI
# and prism can tell.
#
#   slurm/cluster.sh up             one node, `localhost` (what slurm_test.go
#                                   and `make slurm-up` use)
#   slurm/cluster.sh up --nodes N   N emulated nodes node1..nodeN (make
#                                   cluster-up NODES=N)
#   slurm/cluster.sh down           stop and remove everything `up` made
#                                   (the nodes' /tmp too, not the shared
#                                   directory's files); fine after a
#                                   half-failed up, or when nothing runs
#   slurm/cluster.sh status         exit 0 when the cluster answers (every
#                                   node idle)
#   slurm/cluster.sh env            the variables a shell or a test needs:
#                                   eval "$(slurm/cluster.sh env)"
#   slurm/cluster.sh exec NODE CMD...  run CMD on an emulated node
#   slurm/cluster.sh crash NODE     SIGKILL every process on NODE (its
#                                   slurmd, its mount, its ranks), as a node
#                                   that loses power; `up` brings it back
#   slurm/cluster.sh link NODE down|up  cut or restore NODE's network link
#
# `up` is idempotent: it checks every piece, starts only what is missing (so
# it also repairs a crashed node), and returns once every node is idle and
# `srun` runs on all of them (bounded waits, PRISM_SLURM_WAIT seconds each,
# with the logs' last lines on failure). `up` with another shape than the
# running cluster's takes the old one down first.
#
# Everything the daemons write (slurm.conf, state, spool, pid files, logs,
# munge key and socket, ssh keys) lives under $PRISM_SLURM_DIR (default
# /var/tmp/prism-slurm), one cluster per directory. Clients find it through
# SLURM_CONF=$PRISM_SLURM_DIR/slurm.conf; /etc/slurm/slurm.conf becomes a
# symlink to it only when that path is free (and `down` removes only that
# symlink), so a real Slurm configuration is never touched. munged is the
# cluster's own (its socket and key in the state directory, AuthInfo in
# slurm.conf), so a site's munged and /etc/munge are never touched either.
# Several clusters can run at once given distinct state directories and,
# for emulated nodes, distinct PRISM_CLUSTER_PREFIX, PRISM_CLUSTER_NET and
# PRISM_SLURM_PORT: `up` refuses a bridge, namespace or veth of its names
# that another cluster made, and `down` removes only what its own state
# directory records ($STATE/netns, the owner alias on bridge and veths).
#
# An emulated node nodeK is
#   - a network namespace $PREFIX-nodeK (PRISM_CLUSTER_PREFIX, default
#     "cluster") whose eth0 is one end of a veth pair; the other end,
#     $PREFIX-vK, is a port of the bridge $PREFIX-br. The bridge has
#     $NET.1/24 (PRISM_CLUSTER_NET, default 10.213.47.0/24), nodeK has
#     $NET.(K+1). No default route, no forwarding: a node reaches the bridge
#     and its peers, nothing else;
#   - its own UTS namespace (hostname nodeK) and mount namespace, both kept
#     by bind mounts of their nsfs files under $STATE/ns, so slurmd, the
#     OpenMPI agent and `exec` enter the very same node: same hostname, same
#     /tmp, same mounts. In it: /tmp is the node's own directory
#     ($STATE/nodes/nodeK/tmp: PMIx and OpenMPI keep per-node session
#     directories there, which collide when nodes share one /tmp), and
#     /etc/hosts is the cluster's hosts file (the head and every node), so
#     names resolve on the nodes while the real /etc/hosts stays untouched.
#     The host itself does not need the names: slurm.conf gives NodeAddr and
#     the agent maps names to namespaces;
#   - a slurmd (`slurmd -N nodeK`, SlurmdSpoolDir/PidFile/LogFile with %n);
#   - the shared filesystem: this kernel has no NFS client, so an sshd on
#     the head side of the bridge ($NET.1, port PRISM_SLURM_PORT+2, keys
#     generated under $STATE/ssh, sftp only) serves $STATE/shared, and every
#     node mounts it with sshfs at that same path, with attribute, entry and
#     directory caching on for 3 s, as an NFS client caches attributes
#     (acregmin=3). On the host the same path is the exported directory
#     itself: the file server's view, where tests read results.
# munged, slurmctld (SlurmctldHost=<hostname>($NET.1), port PRISM_SLURM_PORT,
# default 6827, so a one-node cluster on 6817 can run beside it) and sshd run
# on the host. Every node claims PRISM_CLUSTER_CPUS CPUs (default 8) whatever
# the machine has, and the partition oversubscribes, so a 2-core machine
# schedules several tasks per node.
#
# OpenMPI across the nodes: `env` prints OMPI_MCA_plm_rsh_agent (the agent,
# $STATE/agent, which runs the orted inside the node's namespaces as ssh
# would, with a login-like environment) and the TCP interface selection, so
#   eval "$(slurm/cluster.sh env)"
#   mpirun --host node1:2,node2:2 -np 4 prism plan.toml
# runs 2 ranks on each of 2 nodes; srun -N 2 -n 4 --mpi=pmix works as well.
#
# Packages (Debian 12, Slurm 22.05), installed when missing: slurmctld slurmd
# slurm-client slurm-wlm-basic-plugins munge libpmix-dev, and for emulated
# nodes iproute2 sshfs openssh-server (for its sshd; where systemd runs, the
# package also starts the system's ssh service). `srun --mpi=pmix` needs
# mpi_pmix_v4.so (slurm-wlm-basic-plugins), which dlopens
# /usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so (libpmix-dev). The packages
# start no daemons here (no systemd); this script does.
set -euo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
STATE=${PRISM_SLURM_DIR:-/var/tmp/prism-slurm}
CONF=$STATE/slurm.conf
export SLURM_CONF=$CONF
WAIT=${PRISM_SLURM_WAIT:-30} # seconds per readiness check
MARK="# written by prism slurm/cluster.sh"
PREFIX=${PRISM_CLUSTER_PREFIX:-cluster}
# The cluster's /24, as its first three numbers; `env` prints it as a CIDR,
# which is accepted too.
NET=${PRISM_CLUSTER_NET:-10.213.47}
NET=${NET%.0/24}
PORT=${PRISM_SLURM_PORT:-6827}
CPUS=${PRISM_CLUSTER_CPUS:-8}
BR=$PREFIX-br
HEAD=$NET.1
SHARED=$STATE/shared
NSDIR=$STATE/ns
MUNGE=$STATE/munge
SSHDIR=$STATE/ssh
AGENT=$STATE/agent
SSHD_PORT=$((PORT + 2))
# The bridge's alias (ip link ... alias) says which state directory owns it.
OWNER="prism cluster $STATE"

say() { echo "slurm/cluster.sh: $*" >&2; }
die() { say "$*"; exit 1; }

# The state directory ends up in slurm.conf, sshd_config, the agent and
# sshfs options, none of which quote: keep it to plain path characters.
[[ $STATE =~ ^/[A-Za-z0-9._/-]+$ ]] || die "PRISM_SLURM_DIR=$STATE: use an absolute path of letters, digits, '.', '_', '-' and '/'"
[[ $PREFIX =~ ^[a-z][a-z0-9-]{0,7}$ ]] || die "PRISM_CLUSTER_PREFIX=$PREFIX: 1 to 8 lower-case letters, digits or '-' (interface names are at most 15 bytes)"
[[ $NET =~ ^10\.([0-9]{1,3})\.([0-9]{1,3})$ && ${BASH_REMATCH[1]} -le 255 && ${BASH_REMATCH[2]} -le 255 ]] ||
  die "PRISM_CLUSTER_NET=$NET: the first three numbers of a private 10.x.y.0/24 network, e.g. 10.213.47"
[[ $PORT =~ ^[0-9]+$ && $PORT -ge 1024 && $PORT -le 65000 ]] || die "PRISM_SLURM_PORT=$PORT: a port number from 1024 to 65000"
[[ $CPUS =~ ^[0-9]+$ && $CPUS -ge 1 && $CPUS -le 1024 ]] || die "PRISM_CLUSTER_CPUS=$CPUS: 1 to 1024"

# nodes: how many emulated nodes the cluster in $STATE has (0: the one-node
# localhost cluster), from the mode file `up` writes before it builds
# anything, so `down` knows what to remove after a half-failed `up`.
nodes() {
  local n
  n=$(sed -n 's/^nodes=\([0-9]*\)$/\1/p' "$STATE/mode" 2>/dev/null || true)
  echo "${n:-0}"
}
node_names() { # node_names N: node1 .. nodeN
  local k
  for ((k = 1; k <= $1; k++)); do echo "node$k"; done
}

# tail_logs prints the end of every daemon log, for failure messages.
tail_logs() {
  local f
  for f in "$STATE"/slurmctld.log "$STATE"/slurmd*.log "$MUNGE/munged.log" "$SSHDIR/sshd.log" "$STATE"/nodes/*/sshfs.log; do
    [ -s "$f" ] || continue
    echo "---- last lines of $f" >&2
    tail -n 20 "$f" >&2
  done
}

# running PID: the process exists and is no zombie. A daemon that exited is
# a zombie until init reaps it, which some container inits do late; kill -0
# would count it as running.
running() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  case ${stat%% *} in Z | X) return 1 ;; esac
  return 0
}

alive() { # alive PIDFILE: the process it names runs
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] && running "$pid"
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
  if [ "$1" -gt 0 ]; then
    command -v ip >/dev/null || need+=(iproute2)
    command -v sshfs >/dev/null || need+=(sshfs)
    [ -x /usr/sbin/sshd ] || need+=(openssh-server)
  fi
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

# write_conf N: slurm.conf for N emulated nodes (0: localhost); returns 1
# when the file already said exactly that.
write_conf() {
  local n=$1 tmp=$CONF.tmp
  {
    echo "$MARK — rewritten by every \`up\`."
    echo "ClusterName=prism"
    if [ "$n" = 0 ]; then
      echo "SlurmctldHost=localhost"
      echo "SlurmdSpoolDir=$STATE/spool"
      echo "SlurmdPidFile=$STATE/slurmd.pid"
      echo "SlurmdLogFile=$STATE/slurmd.log"
    else
      # The head's own name (slurmctld checks it), reached at the bridge.
      echo "SlurmctldHost=$(hostname -s)($HEAD)"
      echo "SlurmctldPort=$PORT"
      # %n: every node's slurmd its own spool, pid file and log.
      echo "SlurmdSpoolDir=$STATE/spool/%n"
      echo "SlurmdPidFile=$STATE/slurmd-%n.pid"
      echo "SlurmdLogFile=$STATE/slurmd-%n.log"
      # A crashed node is marked down after 30 s, not Slurm's 300.
      echo "SlurmdTimeout=30"
    fi
    cat <<EOF
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE/munge.socket
StateSaveLocation=$STATE/ctld
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmctldLogFile=$STATE/slurmctld.log
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
# Nodes claim more CPUs than the machine has: tests oversubscribe.
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
KillWait=5
InactiveLimit=0
# sbatch --wait polls every 2 s only while MinJobAge is below 6 (else after 2,
# 8, then every 32 s): 5 s of job records are plenty for a test cluster.
MinJobAge=5
EOF
    if [ "$n" = 0 ]; then
      echo "NodeName=localhost NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN"
      echo "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE"
    else
      echo "NodeName=node[1-$n] NodeAddr=$NET.[2-$((n + 1))] CPUs=$CPUS State=UNKNOWN"
      echo "PartitionName=debug Nodes=node[1-$n] Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE"
    fi
  } >"$tmp"
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

unlink_etc_conf() {
  local etc=/etc/slurm/slurm.conf
  if [ -L "$etc" ] && [ "$(readlink "$etc")" = "$CONF" ]; then rm -f "$etc"; fi
}

munge_ok() { munge -S "$MUNGE/munge.socket" -n </dev/null 2>/dev/null | unmunge -S "$MUNGE/munge.socket" >/dev/null 2>&1; }

# start_munge: the cluster's own munged, as root, key and socket under
# $STATE/munge (munged wants the socket's directory searchable by all).
start_munge() {
  if alive "$MUNGE/munged.pid" && munge_ok; then return 0; fi
  install -d -m 0755 "$MUNGE"
  if [ ! -s "$MUNGE/munge.key" ]; then
    dd if=/dev/urandom of="$MUNGE/munge.key" bs=1024 count=1 status=none
  fi
  chmod 0400 "$MUNGE/munge.key"
  # A stale pid file or socket from a killed munged makes it refuse to start.
  alive "$MUNGE/munged.pid" || rm -f "$MUNGE/munged.pid"
  munged --force --socket="$MUNGE/munge.socket" --key-file="$MUNGE/munge.key" \
    --pid-file="$MUNGE/munged.pid" --log-file="$MUNGE/munged.log" --seed-file="$MUNGE/munged.seed" 9>&- ||
    { tail_logs; die "munged did not start"; }
  wait_for "$WAIT" "munged to answer (munge -n | unmunge)" munge_ok
}

# ---- emulated nodes

netns() { echo "$PREFIX-$1"; }
node_addr() { echo "$NET.$((${1#node} + 1))"; }

# in_node NODE CMD...: run CMD inside NODE's network, UTS and mount
# namespaces (nsenter --net, not `ip netns exec`, which remounts /sys and so
# hides the cgroup tree slurmd looks for).
in_node() {
  local n=$1
  shift
  nsenter --net="/run/netns/$(netns "$n")" --uts="$NSDIR/$n.uts" --mount="$NSDIR/$n.mnt" -- "$@"
}

is_nsfs() { [ "$(findmnt -rn -o FSTYPE --mountpoint "$1" 2>/dev/null)" = nsfs ]; }

# node_pids NODE: every process in NODE's network namespace.
node_pids() {
  local p
  [ -e "/run/netns/$(netns "$1")" ] || return 0
  for p in $(ip netns pids "$(netns "$1")" 2>/dev/null); do
    running "$p" && echo "$p"
  done
  return 0
}

# kill_node NODE SIGNAL: signal every process on NODE; wait up to 5 s for
# them to be gone.
kill_node() {
  local pids i
  pids=$(node_pids "$1")
  [ -n "$pids" ] || return 0
  # shellcheck disable=SC2086
  kill -s "$2" $pids 2>/dev/null || true
  for ((i = 0; i < 25; i++)); do
    [ -z "$(node_pids "$1")" ] && return 0
    sleep 0.2
  done
  return 1
}

# make_bridge: the bridge with the head's address, owned (alias) by $STATE.
make_bridge() {
  if ip link show "$BR" >/dev/null 2>&1; then
    [ "$(cat "/sys/class/net/$BR/ifalias" 2>/dev/null)" = "$OWNER" ] ||
      die "bridge $BR exists and is not this cluster's ($STATE): set PRISM_CLUSTER_PREFIX, or bring the other one down"
  else
    local used
    used=$(ip -o -4 addr show to "$NET.0/24" 2>/dev/null | awk '{print $2}' | sort -u | tr '\n' ' ')
    [ -z "$used" ] || die "network $NET.0/24 is in use here (on $used); choose another with PRISM_CLUSTER_NET"
    ip link add "$BR" type bridge
    ip link set "$BR" alias "$OWNER"
  fi
  # IPv4 only: no link-local IPv6 chatter, no second address family for
  # OpenMPI to try.
  sysctl -qw "net.ipv6.conf.$BR.disable_ipv6=1" 2>/dev/null || true
  ip addr replace "$HEAD/24" dev "$BR"
  ip link set "$BR" up
}

# write_hosts N: the hosts file every node sees as /etc/hosts. Written in
# place: the nodes' bind mounts hold its inode.
write_hosts() {
  local k
  {
    echo "$MARK: /etc/hosts of the emulated nodes"
    echo "127.0.0.1 localhost"
    echo "$HEAD $(hostname -s)"
    for ((k = 1; k <= $1; k++)); do echo "$NET.$((k + 1)) node$k"; done
  } >"$STATE/hosts.tmp"
  cmp -s "$STATE/hosts.tmp" "$STATE/hosts" || cat "$STATE/hosts.tmp" >"$STATE/hosts"
  rm -f "$STATE/hosts.tmp"
}

# owns_netns NAME: this state directory made the network namespace NAME
# ($STATE/netns lists them, each written before it is made), so `down`
# never removes another cluster's node of the same name.
owns_netns() { grep -qx "$1" "$STATE/netns" 2>/dev/null; }

# node_net NODE: its network namespace, veth pair and address.
node_net() {
  local n=$1 k=${1#node} ns veth
  ns=$(netns "$n")
  veth=$PREFIX-v$k
  if [ -e "/run/netns/$ns" ]; then
    owns_netns "$ns" || die "network namespace $ns exists and is not this cluster's ($STATE): set PRISM_CLUSTER_PREFIX, or bring the other one down"
  else
    owns_netns "$ns" || echo "$ns" >>"$STATE/netns"
    ip netns add "$ns"
  fi
  if ! ip link show "$veth" >/dev/null 2>&1; then
    ip -n "$ns" link del eth0 2>/dev/null || true
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" alias "$OWNER"
  fi
  [ "$(cat "/sys/class/net/$veth/ifalias" 2>/dev/null)" = "$OWNER" ] ||
    die "interface $veth exists and is not this cluster's ($STATE): set PRISM_CLUSTER_PREFIX, or bring the other one down"
  sysctl -qw "net.ipv6.conf.$veth.disable_ipv6=1" 2>/dev/null || true
  ip link set "$veth" master "$BR" up
  nsenter --net="/run/netns/$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2>/dev/null || true
  ip -n "$ns" addr replace "$(node_addr "$n")/24" dev eth0
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 up
}

# node_ns NODE: its UTS and mount namespaces, kept by nsfs bind mounts; in
# them the hostname, the node's own /tmp and the cluster's /etc/hosts.
node_ns() {
  local n=$1
  if is_nsfs "$NSDIR/$n.uts" && is_nsfs "$NSDIR/$n.mnt"; then return 0; fi
  umount "$NSDIR/$n.uts" 2>/dev/null || true
  umount "$NSDIR/$n.mnt" 2>/dev/null || true
  install -d -m 1777 "$STATE/nodes/$n/tmp"
  touch "$NSDIR/$n.uts" "$NSDIR/$n.mnt"
  unshare --uts="$NSDIR/$n.uts" --mount="$NSDIR/$n.mnt" --propagation private -- \
    sh -c 'hostname "$1" && mount --bind "$2" /tmp && mount --bind "$3" /etc/hosts' _ "$n" "$STATE/nodes/$n/tmp" "$STATE/hosts" ||
    die "$n: cannot set up its UTS and mount namespaces"
}

# make_nsdir: $STATE/ns as a mount of its own with private propagation,
# which nsfs bind mounts need (util-linux unshare(1), --mount=file).
make_nsdir() {
  mkdir -p "$NSDIR"
  if [ "$(findmnt -rn -o TARGET --mountpoint "$NSDIR" 2>/dev/null)" != "$NSDIR" ]; then
    mount --bind "$NSDIR" "$NSDIR"
  fi
  mount --make-private "$NSDIR"
}

# ssh_setup: keys, sshd_config and ssh_config of the file server, under
# $STATE/ssh. The client key may only run sftp.
ssh_setup() {
  install -d -m 0700 "$SSHDIR"
  [ -s "$SSHDIR/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C "prism cluster host key" -f "$SSHDIR/host_ed25519"
  [ -s "$SSHDIR/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C "prism cluster sshfs key" -f "$SSHDIR/id_ed25519"
  cp "$SSHDIR/id_ed25519.pub" "$SSHDIR/authorized_keys"
  echo "[$HEAD]:$SSHD_PORT $(cut -d' ' -f1,2 "$SSHDIR/host_ed25519.pub")" >"$SSHDIR/known_hosts"
  cat >"$SSHDIR/sshd_config" <<EOF
$MARK: the shared filesystem's server (sftp only, on the cluster bridge)
ListenAddress $HEAD:$SSHD_PORT
HostKey $SSHDIR/host_ed25519
PidFile $SSHDIR/sshd.pid
AuthorizedKeysFile $SSHDIR/authorized_keys
# The state directory may sit in /var/tmp (mode 1777), which StrictModes refuses.
StrictModes no
PermitRootLogin prohibit-password
AllowUsers root
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
X11Forwarding no
AllowTcpForwarding no
AllowAgentForwarding no
PermitTTY no
ForceCommand internal-sftp
Subsystem sftp internal-sftp
EOF
  cat >"$SSHDIR/ssh_config" <<EOF
$MARK: how the nodes reach the file server
Host *
  Port $SSHD_PORT
  User root
  IdentityFile $SSHDIR/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $SSHDIR/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
  ServerAliveInterval 5
  ServerAliveCountMax 3
EOF
}

sshd_ok() { alive "$SSHDIR/sshd.pid" && timeout 2 bash -c "exec 3<>/dev/tcp/$HEAD/$SSHD_PORT" 2>/dev/null; }

start_sshd() {
  if sshd_ok; then return 0; fi
  alive "$SSHDIR/sshd.pid" && stop "sshd:$SSHDIR/sshd.pid"
  mkdir -p /run/sshd # sshd's privilege separation directory
  /usr/sbin/sshd -f "$SSHDIR/sshd_config" -E "$SSHDIR/sshd.log" 9>&- || { tail_logs; die "sshd did not start"; }
  wait_for "$WAIT" "sshd on $HEAD:$SSHD_PORT" sshd_ok
}

# mount_ok NODE: the shared filesystem is mounted on NODE and answers with
# the check file the head wrote.
# Bounded: a hung FUSE daemon blocks whoever touches its mount.
mount_ok() {
  [ "$(timeout 5 nsenter --mount="$NSDIR/$1.mnt" findmnt -rn -o FSTYPE --mountpoint "$SHARED" 2>/dev/null)" = fuse.sshfs ] &&
    [ "$(timeout 5 nsenter --mount="$NSDIR/$1.mnt" cat "$SHARED/.prism-cluster" 2>/dev/null)" = "$OWNER" ]
}

# mount_shared NODE: sshfs of the head's $SHARED at the same path on NODE.
# sshfs forks into the background once the mount stands.
mount_shared() {
  local n=$1
  if mount_ok "$n"; then return 0; fi
  in_node "$n" umount -l "$SHARED" 2>/dev/null || true
  # attr/entry/dcache timeouts: NFS's acregmin (3 s); reconnect: an NFS
  # hard mount retries rather than failing the application.
  if ! timeout "$WAIT" nsenter --net="/run/netns/$(netns "$n")" --uts="$NSDIR/$n.uts" --mount="$NSDIR/$n.mnt" -- \
    sshfs -F "$SSHDIR/ssh_config" "$HEAD:$SHARED" "$SHARED" \
    -o allow_other,reconnect,dir_cache=yes,dcache_timeout=3,attr_timeout=3,entry_timeout=3 \
    >"$STATE/nodes/$n/sshfs.log" 2>&1 9>&-; then
    tail_logs
    die "$n: sshfs of $HEAD:$SHARED failed"
  fi
  wait_for "$WAIT" "$n to see $SHARED over sshfs" mount_ok "$n"
}

start_slurmd() {
  local n=$1
  alive "$STATE/slurmd-$n.pid" && return 0
  in_node "$n" slurmd -N "$n" -f "$CONF" 9>&- || { tail_logs; die "slurmd on $n did not start"; }
}

# write_agent: OpenMPI's plm_rsh_agent for this cluster. OpenMPI calls it
# as it would call ssh (agent HOST COMMAND...), so like sshd it gives the
# command a fresh login-like environment and a shell to parse it.
write_agent() {
  local names
  names=$(node_names "$1" | tr '\n' ' ')
  cat >"$AGENT.tmp" <<EOF
#!/bin/bash
$MARK: OpenMPI's rsh agent for the emulated
# cluster in $STATE. Usage, as ssh: agent [-options] NODE COMMAND...
while [[ \${1-} == -* ]]; do shift; done # ssh options (OpenMPI adds -x for ssh)
node=\${1-}
shift || true
case " $names" in
*" \$node "*) ;;
*)
  echo "agent: \$node: no such node in the cluster of $STATE (nodes: ${names% })" >&2
  exit 255
  ;;
esac
[ -e "$NSDIR/\$node.mnt" ] && [ -e /run/netns/$PREFIX-\$node ] || { echo "agent: \$node: not up (slurm/cluster.sh up)" >&2; exit 255; }
exec nsenter --net=/run/netns/$PREFIX-\$node --uts=$NSDIR/\$node.uts --mount=$NSDIR/\$node.mnt -- \\
  env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin HOME=/root USER=root LOGNAME=root SHELL=/bin/bash LANG=C.UTF-8 \\
  bash -c "cd ~ 2>/dev/null || cd /; \$*"
EOF
  chmod 0755 "$AGENT.tmp"
  mv "$AGENT.tmp" "$AGENT"
}

up_nodes() {
  local n=$1 node
  make_nsdir
  make_bridge
  write_hosts "$n"
  ssh_setup
  mkdir -p "$SHARED"
  echo "$OWNER" >"$SHARED/.prism-cluster"
  start_sshd
  for node in $(node_names "$n"); do
    mkdir -p "$STATE/spool/$node" "$STATE/nodes/$node"
    node_net "$node"
    node_ns "$node"
    mount_shared "$node"
  done
  write_agent "$n"
}

# nodes_idle N: sinfo shows the N nodes (or localhost) idle.
nodes_idle() {
  local want=$1 got
  got=$(sinfo -h -N -o '%N %T' 2>/dev/null | awk '$2 == "idle"' | sort -u | wc -l)
  [ "$got" -ge "$want" ]
}

# cluster_ok: every daemon runs and every node is idle. The pid files are
# checked first: sinfo against a stopped slurmctld retries for seconds.
cluster_ok() {
  local n node
  n=$(nodes)
  alive "$STATE/slurmctld.pid" || return 1
  if [ "$n" = 0 ]; then
    alive "$STATE/slurmd.pid" || return 1
  else
    for node in $(node_names "$n"); do alive "$STATE/slurmd-$node.pid" || return 1; done
  fi
  nodes_idle "$((n > 0 ? n : 1))"
}

up() {
  local n=$1 old
  [ "$(id -u)" = 0 ] || die "up needs root (it installs packages, starts daemons and, for --nodes, makes namespaces)"
  mkdir -p "$STATE/ctld" "$STATE/spool"
  chmod 0755 "$STATE"
  old=$(nodes)
  if [ -e "$STATE/mode" ] && [ "$old" != "$n" ]; then
    say "the cluster in $STATE has $( [ "$old" = 0 ] && echo "one node (localhost)" || echo "$old emulated nodes"); taking it down first"
    down
  fi
  echo "nodes=$n" >"$STATE/mode"
  install_packages "$n"
  local changed=0
  write_conf "$n" && changed=1
  link_etc_conf
  start_munge
  if [ "$n" -gt 0 ]; then up_nodes "$n"; fi
  if [ $changed = 1 ] && { alive "$STATE/slurmctld.pid" || [ -n "$(slurmd_pidfiles)" ]; }; then
    say "slurm.conf changed: restarting the daemons"
    stop_slurm
  fi
  if ! alive "$STATE/slurmctld.pid"; then
    # -i: ignore saved state, so a crashed earlier cluster leaves no jobs.
    slurmctld -i -f "$CONF" 9>&- || { tail_logs; die "slurmctld did not start"; }
  fi
  wait_for "$WAIT" "slurmctld to answer (scontrol ping)" bash -c 'scontrol ping | grep -q "is UP"'
  local node
  if [ "$n" = 0 ]; then
    if ! alive "$STATE/slurmd.pid"; then
      slurmd -N localhost -f "$CONF" 9>&- || { tail_logs; die "slurmd did not start"; }
    fi
  else
    for node in $(node_names "$n"); do start_slurmd "$node"; done
  fi
  wait_for "$WAIT" "every node to be idle (sinfo)" cluster_ok
  local tasks=$((n > 0 ? n : 1)) hosts
  if ! hosts=$(timeout "$WAIT" srun -N "$tasks" -n "$tasks" -t 1 hostname 2>"$STATE/srun-check.err"); then
    cat "$STATE/srun-check.err" >&2
    tail_logs
    die "srun -N $tasks hostname failed on the new cluster"
  fi
  if [ "$n" = 0 ]; then
    say "up: node localhost idle (SLURM_CONF=$CONF, logs in $STATE)"
    return 0
  fi
  # Each task ran in its own node's namespaces, under its own name.
  [ "$(sort <<<"$hosts" | tr '\n' ' ')" = "$(node_names "$n" | sort | tr '\n' ' ')" ] ||
    die "srun -N $n hostname answered $(tr '\n' ' ' <<<"$hosts"), want node1..node$n"
  say "up: node[1-$n] idle; shared filesystem $SHARED; OpenMPI agent $AGENT; logs in $STATE"
  say "  eval \"\$(slurm/cluster.sh env)\"   # SLURM_CONF, OMPI_MCA_plm_rsh_agent and the TCP interfaces"
  say "  mpirun --host node1:2,node2:2 -np 4 prism plan.toml   # or: srun -N 2 -n 4 --mpi=pmix prism plan.toml"
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

slurmd_pidfiles() {
  local f
  for f in "$STATE/slurmd.pid" "$STATE"/slurmd-*.pid; do
    [ -e "$f" ] && echo "slurmd:$f"
  done
  return 0
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
  # shellcheck disable=SC2046
  stop $(slurmd_pidfiles) "slurmctld:$STATE/slurmctld.pid"
  # A daemon whose pid file was overwritten (a restart racing its
  # predecessor's exit) is found by its command line, which names this
  # cluster's own slurm.conf and nothing else's.
  local p
  for p in $(pgrep -f -- "-f $CONF\$" 2>/dev/null); do
    say "pid $p ($(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null)) outlived its pid file; killing it"
    kill -9 "$p" 2>/dev/null || true
  done
}

# down_node NODE: unmount its share, stop whatever still runs on it, and
# remove its namespaces and veth pair. Each step tolerates its piece being
# gone already.
down_node() {
  local n=$1 ns
  ns=$(netns "$n")
  if [ -e "/run/netns/$ns" ] && ! owns_netns "$ns"; then
    say "$n: network namespace $ns is not this cluster's; left alone"
    return 0
  fi
  # Lazily: a plain umount of a FUSE mount can wait seconds for its busy
  # daemon, and the node goes anyway.
  if is_nsfs "$NSDIR/$n.mnt"; then
    nsenter --mount="$NSDIR/$n.mnt" umount -l "$SHARED" 2>/dev/null || true
  fi
  kill_node "$n" TERM || kill_node "$n" KILL || say "$n: processes left: $(node_pids "$n" | tr '\n' ' ')"
  umount "$NSDIR/$n.uts" 2>/dev/null || true
  umount "$NSDIR/$n.mnt" 2>/dev/null || true
  rm -f "$NSDIR/$n.uts" "$NSDIR/$n.mnt"
  [ -e "/run/netns/$ns" ] && ip netns del "$ns"
  # Deleting the namespace deleted the pair; a host end left alone by a
  # half-made node goes if it is ours.
  if [ "$(cat "/sys/class/net/$PREFIX-v${n#node}/ifalias" 2>/dev/null)" = "$OWNER" ]; then
    ip link del "$PREFIX-v${n#node}" 2>/dev/null || true
  fi
  rm -rf "${STATE:?}/nodes/$n"
}

down() {
  [ -d "$STATE" ] || return 0
  local n node
  n=$(nodes)
  stop_slurm
  if [ "$n" -gt 0 ]; then
    for node in $(node_names "$n"); do down_node "$node"; done
    if ip link show "$BR" >/dev/null 2>&1 && [ "$(cat "/sys/class/net/$BR/ifalias" 2>/dev/null)" = "$OWNER" ]; then
      ip link del "$BR"
    fi
    if alive "$SSHDIR/sshd.pid"; then
      # Its per-connection children go with their clients, which are gone;
      # any left are stopped with it.
      local kids
      kids=$(pgrep -P "$(cat "$SSHDIR/sshd.pid")" || true)
      stop "sshd:$SSHDIR/sshd.pid"
      # shellcheck disable=SC2086
      [ -z "$kids" ] || kill $kids 2>/dev/null || true
    fi
    if [ "$(findmnt -rn -o TARGET --mountpoint "$NSDIR" 2>/dev/null)" = "$NSDIR" ]; then umount "$NSDIR"; fi
    rm -f "$AGENT" "$STATE/netns"
  fi
  stop "munged:$MUNGE/munged.pid"
  if [ -e "$STATE/munged.ours" ]; then
    # Started by an earlier version of this script, which used the system's.
    stop munged:/run/munge/munged.pid
    rm -f "$STATE/munged.ours"
  fi
  unlink_etc_conf
  rm -f "$STATE/mode"
  say "down"
}

# env_vars: what a client needs, as `export NAME=VALUE` lines (no value
# holds a space or a quote).
env_vars() {
  local n
  n=$(nodes)
  echo "export SLURM_CONF=$CONF"
  echo "export PRISM_SLURM_DIR=$STATE"
  [ "$n" -gt 0 ] || return 0
  echo "export PRISM_CLUSTER_NODES=$(node_names "$n" | paste -sd,)"
  echo "export PRISM_CLUSTER_SHARED=$SHARED"
  echo "export PRISM_CLUSTER_AGENT=$AGENT"
  echo "export PRISM_CLUSTER_NET=$NET.0/24"
  # mpirun reads these from its environment and passes them on to the
  # orteds and ranks: the agent, and TCP only on the cluster's network.
  echo "export OMPI_MCA_plm_rsh_agent=$AGENT"
  echo "export OMPI_MCA_oob_tcp_if_include=$NET.0/24"
  echo "export OMPI_MCA_btl_tcp_if_include=$NET.0/24"
}

need_node() { # need_node NODE: NODE is one of the running cluster's
  local n
  n=$(nodes)
  [[ ${1-} =~ ^node[0-9]+$ ]] && [ "${1#node}" -ge 1 ] && [ "${1#node}" -le "$n" ] ||
    die "${1:-(none)}: not a node of the cluster in $STATE (nodes: $(node_names "$n" | paste -sd' '))"
  [ -e "/run/netns/$(netns "$1")" ] && owns_netns "$(netns "$1")" && is_nsfs "$NSDIR/$1.mnt" || die "$1 is not up (slurm/cluster.sh up --nodes $n)"
}

# One up or down at a time (two test runs on one machine).
lock() {
  mkdir -p "$STATE"
  exec 9>"$STATE/lock"
  flock -w 180 9 || die "another slurm/cluster.sh holds $STATE/lock"
}

usage() {
  echo "usage: slurm/cluster.sh up [--nodes N] | down | status | env | exec NODE CMD... | crash NODE | link NODE up|down" >&2
  exit 2
}

case "${1:-}" in
up)
  n=0
  case "${2:-}" in
  "") ;;
  --nodes) n=${3:-} ;;
  --nodes=*) n=${2#--nodes=} ;;
  *) usage ;;
  esac
  [[ $n =~ ^[0-9]+$ && $n -le 200 ]] && { [ -z "${2:-}" ] || [ "$n" -ge 1 ]; } || die "--nodes ${n}: a number of nodes from 1 to 200"
  lock && up "$n"
  ;;
down) [ -d "$STATE" ] || exit 0; lock && down ;;
status) cluster_ok ;;
env) [ -e "$STATE/mode" ] || die "no cluster in $STATE (slurm/cluster.sh up)"; env_vars ;;
exec)
  need_node "${2-}"
  node=$2
  shift 2
  [ $# -gt 0 ] || usage
  # Like ssh: the command runs in the caller's directory when the node has
  # it (mount namespaces start at /).
  in_node "$node" bash -c 'cd "$1" 2>/dev/null || cd /; shift; exec "$@"' _ "$PWD" "$@"
  ;;
crash)
  need_node "${2-}"
  kill_node "$2" KILL || die "$2: processes survived SIGKILL: $(node_pids "$2" | tr '\n' ' ')"
  rm -f "$STATE/slurmd-$2.pid"
  say "$2 crashed: every process on it killed (slurm/cluster.sh up brings it back)"
  ;;
link)
  need_node "${2-}"
  case "${3-}" in up | down) ;; *) usage ;; esac
  ip -n "$(netns "$2")" link set eth0 "$3"
  ;;
*) usage ;;
esac
