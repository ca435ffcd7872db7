# Sourced by the bench scripts: bench_scratch TOOL NAME SIZE makes the
# directory the files under test live in, and removes it at exit.
#
# It sets work (a private temporary directory for plans, binaries and
# manifests), scratch (the directory under test) and, with BENCH_FS=xfs
# (the default as root where mkfs.xfs exists), mnt and img: a fresh XFS of
# SIZE on a sparse file in BENCH_DIR, loop-mounted, so every tool starts on
# the same empty filesystem whatever BENCH_DIR's own filesystem has been
# through (ext4 keeps freed inodes out of reuse for minutes). BENCH_FS=dir
# uses BENCH_DIR's filesystem itself. tmpfs and ramfs are refused: there is
# no storage under test there. TOOL names the script in errors.
#
# bench_renew replaces scratch (and its XFS) with a fresh one of the same
# kind, keeping work: for benches that want an empty filesystem per round.
work=""
scratch=""
mnt=""
img=""
bench_args=()
bench_drop_fs() {
	[[ -n $scratch ]] && rm -rf -- "$scratch"
	[[ -n $mnt ]] && { umount -- "$mnt" || umount -l -- "$mnt"; } 2>/dev/null
	[[ -n $img ]] && rm -f -- "$img"
	scratch="" mnt="" img=""
	return 0
}

bench_cleanup() {
	bench_drop_fs
	[[ -n $work ]] && rm -rf -- "$work"
	return 0
}

bench_scratch() {
	bench_args=("$@")
	trap bench_cleanup EXIT
	trap 'exit 130' INT TERM
	work=$(mktemp -d "${TMPDIR:-/tmp}/$2-tools.XXXXXX")
	bench_new_fs "$@"
}

bench_renew() {
	bench_drop_fs
	bench_new_fs "${bench_args[@]}"
}

bench_new_fs() {
	local tool=$1 name=$2 size=$3 fstype
	if [[ -z ${BENCH_FS:-} ]]; then
		BENCH_FS=dir
		[[ $(id -u) == 0 ]] && command -v mkfs.xfs >/dev/null && BENCH_FS=xfs
	fi
	case $BENCH_FS in
	xfs)
		[[ $(id -u) == 0 ]] || { echo "$tool: BENCH_FS=xfs needs root (loop mount); use BENCH_FS=dir" >&2; exit 1; }
		command -v mkfs.xfs >/dev/null || { echo "$tool: mkfs.xfs not found (apt-get install xfsprogs)" >&2; exit 1; }
		img=$(mktemp "$BENCH_DIR/$name.XXXXXX.xfs")
		truncate -s "$size" "$img"
		mkfs.xfs -q -f "$img"
		mnt="$work/mnt"
		mkdir -p "$mnt"
		mount -o loop -- "$img" "$mnt" || { mnt=""; echo "$tool: cannot loop-mount $img; use BENCH_FS=dir" >&2; exit 1; }
		scratch=$(mktemp -d "$mnt/$name.XXXXXX")
		;;
	dir) scratch=$(mktemp -d "$BENCH_DIR/$name.XXXXXX") ;;
	*)
		echo "$tool: BENCH_FS=$BENCH_FS: want xfs or dir" >&2
		exit 1
		;;
	esac
	fstype=$(stat -f -c %T "$scratch")
	case $fstype in
	tmpfs | ramfs)
		echo "$tool: $scratch is on $fstype; point BENCH_DIR at a disk filesystem" >&2
		exit 1
		;;
	esac
}
