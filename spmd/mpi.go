//go:build mpi

package spmd

// This file is the package's only cgo code: a thin binding over the system
// MPI library (OpenMPI 4.1 is what prism is tested with).
//
// MPI handles (MPI_COMM_WORLD, MPI_INT64_T, MPI_SUM, ...) are macros, and in
// OpenMPI they are pointers to library globals, which cgo cannot name. So the
// preamble below wraps every MPI function prism uses in a small C function
// that takes plain ints: communicators travel as their Fortran handles
// (MPI_Comm_c2f / MPI_Comm_f2c, standard and portable across
// implementations), datatypes and operators as the PRISM_* codes below.
// Each wrapper makes exactly one MPI call, so the Go side knows which call
// failed and can name it in the MPIError.
//
// Build flags come from pkg-config (ompi-c) by default, so a plain
// `CGO_ENABLED=1 go build -tags mpi` works on Debian/Ubuntu OpenMPI. With
// another MPI, build with CC=mpicc and add the "mpicc" tag to skip
// pkg-config and take the flags from the compiler wrapper alone.

/*
#cgo !mpicc pkg-config: ompi-c
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>
#include <mpi.h>

enum { PRISM_INT64 = 0, PRISM_DOUBLE = 1, PRISM_BYTE = 2 };
enum { PRISM_SUM = 0, PRISM_MIN = 1, PRISM_MAX = 2 };
enum {
	PRISM_MAX_ERROR_STRING = MPI_MAX_ERROR_STRING,
	PRISM_MAX_PROCESSOR_NAME = MPI_MAX_PROCESSOR_NAME,
	PRISM_MAX_LIBRARY_VERSION_STRING = MPI_MAX_LIBRARY_VERSION_STRING,
	PRISM_UNDEFINED = MPI_UNDEFINED,
	PRISM_THREAD_SINGLE = MPI_THREAD_SINGLE,
	PRISM_THREAD_FUNNELED = MPI_THREAD_FUNNELED,
	PRISM_THREAD_SERIALIZED = MPI_THREAD_SERIALIZED,
	PRISM_THREAD_MULTIPLE = MPI_THREAD_MULTIPLE,
	PRISM_SUCCESS = MPI_SUCCESS,
};

static MPI_Comm prism_comm(int h) { return MPI_Comm_f2c((MPI_Fint)h); }

static MPI_Datatype prism_dt(int d) {
	switch (d) {
	case PRISM_INT64: return MPI_INT64_T;
	case PRISM_DOUBLE: return MPI_DOUBLE;
	default: return MPI_BYTE;
	}
}

static MPI_Op prism_op(int o) {
	switch (o) {
	case PRISM_MIN: return MPI_MIN;
	case PRISM_MAX: return MPI_MAX;
	default: return MPI_SUM;
	}
}

static int prism_initialized(int *flag) { return MPI_Initialized(flag); }
static int prism_finalized(int *flag) { return MPI_Finalized(flag); }
static int prism_init_thread(int *provided) {
	return MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, provided);
}
static int prism_query_thread(int *provided) { return MPI_Query_thread(provided); }
static int prism_finalize(void) { return MPI_Finalize(); }
static void prism_abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }
static double prism_wtime(void) { return MPI_Wtime(); }

static int prism_library_version(char *buf, int *len) { return MPI_Get_library_version(buf, len); }
static int prism_processor_name(char *buf, int *len) { return MPI_Get_processor_name(buf, len); }
static int prism_error_class(int code, int *cls) { return MPI_Error_class(code, cls); }
static int prism_error_string(int code, char *buf, int *len) { return MPI_Error_string(code, buf, len); }

static int prism_world(void) { return (int)MPI_Comm_c2f(MPI_COMM_WORLD); }
static int prism_set_errors_return(int h) {
	return MPI_Comm_set_errhandler(prism_comm(h), MPI_ERRORS_RETURN);
}
static int prism_comm_rank(int h, int *rank) { return MPI_Comm_rank(prism_comm(h), rank); }
static int prism_comm_size(int h, int *size) { return MPI_Comm_size(prism_comm(h), size); }
static int prism_comm_free(int h) {
	MPI_Comm c = prism_comm(h);
	return MPI_Comm_free(&c);
}
// prism_comm_split reports MPI_COMM_NULL through *isnull rather than a
// sentinel handle: Fortran handles may be any int.
static int prism_comm_split(int h, int color, int key, int *out, int *isnull) {
	MPI_Comm c;
	int rc = MPI_Comm_split(prism_comm(h), color, key, &c);
	*isnull = rc != MPI_SUCCESS || c == MPI_COMM_NULL;
	if (!*isnull) *out = (int)MPI_Comm_c2f(c);
	return rc;
}
// Collectives are non-blocking (MPI 3), so that a rank that never joins
// one cannot hold the others forever: the Go side starts one with a
// prism_i* call and polls its request (prism_test_for) until it completes
// or the communicator's timeout passes. The buffers of a pending
// collective are Go memory pinned with runtime.Pinner, which is what lets
// MPI keep pointers to them after the call that started it returned.
static int prism_ibarrier(int h, MPI_Request *r) { return MPI_Ibarrier(prism_comm(h), r); }
static int prism_iallreduce(int h, void *buf, int n, int dt, int op, MPI_Request *r) {
	return MPI_Iallreduce(MPI_IN_PLACE, buf, n, prism_dt(dt), prism_op(op), prism_comm(h), r);
}
static int prism_ireduce(int h, void *buf, int n, int dt, int op, int root, int isroot, MPI_Request *r) {
	if (isroot)
		return MPI_Ireduce(MPI_IN_PLACE, buf, n, prism_dt(dt), prism_op(op), root, prism_comm(h), r);
	return MPI_Ireduce(buf, NULL, n, prism_dt(dt), prism_op(op), root, prism_comm(h), r);
}
static int prism_ibcast(int h, void *buf, int n, int dt, int root, MPI_Request *r) {
	return MPI_Ibcast(buf, n, prism_dt(dt), root, prism_comm(h), r);
}
static int prism_igather(int h, void *sbuf, int n, int dt, void *rbuf, int root, MPI_Request *r) {
	return MPI_Igather(sbuf, n, prism_dt(dt), rbuf, n, prism_dt(dt), root, prism_comm(h), r);
}
static int prism_igatherv(int h, void *sbuf, int n, void *rbuf, int *counts, int *displs, int root, MPI_Request *r) {
	return MPI_Igatherv(sbuf, n, MPI_BYTE, rbuf, counts, displs, MPI_BYTE, root, prism_comm(h), r);
}
static int prism_iallgather(int h, void *sbuf, int n, int dt, void *rbuf, MPI_Request *r) {
	return MPI_Iallgather(sbuf, n, prism_dt(dt), rbuf, n, prism_dt(dt), prism_comm(h), r);
}
static int prism_iallgatherv(int h, void *sbuf, int n, void *rbuf, int *counts, int *displs, MPI_Request *r) {
	return MPI_Iallgatherv(sbuf, n, MPI_BYTE, rbuf, counts, displs, MPI_BYTE, prism_comm(h), r);
}
// prism_comm_idup starts MPI_Comm_idup; *out is written when r completes,
// so it must stay valid (pinned) until then. prism_c2f gives its handle.
static int prism_comm_idup(int h, MPI_Comm *out, MPI_Request *r) { return MPI_Comm_idup(prism_comm(h), out, r); }
static int prism_c2f(MPI_Comm c) { return (int)MPI_Comm_c2f(c); }

// prism_test_for tests r until it completes (*flag set) or seconds have
// passed. One cgo call for the whole spin: MPI_Test costs about a
// microsecond, a cgo transition a tenth of that, but a spin of thousands
// of transitions would also keep the Go scheduler busy.
static int prism_test_for(MPI_Request *r, double seconds, int *flag) {
	double end = MPI_Wtime() + seconds;
	for (;;) {
		int rc = MPI_Test(r, flag, MPI_STATUS_IGNORE);
		if (rc != MPI_SUCCESS || *flag || MPI_Wtime() >= end) return rc;
	}
}

// prism_poll is the backoff of a wait: it tests r, then sleeps *delay_us
// microseconds (doubling up to max_us, carried across calls in *delay_us)
// between tests, until r completes or seconds have passed. Sleeping here
// rather than in Go keeps a waiting rank off the Go scheduler, whose
// wakeups would cost more than the tests.
static int prism_poll(MPI_Request *r, double seconds, int *delay_us, int max_us, int *flag) {
	double end = MPI_Wtime() + seconds;
	for (;;) {
		int rc = MPI_Test(r, flag, MPI_STATUS_IGNORE);
		if (rc != MPI_SUCCESS || *flag || MPI_Wtime() >= end) return rc;
		struct timespec ts = { .tv_sec = *delay_us / 1000000, .tv_nsec = (long)(*delay_us % 1000000) * 1000 };
		nanosleep(&ts, NULL);
		*delay_us = *delay_us * 2 > max_us ? max_us : *delay_us * 2;
	}
}

// prism_world_ranks writes the MPI_COMM_WORLD rank of each of h's n ranks
// to out (a local call: groups are translated, nothing is sent).
static int prism_world_ranks(int h, int n, int *out) {
	MPI_Group g, wg;
	int rc = MPI_Comm_group(prism_comm(h), &g);
	if (rc != MPI_SUCCESS) return rc;
	rc = MPI_Comm_group(MPI_COMM_WORLD, &wg);
	if (rc != MPI_SUCCESS) {
		MPI_Group_free(&g);
		return rc;
	}
	int *in = malloc((size_t)n * sizeof(int));
	if (!in) {
		rc = MPI_ERR_NO_MEM;
	} else {
		for (int i = 0; i < n; i++) in[i] = i;
		rc = MPI_Group_translate_ranks(g, n, in, wg, out);
		free(in);
	}
	MPI_Group_free(&g);
	MPI_Group_free(&wg);
	return rc;
}

// Alerts (see alert.go's Alerter) travel on a private duplicate of each
// communicator, so they can never match collective traffic, as two int64:
// the hash of the tag and the sender's world rank. Probes (see doc.go)
// travel on a private duplicate of MPI_COMM_WORLD: a ping is (probe id,
// communicator id, sender's world rank), its pong (probe id, collectives
// entered or -1, the one in progress, the responder's world rank). Buffers
// MPI keeps using after a nonblocking call returns live in C memory (cgo
// forbids C from keeping Go pointers it was not given pinned).
enum {
	PRISM_ALERT_TAG = 0x5052, PRISM_ALERT_WORDS = 2,
	PRISM_PING_TAG = 0x5053, PRISM_PING_WORDS = 3,
	PRISM_PONG_TAG = 0x5054, PRISM_PONG_WORDS = 4,
	PRISM_REPORT_TAG = 0x5055, PRISM_REPORT_WORDS = 8,
	PRISM_WORDS = 8, // the longest message
};

// prism_arecv is one posted receive of an alert or a ping.
typedef struct {
	MPI_Request req;
	int64_t msg[PRISM_WORDS];
} prism_arecv;

static prism_arecv *prism_arecv_new(void) {
	prism_arecv *r = calloc(1, sizeof *r);
	if (r) r->req = MPI_REQUEST_NULL;
	return r;
}
static void prism_arecv_free(prism_arecv *r) { free(r); }
static int prism_arecv_post(int h, prism_arecv *r, int tag) {
	return MPI_Irecv(r->msg, PRISM_WORDS, MPI_INT64_T, MPI_ANY_SOURCE, tag, prism_comm(h), &r->req);
}
static int prism_arecv_pending(prism_arecv *r) { return r->req != MPI_REQUEST_NULL; }
// prism_arecv_test sets *flag when a message arrived (the request is then
// complete and MPI_REQUEST_NULL).
static int prism_arecv_test(prism_arecv *r, int *flag) {
	return MPI_Test(&r->req, flag, MPI_STATUS_IGNORE);
}
// prism_cancel withdraws a pending receive and waits until MPI is done with
// it; *received says that a message matched it before the cancel did.
static int prism_cancel(MPI_Request *r, int *received) {
	*received = 0;
	if (*r == MPI_REQUEST_NULL) return MPI_SUCCESS;
	int rc = MPI_Cancel(r);
	if (rc != MPI_SUCCESS) return rc;
	MPI_Status st;
	rc = MPI_Wait(r, &st);
	if (rc != MPI_SUCCESS) return rc;
	int cancelled = 0;
	rc = MPI_Test_cancelled(&st, &cancelled);
	*received = rc == MPI_SUCCESS && !cancelled;
	return rc;
}
static int prism_arecv_cancel(prism_arecv *r, int *received) { return prism_cancel(&r->req, received); }

// prism_asend is one message sent to one or more ranks: the message and
// the requests of its sends, kept until they complete.
typedef struct {
	int n;
	int64_t msg[PRISM_WORDS];
	MPI_Request reqs[];
} prism_asend;

static prism_asend *prism_asend_new(int n) {
	prism_asend *s = malloc(sizeof *s + (size_t)n * sizeof(MPI_Request));
	if (s) s->n = 0;
	return s;
}

// prism_alert_send starts an MPI_Isend of (hash, world) to every rank of h
// but rank; it never blocks. *out is NULL only if malloc failed.
static int prism_alert_send(int h, int64_t hash, int64_t world, int rank, int size, prism_asend **out) {
	prism_asend *s = prism_asend_new(size);
	*out = s;
	if (!s) return MPI_ERR_NO_MEM;
	s->msg[0] = hash;
	s->msg[1] = world;
	MPI_Comm c = prism_comm(h);
	int rc = MPI_SUCCESS;
	// Starting after this rank spreads simultaneous alerters over the
	// receivers instead of all hitting rank 0 first.
	for (int i = 1; i < size; i++) {
		int e = MPI_Isend(s->msg, PRISM_ALERT_WORDS, MPI_INT64_T, (rank + i) % size, PRISM_ALERT_TAG, c, &s->reqs[s->n]);
		if (e == MPI_SUCCESS)
			s->n++;
		else if (rc == MPI_SUCCESS)
			rc = e;
	}
	return rc;
}
// prism_report_send starts the MPI_Isend of a report (Reporter) to rank 0
// of h: the tag's hash, the sender's rank in h and six numbers
// (ReportWords).
static int prism_report_send(int h, int64_t hash, int64_t rank, int64_t a, int64_t b, int64_t c, int64_t d, int64_t e, int64_t f, prism_asend **out) {
	prism_asend *s = prism_asend_new(1);
	*out = s;
	if (!s) return MPI_ERR_NO_MEM;
	s->msg[0] = hash;
	s->msg[1] = rank;
	s->msg[2] = a;
	s->msg[3] = b;
	s->msg[4] = c;
	s->msg[5] = d;
	s->msg[6] = e;
	s->msg[7] = f;
	int rc = MPI_Isend(s->msg, PRISM_REPORT_WORDS, MPI_INT64_T, 0, PRISM_REPORT_TAG, prism_comm(h), &s->reqs[0]);
	if (rc == MPI_SUCCESS) s->n = 1;
	return rc;
}
// prism_pong_send starts the MPI_Isend of a pong to world rank to.
static int prism_pong_send(int h, int to, int64_t id, int64_t entered, int64_t inside, int64_t self, prism_asend **out) {
	prism_asend *s = prism_asend_new(1);
	*out = s;
	if (!s) return MPI_ERR_NO_MEM;
	s->msg[0] = id;
	s->msg[1] = entered;
	s->msg[2] = inside;
	s->msg[3] = self;
	int rc = MPI_Isend(s->msg, PRISM_PONG_WORDS, MPI_INT64_T, to, PRISM_PONG_TAG, prism_comm(h), &s->reqs[0]);
	if (rc == MPI_SUCCESS) s->n = 1;
	return rc;
}
static int prism_asend_test(prism_asend *s, int *done) {
	return MPI_Testall(s->n, s->reqs, done, MPI_STATUSES_IGNORE);
}
static void prism_asend_free(prism_asend *s) { free(s); }
// prism_asend_abandon hands the sends still pending over to MPI
// (MPI_Request_free); s must not be freed afterwards, since MPI may still
// read its message.
static void prism_asend_abandon(prism_asend *s) {
	for (int i = 0; i < s->n; i++)
		if (s->reqs[i] != MPI_REQUEST_NULL) MPI_Request_free(&s->reqs[i]);
}

// prism_drain receives every message of tag (MPI_ANY_TAG for all) that has
// arrived on h and not been received, so none is left pending when h is
// freed; *n counts them.
static int prism_drain(int h, int tag, int *n) {
	MPI_Comm c = prism_comm(h);
	*n = 0;
	for (;;) {
		int flag = 0;
		MPI_Status st;
		int rc = MPI_Iprobe(MPI_ANY_SOURCE, tag, c, &flag, &st);
		if (rc != MPI_SUCCESS || !flag) return rc;
		int64_t msg[PRISM_WORDS];
		rc = MPI_Recv(msg, PRISM_WORDS, MPI_INT64_T, st.MPI_SOURCE, st.MPI_TAG, c, MPI_STATUS_IGNORE);
		if (rc != MPI_SUCCESS) return rc;
		(*n)++;
	}
}
// prism_alert_drain drains the alert communicator: alerts, and reports
// rank 0 did not collect.
static int prism_alert_drain(int h, int *n) {
	int m = 0;
	int rc = prism_drain(h, PRISM_REPORT_TAG, &m);
	int rc2 = prism_drain(h, PRISM_ALERT_TAG, n);
	*n += m;
	return rc != MPI_SUCCESS ? rc : rc2;
}
// prism_report_take receives up to max reports that have arrived on h
// into out (PRISM_REPORT_WORDS each), oldest first per sender; *n counts
// them. It never waits.
static int prism_report_take(int h, int64_t *out, int max, int *n) {
	MPI_Comm c = prism_comm(h);
	*n = 0;
	while (*n < max) {
		int flag = 0;
		MPI_Status st;
		int rc = MPI_Iprobe(MPI_ANY_SOURCE, PRISM_REPORT_TAG, c, &flag, &st);
		if (rc != MPI_SUCCESS || !flag) return rc;
		rc = MPI_Recv(out + (size_t)*n * PRISM_REPORT_WORDS, PRISM_REPORT_WORDS, MPI_INT64_T, st.MPI_SOURCE, PRISM_REPORT_TAG, c, MPI_STATUS_IGNORE);
		if (rc != MPI_SUCCESS) return rc;
		(*n)++;
	}
	return MPI_SUCCESS;
}
static int prism_any_tag(void) { return MPI_ANY_TAG; }

// prism_probe is one probe in flight: a ping sent to each target and a
// receive posted for each target's pong. state[i] is 0 while target i has
// not answered, 1 once it has, 2 if its receive could not be posted.
typedef struct {
	int n;
	int64_t id;
	int *target;
	int *state;
	int64_t (*pong)[PRISM_WORDS];
	MPI_Request *rreq;
	prism_asend *ping;
} prism_probe;

static void prism_probe_free(prism_probe *p) {
	if (!p) return;
	free(p->target);
	free(p->state);
	free(p->pong);
	free(p->rreq);
	free(p);
}

// prism_probe_start pings every target (world ranks) on h and posts the
// receives of their pongs. *out is NULL only if malloc failed.
static int prism_probe_start(int h, int *targets, int n, int64_t id, int64_t comm, int64_t self, prism_probe **out) {
	prism_probe *p = calloc(1, sizeof *p);
	*out = p;
	if (!p) return MPI_ERR_NO_MEM;
	p->n = n;
	p->id = id;
	p->target = malloc((size_t)n * sizeof(int));
	p->state = calloc((size_t)n, sizeof(int));
	p->pong = calloc((size_t)n, sizeof *p->pong);
	p->rreq = malloc((size_t)n * sizeof(MPI_Request));
	p->ping = prism_asend_new(n);
	if (!p->target || !p->state || !p->pong || !p->rreq || !p->ping) {
		free(p->ping);
		prism_probe_free(p);
		*out = NULL;
		return MPI_ERR_NO_MEM;
	}
	MPI_Comm c = prism_comm(h);
	int rc = MPI_SUCCESS;
	for (int i = 0; i < n; i++) {
		p->target[i] = targets[i];
		p->rreq[i] = MPI_REQUEST_NULL;
		int e = MPI_Irecv(p->pong[i], PRISM_WORDS, MPI_INT64_T, targets[i], PRISM_PONG_TAG, c, &p->rreq[i]);
		if (e != MPI_SUCCESS) {
			p->state[i] = 2;
			if (rc == MPI_SUCCESS) rc = e;
		}
	}
	p->ping->msg[0] = id;
	p->ping->msg[1] = comm;
	p->ping->msg[2] = self;
	for (int i = 0; i < n; i++) {
		int e = MPI_Isend(p->ping->msg, PRISM_PING_WORDS, MPI_INT64_T, targets[i], PRISM_PING_TAG, c, &p->ping->reqs[p->ping->n]);
		if (e == MPI_SUCCESS)
			p->ping->n++;
		else if (rc == MPI_SUCCESS)
			rc = e;
	}
	return rc;
}

// prism_probe_test takes the pongs that have arrived; a pong of an earlier
// probe (its answer came too late) is dropped and the receive posted
// again. *left counts the targets still silent.
static int prism_probe_test(int h, prism_probe *p, int *left) {
	MPI_Comm c = prism_comm(h);
	int rc = MPI_SUCCESS;
	*left = 0;
	for (int i = 0; i < p->n; i++) {
		if (p->state[i] != 0) continue;
		for (;;) {
			int flag = 0;
			int e = MPI_Test(&p->rreq[i], &flag, MPI_STATUS_IGNORE);
			if (e != MPI_SUCCESS) {
				p->state[i] = 2;
				rc = e;
				break;
			}
			if (!flag) {
				(*left)++;
				break;
			}
			if (p->pong[i][0] == p->id) {
				p->state[i] = 1;
				break;
			}
			e = MPI_Irecv(p->pong[i], PRISM_WORDS, MPI_INT64_T, p->target[i], PRISM_PONG_TAG, c, &p->rreq[i]);
			if (e != MPI_SUCCESS) {
				p->state[i] = 2;
				rc = e;
				break;
			}
		}
	}
	return rc;
}

// prism_probe_end cancels the receives still posted (a pong that matched
// one before the cancel counts), and frees the pings if their sends are
// done, else abandons them to MPI. p itself stays for the caller to read.
static void prism_probe_end(prism_probe *p) {
	for (int i = 0; i < p->n; i++) {
		if (p->state[i] != 0) continue;
		int received = 0;
		if (prism_cancel(&p->rreq[i], &received) == MPI_SUCCESS && received && p->pong[i][0] == p->id)
			p->state[i] = 1;
	}
	int done = 0;
	if (prism_asend_test(p->ping, &done) == MPI_SUCCESS && done)
		prism_asend_free(p->ping);
	else
		prism_asend_abandon(p->ping); // leaked on purpose: MPI may still read it
	p->ping = NULL;
}
*/
import "C"

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// MPI is a communicator backed by the system MPI library: the world
// communicator from NewMPI, or a sub-communicator from Split.
//
// Its communicators run with MPI_ERRORS_RETURN, so a failed MPI call returns
// an *MPIError instead of aborting the job. Every collective is bounded by
// the communicator's timeout (SetTimeout; default 3 minutes): it runs as a
// non-blocking MPI collective polled until it completes, the timeout
// passes, or ctx is done. On the timeout it returns a *TimeoutError naming
// the ranks that had not arrived, found by probing them (doc.go). A
// collective that does not complete cannot be withdrawn from MPI, so the
// communicator is then out of step: later collectives on it fail at once,
// Close leaves it allocated, and closing the world communicator skips
// MPI_Finalize. The caller should Abort, which takes the job down.
//
// All ranks must call collectives with the same root, operator, element
// count (for reductions) and color validity; argument errors found before
// the MPI call are therefore reported on every rank alike instead of leaving
// peers blocked.
type MPI struct {
	h         C.int // Fortran handle of the MPI_Comm
	rank      int
	size      int
	localRank int
	worldRank int // this process's rank in MPI_COMM_WORLD, which alerts name
	host      string
	world     bool
	closed    atomic.Bool
	// ah is the Fortran handle of the private duplicate that carries
	// alerts (Alerter); al is the alert state.
	ah C.int
	al mpiAlerts

	// id names the communicator alike on every member (the world is 0,
	// Split derives the others from it), so that a probe can ask a peer
	// about it; name is how errors call it.
	id   uint64
	name string
	// members are the world ranks of the communicator's ranks; nil for
	// the world, where they are the ranks themselves.
	members []int
	timeout atomic.Int64 // nanoseconds
	// entered counts the collectives this rank has entered on the
	// communicator, and inside is the collOp of the one in progress:
	// what this rank's responder tells a prober.
	entered atomic.Uint64
	inside  atomic.Uint32
	// err is the cause of the collective this rank abandoned (timed out,
	// or its ctx was done), after which the communicator is out of step.
	err error

	// The state of the collective in progress; collectives on one
	// communicator never overlap (Comm's contract), so one set suffices.
	req     C.MPI_Request
	flag    C.int          // MPI_Test's, here so it is not allocated per call
	pin     runtime.Pinner // the buffers MPI holds until req completes
	words   [2]int64       // Gather's and Bcast's length words, pinned with m
	newComm C.MPI_Comm     // MPI_Comm_idup's result, likewise
}

var _ Comm = (*MPI)(nil)

// mpiProcess is the process-wide MPI state: MPI can be initialized once per
// process, so the world communicator is a singleton.
type mpiProcess struct {
	mu    sync.Mutex
	world *MPI
	// owned is whether NewMPI initialized MPI and so must finalize it; if
	// something else in the process initialized MPI first, it finalizes.
	owned bool
	// finalize asks the goroutine that initialized MPI to finalize it.
	finalize chan chan error
	// finalized is set before MPI_Finalize starts: from then on no MPI call
	// may be made, so methods check it and fail instead of crashing.
	finalized atomic.Bool

	// commsMu guards comms, the communicators not closed yet (the world
	// and those from Split): closing the world stops their alert watchers
	// before MPI_Finalize, and the probe responder looks them up by id.
	// It is not mu, which Close holds across MPI_Finalize.
	commsMu sync.Mutex
	comms   map[*MPI]struct{}
	splits  int // communicators made by Split, for their names
	// hosts is every world rank's host, gathered when MPI is set up.
	hosts []string
	// probe answers and sends probes; nil until the world is set up and
	// after it is closed.
	probe atomic.Pointer[mpiProber]
	// abandoned are the communicators with a collective that never
	// completed; kept here, with their pinned buffers, for the life of the
	// process. Any of them makes closing the world skip MPI_Finalize.
	abandoned []*MPI
}

var mpiState mpiProcess

var errMPIClosed = errors.New("spmd: mpi: communicator closed (MPI finalized or communicator freed)")

// MPIAvailable reports whether this binary was built with MPI support
// (true in this build), so callers can choose a Comm before asking for MPI.
func MPIAvailable() bool { return true }

// NewMPI initializes MPI with MPI_THREAD_MULTIPLE and returns the world
// communicator. Later calls return the same communicator (MPI can be
// initialized only once per process); after the world communicator is
// closed, NewMPI fails because MPI cannot be initialized again.
//
// MPI_THREAD_MULTIPLE is required, not merely requested: goroutines move
// between OS threads, so any weaker level would force every MPI call onto one
// locked thread. If the library provides less, NewMPI finalizes MPI and
// fails.
//
// Setting up the world is itself a few collectives (the hosts of all ranks
// are gathered, the alert and probe communicators duplicated), bounded by
// the default timeout; SetTimeout applies to what follows.
func NewMPI() (*MPI, error) {
	s := &mpiState
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.world != nil {
		if s.world.closed.Load() {
			return nil, errors.New("spmd: mpi: the world communicator was closed; MPI cannot be initialized again")
		}
		return s.world, nil
	}

	var initialized, finalized C.int
	if err := mpiCheck("MPI_Initialized", C.prism_initialized(&initialized)); err != nil {
		return nil, err
	}
	if err := mpiCheck("MPI_Finalized", C.prism_finalized(&finalized)); err != nil {
		return nil, err
	}
	if finalized != 0 {
		return nil, errors.New("spmd: mpi: MPI was finalized and cannot be initialized again")
	}
	if initialized != 0 {
		// Someone else in the process (a linked library) owns MPI; use it
		// but leave finalizing to them.
		var provided C.int
		if err := mpiCheck("MPI_Query_thread", C.prism_query_thread(&provided)); err != nil {
			return nil, err
		}
		if provided < C.PRISM_THREAD_MULTIPLE {
			return nil, threadLevelError(provided)
		}
	} else if err := s.initOnLockedThread(); err != nil {
		return nil, err
	}

	w := &MPI{h: C.prism_world(), world: true, name: "world", host: processorName()}
	if err := w.setup(context.Background()); err != nil {
		s.stopProbe()
		if s.owned && len(s.abandoned) == 0 {
			s.finalized.Store(true)
			s.finalizeOnLockedThread(defaultTimeout)
		}
		return nil, err
	}
	s.world = w
	return w, nil
}

// initOnLockedThread runs MPI_Init_thread on a goroutine locked to its OS
// thread, which then waits to run MPI_Finalize on that same thread: the MPI
// standard wants Finalize called by the thread that initialized MPI, and Go
// gives no other way to guarantee a thread across calls.
func (s *mpiProcess) initOnLockedThread() error {
	defer tuneOpenMPI()()
	type result struct{ rc, provided C.int }
	done := make(chan result)
	s.finalize = make(chan chan error)
	go func() {
		// Never unlocked: the thread exits with this goroutine after
		// MPI_Finalize instead of going back to the scheduler.
		runtime.LockOSThread()
		var r result
		r.rc = C.prism_init_thread(&r.provided)
		done <- r
		if r.rc != C.PRISM_SUCCESS {
			return
		}
		reply := <-s.finalize
		reply <- mpiCheck("MPI_Finalize", C.prism_finalize())
	}()
	r := <-done
	if r.rc != C.PRISM_SUCCESS {
		return mpiError("MPI_Init_thread", r.rc)
	}
	s.owned = true
	if r.provided < C.PRISM_THREAD_MULTIPLE {
		// Finalize now: every rank sees the same level, so all do this
		// together, and mpirun does not report ranks that exited without
		// finalizing.
		s.finalized.Store(true)
		s.finalizeOnLockedThread(defaultTimeout)
		return threadLevelError(r.provided)
	}
	return nil
}

// ompiIreduceAlgorithm is the OpenMPI MCA variable choosing libnbc's
// MPI_Ireduce algorithm. For jobs of at most 4 ranks and messages of 64 KiB
// or more, libnbc picks a chain of 8 KiB segments, which needs a progress
// round per segment: a histogram's count array (270 KiB) then took 0.5-1 ms
// to reduce at -np 2 instead of the 40-80 us of a blocking MPI_Reduce.
// Binomial (2), what libnbc picks for larger jobs anyway, takes 50-75 us.
const ompiIreduceAlgorithm = "OMPI_MCA_coll_libnbc_ireduce_algorithm"

// tuneOpenMPI sets ompiIreduceAlgorithm for MPI_Init unless the user chose
// a value, and returns the function that restores the environment, so that
// processes prism starts later do not inherit it. Other MPI libraries
// ignore the variable.
func tuneOpenMPI() (restore func()) {
	if _, set := os.LookupEnv(ompiIreduceAlgorithm); set {
		return func() {}
	}
	os.Setenv(ompiIreduceAlgorithm, "2")
	return func() { os.Unsetenv(ompiIreduceAlgorithm) }
}

// finalizeOnLockedThread runs MPI_Finalize on the thread that initialized
// MPI, waiting at most timeout: MPI_Finalize synchronizes with every rank
// (OpenMPI runs a fence in it), so a rank that is stopped or hung would
// hold it forever. After a timeout it fails and the thread stays in
// MPI_Finalize; the process should exit, which mpirun takes for a rank that
// died and ends the job. The caller holds mpiState.mu and has set
// finalized.
func (s *mpiProcess) finalizeOnLockedThread(timeout time.Duration) error {
	reply := make(chan error, 1) // the thread may answer after we gave up
	s.finalize <- reply
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-reply:
		return err
	case <-t.C:
		return fmt.Errorf("spmd: mpi: MPI_Finalize did not return within %v: a rank has not reached it "+
			"(stopped, hung, or still running); exit the process, and mpirun ends the job: %w", timeout, ErrTimeout)
	}
}

func threadLevelError(provided C.int) error {
	name := fmt.Sprintf("level %d", int(provided))
	switch provided {
	case C.PRISM_THREAD_SINGLE:
		name = "MPI_THREAD_SINGLE"
	case C.PRISM_THREAD_FUNNELED:
		name = "MPI_THREAD_FUNNELED"
	case C.PRISM_THREAD_SERIALIZED:
		name = "MPI_THREAD_SERIALIZED"
	}
	return fmt.Errorf("spmd: mpi: the MPI library provides only %s; prism needs MPI_THREAD_MULTIPLE "+
		"(use an MPI built with thread support, e.g. OpenMPI >= 3 or MPICH with --enable-threads=multiple)", name)
}

// setup makes m's MPI failures return instead of abort, caches rank and
// size, registers m for probes, and runs the communicator's setup
// collectives, bounded like any other (collective #1 of m, so that a probe
// made while it hangs can tell who has not reached it): on the world it
// duplicates the probe communicator and gathers every rank's host; on every
// communicator it duplicates the alert communicator. m.id, m.host,
// m.worldRank (for Split's) and m.members are set by the caller.
func (m *MPI) setup(ctx context.Context) error {
	if err := mpiCheck("MPI_Comm_set_errhandler", C.prism_set_errors_return(m.h)); err != nil {
		return err
	}
	var rank, size C.int
	if err := mpiCheck("MPI_Comm_rank", C.prism_comm_rank(m.h, &rank)); err != nil {
		return err
	}
	if err := mpiCheck("MPI_Comm_size", C.prism_comm_size(m.h, &size)); err != nil {
		return err
	}
	m.rank, m.size = int(rank), int(size)
	if m.world {
		m.worldRank = m.rank
	}
	if m.timeout.Load() == 0 {
		m.timeout.Store(int64(defaultTimeout))
	}
	s := &mpiState
	s.register(m)
	deadline, err := m.begin(ctx, collSetup)
	if err != nil {
		s.unregister(m)
		return err
	}
	if m.world {
		err = m.setupWorld(ctx, deadline)
	}
	// The alert communicator comes last, so that nothing can fail after it
	// exists and leak it.
	var ah C.int
	if err == nil {
		ah, err = m.dup(ctx, deadline)
	}
	if err = m.end(err); err != nil {
		if m.err == nil {
			s.unregister(m)
		}
		return err
	}
	m.ah = ah
	host := s.hosts[m.worldRank]
	for r := range m.rank {
		if s.hosts[m.worldOf(r)] == host {
			m.localRank++
		}
	}
	return nil
}

// setupWorld makes the probe communicator and starts its responder, then
// gathers every rank's host (processor name): a rank that stops answering
// is named with its host, and LocalRank counts the ranks on the same one.
func (m *MPI) setupWorld(ctx context.Context, deadline time.Time) error {
	ph, err := m.dup(ctx, deadline)
	if err != nil {
		return err
	}
	mpiState.startProbe(ph, m.rank, m.size)

	name := []byte(m.host)
	m.words[0] = int64(len(name))
	lens := make([]int64, m.size)
	m.pin.Pin(&m.words)
	m.pin.Pin(&lens[0])
	if err := m.await(ctx, deadline, "MPI_Iallgather",
		C.prism_iallgather(m.h, unsafe.Pointer(&m.words[0]), 1, C.PRISM_INT64, unsafe.Pointer(&lens[0]), &m.req)); err != nil {
		return err
	}
	counts, displs := make([]C.int, m.size), make([]C.int, m.size)
	total := 0
	for r, l := range lens {
		if l < 0 || l > C.PRISM_MAX_PROCESSOR_NAME {
			return fmt.Errorf("spmd: mpi: rank %d sent a host name of %d bytes", r, l)
		}
		counts[r], displs[r] = C.int(l), C.int(total)
		total += int(l)
	}
	buf := make([]byte, total+1) // never empty, so &buf[0] exists
	if len(name) == 0 {
		name = buf[total:] // nothing to send, but a valid pointer
	}
	m.pin.Pin(&name[0])
	m.pin.Pin(&buf[0])
	m.pin.Pin(&counts[0])
	m.pin.Pin(&displs[0])
	if err := m.await(ctx, deadline, "MPI_Iallgatherv",
		C.prism_iallgatherv(m.h, unsafe.Pointer(&name[0]), C.int(m.words[0]), unsafe.Pointer(&buf[0]),
			(*C.int)(unsafe.Pointer(&counts[0])), (*C.int)(unsafe.Pointer(&displs[0])), &m.req)); err != nil {
		return err
	}
	hosts := make([]string, m.size)
	for r := range hosts {
		hosts[r] = string(buf[displs[r] : displs[r]+counts[r]])
	}
	mpiState.hosts = hosts
	return nil
}

// dup returns the Fortran handle of a duplicate of m (MPI_Comm_idup) that
// returns its errors.
func (m *MPI) dup(ctx context.Context, deadline time.Time) (C.int, error) {
	m.pin.Pin(&m.newComm)
	if err := m.await(ctx, deadline, "MPI_Comm_idup", C.prism_comm_idup(m.h, &m.newComm, &m.req)); err != nil {
		return 0, err
	}
	h := C.prism_c2f(m.newComm)
	if err := mpiCheck("MPI_Comm_set_errhandler", C.prism_set_errors_return(h)); err != nil {
		C.prism_comm_free(h)
		return 0, err
	}
	return h, nil
}

// worldOf is the world rank of m's rank r.
func (m *MPI) worldOf(r int) int {
	if m.members == nil {
		return r
	}
	return m.members[r]
}

// hostOf is the host of world rank w, "unknown" before the hosts are known.
func hostOf(w int) string {
	if h := mpiState.hosts; w >= 0 && w < len(h) {
		return h[w]
	}
	return "unknown"
}

func (s *mpiProcess) register(m *MPI) {
	s.commsMu.Lock()
	defer s.commsMu.Unlock()
	if s.comms == nil {
		s.comms = map[*MPI]struct{}{}
	}
	s.comms[m] = struct{}{}
}

func (s *mpiProcess) unregister(m *MPI) {
	s.commsMu.Lock()
	defer s.commsMu.Unlock()
	delete(s.comms, m)
}

// lookup returns the open communicator with id, if this process has one.
// A linear search: a job has a handful of communicators.
func (s *mpiProcess) lookup(id uint64) *MPI {
	s.commsMu.Lock()
	defer s.commsMu.Unlock()
	for c := range s.comms {
		if c.id == id {
			return c
		}
	}
	return nil
}

// processorName is MPI's name for this host, which is what other MPI tools
// print; os.Hostname if MPI cannot tell.
func processorName() string {
	buf := make([]byte, C.PRISM_MAX_PROCESSOR_NAME+1)
	var n C.int
	if C.prism_processor_name((*C.char)(unsafe.Pointer(&buf[0])), &n) == C.PRISM_SUCCESS {
		if s := cString(buf, n); s != "" {
			return s
		}
	}
	h, _ := os.Hostname()
	return h
}

// MPILibraryVersion returns the first line of MPI_Get_library_version,
// trimmed, for the run manifest. It may be called before NewMPI.
func MPILibraryVersion() string {
	buf := make([]byte, C.PRISM_MAX_LIBRARY_VERSION_STRING+1)
	var n C.int
	if C.prism_library_version((*C.char)(unsafe.Pointer(&buf[0])), &n) != C.PRISM_SUCCESS {
		return ""
	}
	s, _, _ := strings.Cut(cString(buf, n), "\n")
	return strings.TrimSpace(s)
}

// cString is the text MPI wrote into buf with length n, cut at any NUL in
// case the library counted the terminator or reported n carelessly.
func cString(buf []byte, n C.int) string {
	l := int(n)
	if l < 0 || l > len(buf) {
		l = len(buf)
	}
	b := buf[:l]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return strings.TrimSpace(string(b))
}

// mpiCheck turns an MPI return code into nil or an *MPIError naming op.
func mpiCheck(op string, rc C.int) error {
	if rc == C.PRISM_SUCCESS {
		return nil
	}
	return mpiError(op, rc)
}

// mpiError builds the *MPIError for a failed call, asking the library for
// the code's class and text (both are safe to ask at any time).
func mpiError(op string, rc C.int) *MPIError {
	e := &MPIError{Op: op, Code: int(rc), Class: int(rc)}
	var cls C.int
	if C.prism_error_class(rc, &cls) == C.PRISM_SUCCESS {
		e.Class = int(cls)
	}
	buf := make([]byte, C.PRISM_MAX_ERROR_STRING+1)
	var n C.int
	if C.prism_error_string(rc, (*C.char)(unsafe.Pointer(&buf[0])), &n) == C.PRISM_SUCCESS {
		e.Msg = cString(buf, n)
	}
	return e
}

// Wtime returns MPI_Wtime: seconds on a clock MPI considers good for timing.
// Its origin is arbitrary (OpenMPI starts it at 0 on the first call) and it
// is not synchronized across ranks, so only differences on one rank mean
// anything.
func (m *MPI) Wtime() float64 { return float64(C.prism_wtime()) }

// Rank is this process's rank in the communicator.
func (m *MPI) Rank() int { return m.rank }

// Size is the number of ranks in the communicator.
func (m *MPI) Size() int { return m.size }

// LocalRank is the rank among this communicator's ranks on the same host
// (equal MPI_Get_processor_name), computed once when the communicator was
// made from the hosts gathered at MPI's setup.
func (m *MPI) LocalRank() int { return m.localRank }

// Host is MPI_Get_processor_name (os.Hostname if MPI cannot tell).
func (m *MPI) Host() string { return m.host }

// Kind is "mpi", as the manifest records it.
func (m *MPI) Kind() string { return "mpi" }

// SetTimeout bounds every later collective on m (and on the communicators
// Split makes from it) to d; d <= 0 restores the default of 3 minutes. A
// collective still waiting when d has passed fails with a *TimeoutError.
// The probe that names the missing ranks adds up to probeWindow(d) (half a
// second to three seconds) to the time a failing collective takes.
func (m *MPI) SetTimeout(d time.Duration) {
	if d <= 0 {
		d = defaultTimeout
	}
	m.timeout.Store(int64(d))
}

// Timeout is the bound of m's collectives.
func (m *MPI) Timeout() time.Duration { return time.Duration(m.timeout.Load()) }

// Polling a pending collective: first a spin of MPI_Test (each call runs
// MPI's progress engine, which under mpi_yield_when_idle also yields the
// CPU), which is where collectives of ranks already in step complete, then
// tests between sleeps that double from pollSleepMin to pollSleepMax, in C
// (prism_poll), in slices of pollSlice after each of which ctx and the
// deadline are looked at. A rank waiting long for a peer thus costs a few
// percent of a CPU instead of a whole one, and learns of the completion up
// to pollSleepMax late: Align exists for the barrier before a timed step,
// where that skew would count.
const (
	pollSpin     = time.Millisecond
	pollSleepMin = 50 * time.Microsecond
	pollSleepMax = time.Millisecond
	pollSlice    = 10 * time.Millisecond
)

// begin is the common entry of collectives: a cancelled context, a
// communicator that no longer exists or one out of step fails before any
// MPI call is made. Otherwise the collective is entered (what a probe of
// this rank reports) and its deadline returned.
func (m *MPI) begin(ctx context.Context, op collOp) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	if m.closed.Load() || mpiState.finalized.Load() {
		return time.Time{}, errMPIClosed
	}
	if m.err != nil {
		return time.Time{}, fmt.Errorf("spmd: mpi: %v: the %s communicator is out of step after a collective that never completed: %w", op, m.name, m.err)
	}
	m.entered.Add(1)
	m.inside.Store(uint32(op))
	return time.Now().Add(m.Timeout()), nil
}

// end closes the collective begin opened and returns err. A collective that
// was abandoned keeps its buffers pinned and stays "in progress" for probes:
// MPI may still complete it.
func (m *MPI) end(err error) error {
	if m.err == nil {
		m.pin.Unpin()
		m.inside.Store(uint32(collNone))
	}
	return err
}

// await waits for the collective that call (an MPI_I* function, which
// returned rc) started in m.req, until it completes, ctx is done or the
// deadline passes.
func (m *MPI) await(ctx context.Context, deadline time.Time, call string, rc C.int) error {
	return m.awaitSpin(ctx, deadline, pollSpin, call, rc)
}

// awaitSpin is await with the first spin lasting spin.
func (m *MPI) awaitSpin(ctx context.Context, deadline time.Time, spin time.Duration, call string, rc C.int) error {
	if rc != C.PRISM_SUCCESS {
		// Nothing started: an argument error, alike on every rank.
		return mpiError(call, rc)
	}
	if rc := C.prism_test_for(&m.req, C.double(spin.Seconds()), &m.flag); rc != C.PRISM_SUCCESS {
		return m.abandon(mpiError("MPI_Test", rc))
	}
	if m.flag != 0 {
		return nil
	}
	return m.backoff(ctx, deadline)
}

// backoff is await after the spin: the rank is waiting for a peer. ctx is
// looked at between slices, so its end is noticed within pollSlice.
func (m *MPI) backoff(ctx context.Context, deadline time.Time) error {
	delay := C.int(pollSleepMin / time.Microsecond)
	for {
		if err := ctx.Err(); err != nil {
			return m.abandon(err)
		}
		slice := min(pollSlice, time.Until(deadline))
		if rc := C.prism_poll(&m.req, C.double(slice.Seconds()), &delay, C.int(pollSleepMax/time.Microsecond), &m.flag); rc != C.PRISM_SUCCESS {
			return m.abandon(mpiError("MPI_Test", rc))
		}
		if m.flag != 0 {
			return nil
		}
		if !time.Now().Before(deadline) {
			return m.timedOut()
		}
	}
}

// abandon gives up the collective in progress: MPI cannot withdraw it, so
// its request and pinned buffers are kept for the life of the process and
// the communicator is out of step from now on. It returns cause.
func (m *MPI) abandon(cause error) error {
	m.err = cause
	s := &mpiState
	s.commsMu.Lock()
	s.abandoned = append(s.abandoned, m)
	s.commsMu.Unlock()
	return cause
}

// timedOut abandons the collective in progress and probes the other members
// to find who kept it from completing.
func (m *MPI) timedOut() error {
	e := &TimeoutError{
		Op:      collOp(m.inside.Load()).String(),
		Seq:     m.entered.Load(),
		Comm:    m.name,
		Timeout: m.Timeout(),
		Rank:    m.worldRank,
		Host:    m.host,
	}
	m.abandon(e)
	if p := mpiState.probe.Load(); p != nil {
		var ranks []int
		for r := range m.size {
			if r != m.rank {
				ranks = append(ranks, m.worldOf(r))
			}
		}
		e.Probe = probeWindow(e.Timeout)
		answers := p.ask(m.id, ranks, e.Probe)
		e.Missing = missingRanks(e.Seq, ranks, answers, hostOf, e.Probe)
	}
	return e
}

// mpiCount converts a length to MPI's int count, rejecting what does not
// fit instead of letting it wrap.
func mpiCount(op string, n int) (C.int, error) {
	if n > math.MaxInt32 {
		return 0, fmt.Errorf("spmd: mpi: %s: %d elements exceed MPI's count limit of %d", op, n, math.MaxInt32)
	}
	return C.int(n), nil
}

func mpiOp(op Op) (C.int, error) {
	switch op {
	case Sum:
		return C.PRISM_SUM, nil
	case Min:
		return C.PRISM_MIN, nil
	case Max:
		return C.PRISM_MAX, nil
	}
	return 0, fmt.Errorf("spmd: mpi: unknown reduction operator %v", op)
}

// Barrier is MPI_Ibarrier, bounded by m's timeout.
func (m *MPI) Barrier(ctx context.Context) error {
	return m.barrier(ctx, collBarrier, pollSpin)
}

func (m *MPI) barrier(ctx context.Context, op collOp, spin time.Duration) error {
	deadline, err := m.begin(ctx, op)
	if err != nil {
		return err
	}
	return m.end(m.awaitSpin(ctx, deadline, spin, "MPI_Ibarrier", C.prism_ibarrier(m.h, &m.req)))
}

// Align is a Barrier that releases the ranks together, for the start of a
// timed step: a Barrier that waited long for a peer may see the completion
// up to pollSleepMax (1 ms) late on some ranks. Align's second barrier is
// entered by every rank within about that much of the others, so it
// completes inside its opening spin, three times as long as a Barrier's,
// and ends for all of them within microseconds.
func (m *MPI) Align(ctx context.Context) error {
	if err := m.Barrier(ctx); err != nil {
		return err
	}
	return m.barrier(ctx, collAlign, 3*pollSleepMax)
}

// AllreduceInt64 is MPI_Iallreduce in place on MPI_INT64_T (not MPI_LONG,
// whose size depends on the platform). An empty v makes no MPI call.
func (m *MPI) AllreduceInt64(ctx context.Context, op Op, v []int64) error {
	deadline, err := m.begin(ctx, collAllreduceInt64)
	if err != nil || len(v) == 0 {
		return m.end(err)
	}
	return m.end(m.allreduce(ctx, deadline, op, unsafe.Pointer(&v[0]), len(v), C.PRISM_INT64))
}

// AllreduceFloat64 is MPI_Iallreduce in place on MPI_DOUBLE. An empty v
// makes no MPI call.
func (m *MPI) AllreduceFloat64(ctx context.Context, op Op, v []float64) error {
	deadline, err := m.begin(ctx, collAllreduceFloat64)
	if err != nil || len(v) == 0 {
		return m.end(err)
	}
	return m.end(m.allreduce(ctx, deadline, op, unsafe.Pointer(&v[0]), len(v), C.PRISM_DOUBLE))
}

func (m *MPI) allreduce(ctx context.Context, deadline time.Time, op Op, p unsafe.Pointer, n int, dt C.int) error {
	o, err := mpiOp(op)
	if err != nil {
		return err
	}
	cn, err := mpiCount("MPI_Iallreduce", n)
	if err != nil {
		return err
	}
	m.pin.Pin(p)
	return m.await(ctx, deadline, "MPI_Iallreduce", C.prism_iallreduce(m.h, p, cn, dt, o, &m.req))
}

// ReduceInt64 is MPI_Ireduce on MPI_INT64_T, in place at root (MPI_IN_PLACE)
// so no second buffer is allocated for large histograms. Non-root v is left
// unchanged. An empty v makes no MPI call.
func (m *MPI) ReduceInt64(ctx context.Context, root int, op Op, v []int64) error {
	deadline, err := m.begin(ctx, collReduceInt64)
	if err != nil {
		return err
	}
	return m.end(m.reduce(ctx, deadline, root, op, v))
}

func (m *MPI) reduce(ctx context.Context, deadline time.Time, root int, op Op, v []int64) error {
	if err := checkRoot(root, m.size); err != nil {
		return err
	}
	o, err := mpiOp(op)
	if err != nil {
		return err
	}
	if len(v) == 0 {
		return nil
	}
	n, err := mpiCount("MPI_Ireduce", len(v))
	if err != nil {
		return err
	}
	isRoot := C.int(0)
	if root == m.rank {
		isRoot = 1
	}
	m.pin.Pin(&v[0])
	return m.await(ctx, deadline, "MPI_Ireduce",
		C.prism_ireduce(m.h, unsafe.Pointer(&v[0]), n, C.PRISM_INT64, o, C.int(root), isRoot, &m.req))
}

// Gather collects every rank's b on root, indexed by rank (nil elsewhere).
// Lengths may differ, including 0. It costs three MPI collectives: the
// lengths are gathered (MPI_Igather), root broadcasts whether they fit
// MPI's int counts (so an oversized gather fails on every rank instead of
// leaving the others blocked), then the bytes follow (MPI_Igatherv); one
// deadline bounds the three. The slices returned on root share one buffer
// but are capped, so appending to one never overwrites another.
func (m *MPI) Gather(ctx context.Context, root int, b []byte) ([][]byte, error) {
	deadline, err := m.begin(ctx, collGather)
	if err != nil {
		return nil, err
	}
	out, err := m.gather(ctx, deadline, root, b)
	return out, m.end(err)
}

func (m *MPI) gather(ctx context.Context, deadline time.Time, root int, b []byte) ([][]byte, error) {
	if err := checkRoot(root, m.size); err != nil {
		return nil, err
	}
	isRoot := root == m.rank

	m.words[0] = int64(len(b))
	m.pin.Pin(&m.words)
	var lens []int64
	var lensPtr unsafe.Pointer
	if isRoot {
		lens = make([]int64, m.size)
		lensPtr = unsafe.Pointer(&lens[0])
		m.pin.Pin(lensPtr)
	}
	if err := m.await(ctx, deadline, "MPI_Igather",
		C.prism_igather(m.h, unsafe.Pointer(&m.words[0]), 1, C.PRISM_INT64, lensPtr, C.int(root), &m.req)); err != nil {
		return nil, err
	}

	// verdict: 0 fits; r+1 means rank r's piece is too large; -1 means the
	// total is.
	var verdict, total int64
	if isRoot {
		for r, l := range lens {
			if l > math.MaxInt32 {
				verdict = int64(r) + 1
				break
			}
			total += l
			if total > math.MaxInt32 {
				verdict = -1
				break
			}
		}
	}
	m.words[1] = verdict
	if err := m.await(ctx, deadline, "MPI_Ibcast",
		C.prism_ibcast(m.h, unsafe.Pointer(&m.words[1]), 1, C.PRISM_INT64, C.int(root), &m.req)); err != nil {
		return nil, err
	}
	switch verdict = m.words[1]; {
	case verdict > 0:
		return nil, fmt.Errorf("spmd: mpi: gather: rank %d's piece exceeds MPI's count limit of %d bytes", verdict-1, math.MaxInt32)
	case verdict < 0:
		return nil, fmt.Errorf("spmd: mpi: gather: total exceeds MPI's count limit of %d bytes", math.MaxInt32)
	}

	var sendPtr unsafe.Pointer
	if len(b) > 0 {
		sendPtr = unsafe.Pointer(&b[0])
		m.pin.Pin(sendPtr)
	}
	var buf []byte
	var counts, displs []C.int
	var recvPtr, countsPtr, displsPtr unsafe.Pointer
	if isRoot {
		counts = make([]C.int, m.size)
		displs = make([]C.int, m.size)
		off := int64(0)
		for r, l := range lens {
			counts[r], displs[r] = C.int(l), C.int(off)
			off += l
		}
		countsPtr, displsPtr = unsafe.Pointer(&counts[0]), unsafe.Pointer(&displs[0])
		m.pin.Pin(countsPtr)
		m.pin.Pin(displsPtr)
		if total > 0 {
			buf = make([]byte, total)
			recvPtr = unsafe.Pointer(&buf[0])
			m.pin.Pin(recvPtr)
		}
	}
	if err := m.await(ctx, deadline, "MPI_Igatherv",
		C.prism_igatherv(m.h, sendPtr, C.int(len(b)), recvPtr, (*C.int)(countsPtr), (*C.int)(displsPtr), C.int(root), &m.req)); err != nil {
		return nil, err
	}
	if !isRoot {
		return nil, nil
	}
	out := make([][]byte, m.size)
	for r := range out {
		d, c := int(displs[r]), int(counts[r])
		out[r] = buf[d : d+c : d+c]
	}
	return out, nil
}

// Bcast returns root's b on every rank: root gets b itself, the others a
// fresh slice. The length travels first (as int64, so an oversized b fails
// on every rank alike), then the bytes if there are any; one deadline
// bounds both.
func (m *MPI) Bcast(ctx context.Context, root int, b []byte) ([]byte, error) {
	deadline, err := m.begin(ctx, collBcast)
	if err != nil {
		return nil, err
	}
	out, err := m.bcast(ctx, deadline, root, b)
	return out, m.end(err)
}

func (m *MPI) bcast(ctx context.Context, deadline time.Time, root int, b []byte) ([]byte, error) {
	if err := checkRoot(root, m.size); err != nil {
		return nil, err
	}
	isRoot := root == m.rank
	m.words[0] = 0
	if isRoot {
		m.words[0] = int64(len(b))
	}
	m.pin.Pin(&m.words)
	if err := m.await(ctx, deadline, "MPI_Ibcast",
		C.prism_ibcast(m.h, unsafe.Pointer(&m.words[0]), 1, C.PRISM_INT64, C.int(root), &m.req)); err != nil {
		return nil, err
	}
	n := m.words[0]
	if n > math.MaxInt32 {
		return nil, fmt.Errorf("spmd: mpi: bcast: %d bytes exceed MPI's count limit of %d", n, math.MaxInt32)
	}
	out := b
	if !isRoot {
		out = make([]byte, n)
	}
	if n == 0 {
		return out, nil
	}
	m.pin.Pin(&out[0])
	if err := m.await(ctx, deadline, "MPI_Ibcast",
		C.prism_ibcast(m.h, unsafe.Pointer(&out[0]), C.int(n), C.PRISM_BYTE, C.int(root), &m.req)); err != nil {
		return nil, err
	}
	return out, nil
}

// Split is MPI_Comm_split: ranks with the same color form a communicator,
// ordered by key then old rank. Undefined maps to MPI_UNDEFINED and yields a
// nil Comm. Other colors must be >= 0 (MPI rejects negative ones with an
// *MPIError); color and key must fit in an int32. The new communicator
// inherits m's timeout.
//
// MPI has no non-blocking MPI_Comm_split, so the ranks first meet in a
// bounded barrier: MPI_Comm_split then only blocks if a rank stops in the
// microseconds between the two. The new communicator's setup (duplicating
// its alert communicator) is bounded like any collective.
func (m *MPI) Split(ctx context.Context, color, key int) (Comm, error) {
	deadline, err := m.begin(ctx, collSplit)
	if err != nil {
		return nil, err
	}
	sub, err := m.split(ctx, deadline, color, key)
	if err = m.end(err); err != nil || sub == nil {
		return nil, err // a nil interface, not a typed nil *MPI
	}
	return sub, nil
}

func (m *MPI) split(ctx context.Context, deadline time.Time, color, key int) (*MPI, error) {
	if color != Undefined && (color < math.MinInt32 || color > math.MaxInt32) {
		return nil, fmt.Errorf("spmd: mpi: split: color %d does not fit MPI's int", color)
	}
	if key < math.MinInt32 || key > math.MaxInt32 {
		return nil, fmt.Errorf("spmd: mpi: split: key %d does not fit MPI's int", key)
	}
	c := C.int(color)
	if color == Undefined {
		c = C.PRISM_UNDEFINED
	}
	if err := m.await(ctx, deadline, "MPI_Ibarrier", C.prism_ibarrier(m.h, &m.req)); err != nil {
		return nil, err
	}
	var h, isnull C.int
	if err := mpiCheck("MPI_Comm_split", C.prism_comm_split(m.h, c, C.int(key), &h, &isnull)); err != nil {
		return nil, err
	}
	if isnull != 0 {
		return nil, nil
	}
	s := &mpiState
	s.commsMu.Lock()
	s.splits++
	n := s.splits
	s.commsMu.Unlock()
	sub := &MPI{h: h, host: m.host, worldRank: m.worldRank, id: splitID(m.id, m.entered.Load(), color), name: "split " + strconv.Itoa(n)}
	sub.timeout.Store(m.timeout.Load())
	var size C.int
	if err := mpiCheck("MPI_Comm_size", C.prism_comm_size(h, &size)); err != nil {
		C.prism_comm_free(h)
		return nil, err
	}
	members := make([]C.int, size)
	if err := mpiCheck("MPI_Group_translate_ranks", C.prism_world_ranks(h, size, &members[0])); err != nil {
		C.prism_comm_free(h)
		return nil, err
	}
	sub.members = make([]int, size)
	for i, w := range members {
		sub.members[i] = int(w)
	}
	if err := sub.setup(ctx); err != nil {
		if sub.err == nil {
			C.prism_comm_free(h)
		}
		return nil, err
	}
	return sub, nil
}

// splitID names the communicator Split makes, alike on its members: they
// share the parent, the collective's number on it and the color.
func splitID(parent, seq uint64, color int) uint64 {
	var b [24]byte
	binary.LittleEndian.PutUint64(b[:], parent)
	binary.LittleEndian.PutUint64(b[8:], seq)
	binary.LittleEndian.PutUint64(b[16:], uint64(int64(color)))
	h := fnv.New64a()
	h.Write(b[:])
	return h.Sum64() | 1 // never the world's 0
}

// abortExitAfter bounds how long Abort waits for MPI_Abort, which should
// not return at all, before the process exits by itself.
const abortExitAfter = 30 * time.Second

// Abort is MPI_Abort on MPI_COMM_WORLD, whatever communicator it is called
// on: the whole job goes down with code (mpirun exits non-zero and kills
// every rank, one that was stopped included). It works after a collective
// timed out: MPI_Abort needs no other rank. It does not return; should
// MPI_Abort return or hang (or MPI be finalized), the process exits.
func (m *MPI) Abort(code int) {
	if !mpiState.finalized.Load() {
		time.AfterFunc(abortExitAfter, func() { os.Exit(code) })
		C.prism_abort(C.int(code))
	}
	os.Exit(code)
}

// Close frees a communicator from Split (MPI_Comm_free, collective: call it
// on every member) or, on the world communicator, finalizes MPI
// (MPI_Finalize, also collective). Close is idempotent; closing a
// sub-communicator after MPI was finalized is a no-op. If MPI was
// initialized by someone else in the process, closing the world
// communicator leaves finalizing to them.
//
// Close first ends the communicator's alerts (closeAlerts): watchers still
// running are stopped, alerts nobody received are drained, and the alert
// communicator is freed, so that no pending message or request outlives it.
//
// Close never hangs. A communicator with a collective that never completed
// is left allocated, and Close returns an error saying so. On the world,
// after such a collective on any communicator, MPI_Finalize is skipped (it
// would wait for the rank that is missing) and Close fails; otherwise
// MPI_Finalize is bounded by the world's timeout. Either way the process
// should then exit non-zero, or Abort: mpirun ends the job when a rank
// exits without finalizing, killing the ranks still there.
func (m *MPI) Close() error {
	s := &mpiState
	if !m.world {
		if !m.closed.CompareAndSwap(false, true) {
			return nil
		}
		s.unregister(m)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.finalized.Load() {
			return nil
		}
		m.closeAlerts()
		if m.err != nil {
			return fmt.Errorf("spmd: mpi: Close: the %s communicator is left allocated after a collective that never completed: %w", m.name, m.err)
		}
		return mpiCheck("MPI_Comm_free", C.prism_comm_free(m.h))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !m.closed.CompareAndSwap(false, true) {
		return nil
	}
	// Sub-communicators left open keep their handles, but no goroutine of
	// theirs may call MPI from now on.
	s.commsMu.Lock()
	var subs []*MPI
	for c := range s.comms {
		if c != m {
			subs = append(subs, c)
		}
	}
	s.comms = nil
	abandoned := slices.Clone(s.abandoned)
	s.commsMu.Unlock()
	for _, sub := range subs {
		sub.stopAlerts()
	}
	m.closeAlerts()
	s.stopProbe()
	if len(abandoned) > 0 {
		return fmt.Errorf("spmd: mpi: Close: MPI_Finalize skipped, since it would wait for the rank a collective "+
			"never heard from; exit the process (or Abort) and mpirun ends the job: %w", abandoned[0].err)
	}
	if !s.owned {
		return nil
	}
	s.finalized.Store(true)
	return s.finalizeOnLockedThread(m.Timeout())
}

var _ Alerter = (*MPI)(nil)

// alertMPIPoll is how often a watcher tests its pending receive: MPI_Test
// is a local call costing microseconds, so this can be much shorter than
// the rendezvous's file poll.
const alertMPIPoll = 20 * time.Millisecond

// mpiAlerts is a communicator's alert state. One listener goroutine runs
// while at least one watcher does: it keeps one MPI_Irecv(MPI_ANY_SOURCE)
// posted on the alert communicator and hands every alert to the watchers of
// its tag, so that watchers of different tags on one communicator never
// take each other's messages. Every alert received is remembered by tag
// hash, which makes an alert that arrived before its Watch (or while no
// watcher ran) fire that Watch at once, as the rendezvous's alert file
// does; alerts of other tags (stale ones from earlier steps) fire nothing.
type mpiAlerts struct {
	mu       sync.Mutex
	closed   bool
	seen     map[uint64]int // tag hash -> world rank of its first alert
	watchers map[*mpiWatcher]struct{}
	// quit and done belong to the running listener; nil when none runs.
	quit, done chan struct{}
	listeners  sync.WaitGroup
	// sends are this rank's alert sends not known to be complete.
	sends []*C.prism_asend
}

type mpiWatcher struct {
	hash  uint64
	ch    chan int
	fired bool
}

func alertHash(tag string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(tag))
	return h.Sum64()
}

// Alert sends the tag's hash and this rank's world rank to every other
// rank of the communicator with MPI_Isend on the alert communicator. It
// never blocks: the sends complete on their own (they are a few bytes, so
// MPI sends them eagerly) and are reaped by later Alerts and by Close. An
// alert already received for tag is not repeated: its sender reached every
// rank already. Failures are ignored, alerts being best effort.
func (m *MPI) Alert(tag string) {
	if m.size < 2 || m.closed.Load() || mpiState.finalized.Load() {
		return
	}
	h := alertHash(tag)
	a := &m.al
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	if _, ok := a.seen[h]; ok {
		return
	}
	a.reapSends()
	var s *C.prism_asend
	C.prism_alert_send(m.ah, C.int64_t(int64(h)), C.int64_t(m.worldRank), C.int(m.rank), C.int(m.size), &s)
	if s != nil {
		a.sends = append(a.sends, s)
	}
}

// Watch delivers the world rank of the first alert for tag. stop is
// idempotent and returns once no receive of this watcher's is pending;
// call it before Close (Close stops watchers left running anyway).
func (m *MPI) Watch(tag string) (<-chan int, func()) {
	fired := make(chan int, 1)
	nop := func() {}
	if m.size < 2 {
		return fired, nop
	}
	w := &mpiWatcher{hash: alertHash(tag), ch: fired}
	a := &m.al
	a.mu.Lock()
	if a.closed || m.closed.Load() || mpiState.finalized.Load() {
		a.mu.Unlock()
		return fired, nop
	}
	if r, ok := a.seen[w.hash]; ok {
		a.mu.Unlock()
		fired <- r
		return fired, nop
	}
	if a.watchers == nil {
		a.watchers = map[*mpiWatcher]struct{}{}
	}
	a.watchers[w] = struct{}{}
	if a.quit == nil {
		a.quit, a.done = make(chan struct{}), make(chan struct{})
		a.listeners.Add(1)
		go m.listen(a.quit, a.done)
	}
	a.mu.Unlock()
	var once sync.Once
	return fired, func() { once.Do(func() { m.unwatch(w) }) }
}

// unwatch removes w and, if it was the last watcher, stops the listener
// and waits until its receive is cancelled.
func (m *MPI) unwatch(w *mpiWatcher) {
	a := &m.al
	a.mu.Lock()
	delete(a.watchers, w)
	var done chan struct{}
	if len(a.watchers) == 0 && a.quit != nil {
		close(a.quit)
		done = a.done
		a.quit, a.done = nil, nil
	}
	a.mu.Unlock()
	if done != nil {
		<-done
	}
}

// deliver records an alert and fires the watchers of its tag.
func (a *mpiAlerts) deliver(hash uint64, rank int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seen == nil {
		a.seen = map[uint64]int{}
	}
	if _, ok := a.seen[hash]; !ok {
		a.seen[hash] = rank
	}
	for w := range a.watchers {
		if w.hash == hash && !w.fired {
			w.fired = true
			w.ch <- rank // buffered, and each watcher fires once
		}
	}
}

// listen keeps a receive posted on the alert communicator and tests it
// every alertMPIPoll until quit is closed, then cancels it (MPI_Cancel and
// MPI_Wait); a message that matched before the cancel is still delivered.
func (m *MPI) listen(quit <-chan struct{}, done chan<- struct{}) {
	defer m.al.listeners.Done()
	defer close(done)
	r := C.prism_arecv_new()
	if r == nil {
		<-quit
		return
	}
	defer C.prism_arecv_free(r)
	take := func() { m.al.deliver(uint64(r.msg[0]), int(r.msg[1])) }
	finish := func() {
		var received C.int
		if C.prism_arecv_cancel(r, &received) == C.PRISM_SUCCESS && received != 0 {
			take()
		}
	}
	t := time.NewTicker(alertMPIPoll)
	defer t.Stop()
	for {
		// Take every alert that has arrived, then sleep.
		for {
			if C.prism_arecv_pending(r) == 0 {
				if C.prism_arecv_post(m.ah, r, C.PRISM_ALERT_TAG) != C.PRISM_SUCCESS {
					<-quit // alerts are best effort: stay idle until stopped
					return
				}
			}
			var flag C.int
			if C.prism_arecv_test(r, &flag) != C.PRISM_SUCCESS {
				finish()
				<-quit
				return
			}
			if flag == 0 {
				break
			}
			take()
		}
		select {
		case <-quit:
			finish()
			return
		case <-t.C:
		}
	}
}

var _ Reporter = (*MPI)(nil)

// Report sends rank 0 a report with MPI_Isend on the alert communicator
// (tag PRISM_REPORT_TAG, so it never matches an alert's receive); like
// Alert it never blocks, and the send is reaped later.
func (m *MPI) Report(tag string, v []int64) {
	if m.size < 2 || m.rank == 0 || m.closed.Load() || mpiState.finalized.Load() {
		return
	}
	var w [ReportWords]int64
	copy(w[:], v)
	a := &m.al
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	a.reapSends()
	var s *C.prism_asend
	C.prism_report_send(m.ah, C.int64_t(int64(alertHash(tag))), C.int64_t(m.rank),
		C.int64_t(w[0]), C.int64_t(w[1]), C.int64_t(w[2]), C.int64_t(w[3]), C.int64_t(w[4]), C.int64_t(w[5]), &s)
	if s != nil {
		a.sends = append(a.sends, s)
	}
}

// Collect receives, without waiting, every report that has arrived
// (MPI_Iprobe, MPI_Recv); MPI keeps one sender's messages in order, so
// the last of a rank's is its newest.
func (m *MPI) Collect(tag string, latest [][]int64) {
	if m.size < 2 || m.rank != 0 || m.closed.Load() || mpiState.finalized.Load() {
		return
	}
	a := &m.al
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	h := int64(alertHash(tag))
	const batch = 64
	buf := (*[batch * C.PRISM_REPORT_WORDS]C.int64_t)(C.malloc(C.size_t(batch * C.PRISM_REPORT_WORDS * 8)))
	if buf == nil {
		return
	}
	defer C.free(unsafe.Pointer(buf))
	for {
		var n C.int
		rc := C.prism_report_take(m.ah, &buf[0], batch, &n)
		for i := 0; i < int(n); i++ {
			msg := buf[i*C.PRISM_REPORT_WORDS : (i+1)*C.PRISM_REPORT_WORDS]
			r := int(msg[1])
			if int64(msg[0]) != h || r <= 0 || r >= len(latest) {
				continue
			}
			for j := 0; j < ReportWords && j < len(latest[r]); j++ {
				latest[r][j] = int64(msg[2+j])
			}
		}
		if rc != C.PRISM_SUCCESS || int(n) < batch {
			return
		}
	}
}

// reapSends frees the alert sends that have completed. a.mu is held.
func (a *mpiAlerts) reapSends() {
	keep := a.sends[:0]
	for _, s := range a.sends {
		var done C.int
		if C.prism_asend_test(s, &done) == C.PRISM_SUCCESS && done != 0 {
			C.prism_asend_free(s)
			continue
		}
		keep = append(keep, s)
	}
	clear(a.sends[len(keep):])
	a.sends = keep
}

// stopAlerts ends m's alerts without freeing anything: no Alert or Watch
// starts anything from now on, and the listener, if one runs, has cancelled
// its receive and returned when stopAlerts returns.
func (m *MPI) stopAlerts() {
	a := &m.al
	a.mu.Lock()
	a.closed = true
	a.watchers = nil
	if a.quit != nil {
		close(a.quit)
		a.quit, a.done = nil, nil
	}
	a.mu.Unlock()
	a.listeners.Wait()
}

// alertSendGrace bounds how long Close waits for this rank's own alert
// sends to complete before handing them over to MPI.
const alertSendGrace = time.Second

// closeAlerts ends m's alerts before the communicator goes: it stops the
// listener (its receive cancelled), receives the alerts nobody took
// (MPI_Iprobe loop), waits a little for this rank's sends, abandons any
// still pending with MPI_Request_free, and frees the alert communicator.
// m.closed is already set, so no Alert or Watch starts anything new.
func (m *MPI) closeAlerts() {
	m.stopAlerts()
	a := &m.al
	var n C.int
	C.prism_alert_drain(m.ah, &n)
	a.mu.Lock()
	defer a.mu.Unlock()
	deadline := time.Now().Add(alertSendGrace)
	for a.reapSends(); len(a.sends) > 0 && time.Now().Before(deadline); a.reapSends() {
		time.Sleep(time.Millisecond)
		C.prism_alert_drain(m.ah, &n)
	}
	for _, s := range a.sends {
		// Leaked on purpose: MPI may still read the message.
		C.prism_asend_abandon(s)
	}
	a.sends = nil
	C.prism_comm_free(m.ah)
}

// probePoll is how often a responder tests for pings, and probeTestEvery
// how often a prober tests for pongs while it waits for them.
const (
	probePoll      = alertMPIPoll
	probeTestEvery = 2 * time.Millisecond
)

// mpiProber is the process's side of probes (doc.go): a responder
// goroutine that keeps a receive of pings posted on the probe
// communicator (a duplicate of MPI_COMM_WORLD) and answers each with what
// this rank is doing on the communicator named, and ask, which pings peers
// and collects their answers.
type mpiProber struct {
	ph         C.int // Fortran handle of the probe communicator
	rank, size int   // world rank and size
	quit, done chan struct{}
	// asking serializes probes, whose pong receives would otherwise
	// match each other's pongs.
	asking sync.Mutex
	nextID atomic.Int64
	// sends are the responder's pongs not known to be complete; only the
	// responder goroutine touches them until it has stopped.
	sends []*C.prism_asend
}

// startProbe starts the responder on the probe communicator ph.
func (s *mpiProcess) startProbe(ph C.int, rank, size int) {
	p := &mpiProber{ph: ph, rank: rank, size: size, quit: make(chan struct{}), done: make(chan struct{})}
	s.probe.Store(p)
	go p.respond()
}

// stopProbe stops the responder, drains what was sent to this rank and
// frees the probe communicator. The caller holds mpiState.mu.
func (s *mpiProcess) stopProbe() {
	p := s.probe.Swap(nil)
	if p == nil {
		return
	}
	close(p.quit)
	<-p.done
	p.asking.Lock() // a probe in flight finishes first
	defer p.asking.Unlock()
	var n C.int
	deadline := time.Now().Add(alertSendGrace)
	for p.reapSends(); len(p.sends) > 0 && time.Now().Before(deadline); p.reapSends() {
		time.Sleep(time.Millisecond)
		C.prism_drain(p.ph, C.prism_any_tag(), &n)
	}
	for _, snd := range p.sends {
		C.prism_asend_abandon(snd) // leaked on purpose: MPI may still read it
	}
	p.sends = nil
	C.prism_drain(p.ph, C.prism_any_tag(), &n)
	C.prism_comm_free(p.ph)
}

// respond answers pings until quit: it takes every ping that has arrived,
// then sleeps probePoll. A rank busy in a long step answers all the same,
// since this goroutine needs no other; only a process that is stopped,
// hung as a whole or unreachable does not.
func (p *mpiProber) respond() {
	defer close(p.done)
	r := C.prism_arecv_new()
	if r == nil {
		<-p.quit
		return
	}
	defer C.prism_arecv_free(r)
	t := time.NewTicker(probePoll)
	defer t.Stop()
	for {
		for {
			if C.prism_arecv_pending(r) == 0 {
				if C.prism_arecv_post(p.ph, r, C.PRISM_PING_TAG) != C.PRISM_SUCCESS {
					<-p.quit // probes are best effort: stay idle until stopped
					return
				}
			}
			var flag C.int
			if C.prism_arecv_test(r, &flag) != C.PRISM_SUCCESS {
				break
			}
			if flag == 0 {
				break
			}
			p.answer(int64(r.msg[0]), uint64(r.msg[1]), int(r.msg[2]))
		}
		p.reapSends()
		select {
		case <-p.quit:
			var received C.int
			if C.prism_arecv_cancel(r, &received) == C.PRISM_SUCCESS && received != 0 {
				p.answer(int64(r.msg[0]), uint64(r.msg[1]), int(r.msg[2]))
			}
			return
		case <-t.C:
		}
	}
}

// answer sends the pong for probe id from world rank from about comm.
func (p *mpiProber) answer(id int64, comm uint64, from int) {
	if from < 0 || from >= p.size {
		return
	}
	entered, inside := int64(-1), int64(collNone)
	if c := mpiState.lookup(comm); c != nil && !c.closed.Load() {
		entered, inside = int64(c.entered.Load()), int64(c.inside.Load())
	}
	var s *C.prism_asend
	C.prism_pong_send(p.ph, C.int(from), C.int64_t(id), C.int64_t(entered), C.int64_t(inside), C.int64_t(p.rank), &s)
	if s != nil {
		p.sends = append(p.sends, s)
	}
}

// reapSends frees the pongs whose sends have completed.
func (p *mpiProber) reapSends() {
	keep := p.sends[:0]
	for _, s := range p.sends {
		var done C.int
		if C.prism_asend_test(s, &done) == C.PRISM_SUCCESS && done != 0 {
			C.prism_asend_free(s)
			continue
		}
		keep = append(keep, s)
	}
	clear(p.sends[len(keep):])
	p.sends = keep
}

// ask pings the world ranks in ranks about communicator comm and returns
// their answers, in the same order, as they stand after window (or as soon
// as all have answered). It costs one small message each way per rank, and
// is made only after a collective timed out.
func (p *mpiProber) ask(comm uint64, ranks []int, window time.Duration) []probeAnswer {
	answers := make([]probeAnswer, len(ranks))
	if len(ranks) == 0 {
		return answers
	}
	p.asking.Lock()
	defer p.asking.Unlock()
	targets := make([]C.int, len(ranks))
	for i, r := range ranks {
		targets[i] = C.int(r)
	}
	id := p.nextID.Add(1)
	var pr *C.prism_probe
	C.prism_probe_start(p.ph, &targets[0], C.int(len(targets)), C.int64_t(id), C.int64_t(int64(comm)), C.int64_t(p.rank), &pr)
	if pr == nil {
		return answers // out of memory: nobody is known to have answered
	}
	defer C.prism_probe_free(pr)
	deadline := time.Now().Add(window)
	for {
		var left C.int
		C.prism_probe_test(p.ph, pr, &left)
		if left == 0 || !time.Now().Before(deadline) {
			break
		}
		time.Sleep(probeTestEvery)
	}
	C.prism_probe_end(pr)
	state := unsafe.Slice(pr.state, len(ranks))
	pong := unsafe.Slice(pr.pong, len(ranks))
	for i := range answers {
		if state[i] != 1 {
			continue
		}
		a := &answers[i]
		a.answered = true
		if entered := int64(pong[i][1]); entered >= 0 {
			a.known, a.entered, a.inside = true, uint64(entered), collOp(pong[i][2])
		}
	}
	return answers
}
