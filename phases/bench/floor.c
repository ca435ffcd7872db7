/*
 * floor: the syscall floor of prism's metadata phases.
 *
 *   floor <op> <dir> <count> <size> [nprocs]
 *
 * op is one of
 *   create  open(O_CREAT|O_EXCL|O_WRONLY|O_CLOEXEC), write size bytes, close
 *           (create_files)
 *   stat    open the directory, getdents64 all of it, then fstatat every
 *           entry (list_files; the files are created untimed first)
 *   rename  rename every file from src/ to dst/ (move_files)
 *   unlink  unlink every file (delete_files; created untimed first)
 *
 * Worker w (0 <= w < nprocs, default 1) works in <dir>/r<w>/files (or
 * <dir>/r<w>/src and dst for rename) on files named f<w>.<i>, the layout of
 * prism's per-rank directories; every path is an absolute, precomputed
 * string used relative to AT_FDCWD, as prism's are. Workers are forked,
 * prepare untimed, wait at a pipe barrier, run the timed loop, report their
 * start and end (CLOCK_MONOTONIC), wait until every worker has finished
 * (so no teardown disturbs a running peer), then remove their files and
 * leave the directories for the next run, as prism does between
 * iterations. Like `prism run -n`'s ranks, worker w is bound to the w-th of
 * nprocs disjoint blocks of the CPUs floor may use (the first blocks one CPU
 * larger when they do not divide evenly), unless there are fewer CPUs than
 * workers. The result is aggregate: total ops / (last end - first start),
 * which is how prism computes an iteration's wall time.
 *
 * Output, one line on stdout:
 *   op=create nprocs=2 count=20000 size=4096 ops=40000 seconds=0.5 ops_per_sec=80000 cpu_ns_per_op=24000
 * cpu_ns_per_op is the workers' user + system time (getrusage) in their
 * timed loops over the ops: less disturbed than the rate when the machine
 * is shared, since waiting for a CPU is not counted. With FLOOR_VERBOSE set
 * in the environment, each worker's start offset and busy time go to stderr.
 *
 * Build: gcc -O2 -o floor floor.c
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <sched.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum op { OP_CREATE, OP_STAT, OP_RENAME, OP_UNLINK };

struct result {
	int64_t start_ns, end_ns;
	int64_t ops;
	int64_t cpu_ns; /* user + system time of the timed loop */
};

static const char *prog = "floor";

static void die(const char *what, const char *path)
{
	fprintf(stderr, "%s: %s %s: %s\n", prog, what, path ? path : "", strerror(errno));
	exit(1);
}

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t cpu_ns(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000 +
	       ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
}

static void mkdir_p(const char *path)
{
	char buf[PATH_MAX];
	size_t n = strlen(path);
	if (n >= sizeof buf) {
		errno = ENAMETOOLONG;
		die("mkdir", path);
	}
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, 0755) != 0 && errno != EEXIST)
			die("mkdir", buf);
		*p = '/';
	}
	if (mkdir(buf, 0755) != 0 && errno != EEXIST)
		die("mkdir", buf);
}

static char **make_paths(const char *dir, int w, long count)
{
	char **paths = malloc(count * sizeof *paths);
	if (!paths)
		die("malloc", NULL);
	for (long i = 0; i < count; i++)
		if (asprintf(&paths[i], "%s/f%d.%ld", dir, w, i) < 0)
			die("asprintf", NULL);
	return paths;
}

static int write_all(int fd, const char *buf, size_t size)
{
	size_t done = 0;
	while (done < size) {
		ssize_t n = write(fd, buf + done, size - done);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (n == 0) {
			errno = EIO;
			return -1;
		}
		done += n;
	}
	return 0;
}

/* create_one is prism's createOne: the create op. */
static int create_one(const char *path, const char *buf, size_t size)
{
	int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	int rc = size ? write_all(fd, buf, size) : 0;
	int saved = errno;
	if (close(fd) != 0 && rc == 0)
		return -1;
	errno = saved;
	return rc;
}

static void read_exact(int fd, void *p, size_t n)
{
	char *b = p;
	while (n > 0) {
		ssize_t r = read(fd, b, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r == 0)
				errno = EPIPE;
			die("read pipe", NULL);
		}
		b += r;
		n -= r;
	}
}

/* wait_closed blocks until every writer of fd's pipe has closed it. */
static void wait_closed(int fd)
{
	char c;
	ssize_t r;
	while ((r = read(fd, &c, 1)) < 0 && errno == EINTR)
		;
	if (r < 0)
		die("read barrier", NULL);
}

/* bind_block binds the calling process to block w of nprocs disjoint,
 * consecutive blocks of the CPUs in allowed, as spmd.CPUBlocks does. */
static void bind_block(const cpu_set_t *allowed, int w, int nprocs)
{
	int cpus[CPU_SETSIZE], n = 0;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, allowed))
			cpus[n++] = c;
	if (n < nprocs)
		return;
	int k = n / nprocs, extra = n % nprocs;
	int at = w * k + (w < extra ? w : extra), size = k + (w < extra);
	cpu_set_t set;
	CPU_ZERO(&set);
	for (int i = at; i < at + size; i++)
		CPU_SET(cpus[i], &set);
	if (sched_setaffinity(0, sizeof set, &set) != 0)
		die("sched_setaffinity", NULL);
}

static void worker(enum op op, const char *dir, int w, long count, size_t size,
		   int ready_w, int go_r, int res_w, int done_r)
{
	char base[PATH_MAX], src[PATH_MAX], dst[PATH_MAX];
	if ((size_t)snprintf(base, sizeof base, "%s/r%d", dir, w) >= sizeof base ||
	    (size_t)snprintf(src, sizeof src, "%s/%s", base, op == OP_RENAME ? "src" : "files") >= sizeof src ||
	    (size_t)snprintf(dst, sizeof dst, "%s/dst", base) >= sizeof dst) {
		errno = ENAMETOOLONG;
		die("path", dir);
	}
	mkdir_p(src);
	if (op == OP_RENAME)
		mkdir_p(dst);

	/* Untimed preparation: paths, data buffer, files for stat/rename/unlink. */
	char **paths = make_paths(src, w, count);
	char **dpaths = op == OP_RENAME ? make_paths(dst, w, count) : NULL;
	char *buf = malloc(size ? size : 1);
	if (!buf)
		die("malloc", NULL);
	for (size_t i = 0; i < size; i++)
		buf[i] = (char)(i * 131 + 7);
	if (op != OP_CREATE)
		for (long i = 0; i < count; i++)
			if (create_one(paths[i], buf, size) != 0)
				die("setup: create", paths[i]);
	size_t scratch_len = 64 << 10, raw_cap = 0, raw_len = 0;
	char *scratch = malloc(scratch_len), *raw = NULL;
	if (!scratch)
		die("malloc", NULL);
	struct stat st;

	/* Barrier: say we are ready, wait for the parent to release everyone. */
	char c = 'r';
	if (write(ready_w, &c, 1) != 1)
		die("write barrier", NULL);
	close(ready_w);
	wait_closed(go_r);

	struct result res = { .ops = 0 };
	res.cpu_ns = cpu_ns();
	res.start_ns = now_ns();
	switch (op) {
	case OP_CREATE:
		for (long i = 0; i < count; i++) {
			if (create_one(paths[i], buf, size) != 0)
				die("create", paths[i]);
		}
		res.ops = count;
		break;
	case OP_STAT: {
		int dfd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd < 0)
			die("open", src);
		for (;;) {
			long n = syscall(SYS_getdents64, dfd, scratch, scratch_len);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				die("getdents64", src);
			if (n == 0)
				break;
			if (raw_len + n > raw_cap) {
				raw_cap = 2 * (raw_len + n);
				raw = realloc(raw, raw_cap);
				if (!raw)
					die("realloc", NULL);
			}
			memcpy(raw + raw_len, scratch, n);
			raw_len += n;
		}
		for (size_t off = 0; off < raw_len;) {
			struct dirent64 *d = (struct dirent64 *)(raw + off);
			off += d->d_reclen;
			const char *name = d->d_name;
			if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0)))
				continue;
			if (fstatat(dfd, name, &st, 0) != 0)
				die("fstatat", name);
			res.ops++;
		}
		close(dfd);
		break;
	}
	case OP_RENAME:
		for (long i = 0; i < count; i++)
			if (rename(paths[i], dpaths[i]) != 0)
				die("rename", paths[i]);
		res.ops = count;
		break;
	case OP_UNLINK:
		for (long i = 0; i < count; i++)
			if (unlink(paths[i]) != 0)
				die("unlink", paths[i]);
		res.ops = count;
		break;
	}
	res.end_ns = now_ns();
	res.cpu_ns = cpu_ns() - res.cpu_ns;
	if (write(res_w, &res, sizeof res) != sizeof res)
		die("write result", NULL);
	close(res_w);

	/* Teardown only once every worker has stopped its clock. */
	wait_closed(done_r);
	char **gone = op == OP_RENAME ? dpaths : paths;
	for (long i = 0; i < count; i++)
		if (op != OP_UNLINK && unlink(gone[i]) != 0 && errno != ENOENT)
			die("teardown: unlink", gone[i]);
	exit(0);
}

static int pipe_or_die(int fds[2])
{
	if (pipe2(fds, O_CLOEXEC) != 0)
		die("pipe", NULL);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 5 || argc > 6) {
		fprintf(stderr, "usage: %s <create|stat|rename|unlink> <dir> <count> <size> [nprocs]\n", prog);
		return 2;
	}
	enum op op;
	if (!strcmp(argv[1], "create"))
		op = OP_CREATE;
	else if (!strcmp(argv[1], "stat"))
		op = OP_STAT;
	else if (!strcmp(argv[1], "rename"))
		op = OP_RENAME;
	else if (!strcmp(argv[1], "unlink"))
		op = OP_UNLINK;
	else {
		fprintf(stderr, "%s: unknown op %s\n", prog, argv[1]);
		return 2;
	}
	char dir[PATH_MAX];
	if (!realpath(argv[2], dir))
		die("realpath", argv[2]);
	long count = strtol(argv[3], NULL, 10);
	long size = strtol(argv[4], NULL, 10);
	long nprocs = argc > 5 ? strtol(argv[5], NULL, 10) : 1;
	if (count < 1 || size < 0 || nprocs < 1 || nprocs > 4096) {
		fprintf(stderr, "%s: bad count, size or nprocs\n", prog);
		return 2;
	}

	int ready[2], go[2], res[2], done[2];
	pipe_or_die(ready);
	pipe_or_die(go);
	pipe_or_die(res);
	pipe_or_die(done);
	cpu_set_t allowed;
	if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
		die("sched_getaffinity", NULL);
	pid_t *pids = calloc(nprocs, sizeof *pids);
	for (int w = 0; w < nprocs; w++) {
		pid_t pid = fork();
		if (pid < 0)
			die("fork", NULL);
		if (pid == 0) {
			bind_block(&allowed, w, (int)nprocs);
			close(ready[0]);
			close(go[1]);
			close(res[0]);
			close(done[1]);
			worker(op, dir, w, count, (size_t)size, ready[1], go[0], res[1], done[0]);
		}
		pids[w] = pid;
	}
	close(ready[1]);
	close(go[0]);
	close(res[1]);
	close(done[0]);

	/* Every worker is prepared: release them all at once. */
	for (int w = 0; w < nprocs; w++) {
		char c;
		read_exact(ready[0], &c, 1);
	}
	close(go[1]);

	int64_t first = INT64_MAX, last = INT64_MIN, ops = 0, cpu = 0;
	struct result *all = calloc(nprocs, sizeof *all);
	if (!all)
		die("calloc", NULL);
	for (int w = 0; w < nprocs; w++) {
		struct result r;
		read_exact(res[0], &r, sizeof r);
		all[w] = r;
		if (r.start_ns < first)
			first = r.start_ns;
		if (r.end_ns > last)
			last = r.end_ns;
		ops += r.ops;
		cpu += r.cpu_ns;
	}
	close(done[1]);

	int failed = 0;
	for (int w = 0; w < nprocs; w++) {
		int status;
		while (waitpid(pids[w], &status, 0) < 0)
			if (errno != EINTR)
				die("waitpid", NULL);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed = 1;
	}
	if (failed) {
		fprintf(stderr, "%s: a worker failed\n", prog);
		return 1;
	}
	double secs = (last - first) / 1e9;
	if (getenv("FLOOR_VERBOSE"))
		for (int w = 0; w < nprocs; w++) /* in order of finishing */
			fprintf(stderr, "%s: worker start +%.3f ms, busy %.3f ms, %lld ops\n", prog,
				(all[w].start_ns - first) / 1e6, (all[w].end_ns - all[w].start_ns) / 1e6,
				(long long)all[w].ops);
	printf("op=%s nprocs=%ld count=%ld size=%ld ops=%lld seconds=%.6f ops_per_sec=%.1f cpu_ns_per_op=%.0f\n",
	       argv[1], nprocs, count, size, (long long)ops, secs, secs > 0 ? ops / secs : 0.0,
	       ops > 0 ? (double)cpu / ops : 0.0);
	return 0;
}
