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
// prism_comm_split and prism_comm_split_shared report MPI_COMM_NULL through
// *isnull rather than a sentinel handle: Fortran handles may be any int.
static int prism_comm_split(int h, int color, int key, int *out, int *isnull) {
	MPI_Comm c;
	int rc = MPI_Comm_split(prism_comm(h), color, key, &c);
	*isnull = rc != MPI_SUCCESS || c == MPI_COMM_NULL;
	if (!*isnull) *out = (int)MPI_Comm_c2f(c);
	return rc;
}
static int prism_comm_split_shared(int h, int *out, int *isnull) {
	MPI_Comm c;
	int rc = MPI_Comm_split_type(prism_comm(h), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &c);
	*isnull = rc != MPI_SUCCESS || c == MPI_COMM_NULL;
	if (!*isnull) *out = (int)MPI_Comm_c2f(c);
	return rc;
}

static int prism_barrier(int h) { return MPI_Barrier(prism_comm(h)); }
static int prism_allreduce(int h, void *buf, int n, int dt, int op) {
	return MPI_Allreduce(MPI_IN_PLACE, buf, n, prism_dt(dt), prism_op(op), prism_comm(h));
}
static int prism_reduce(int h, void *buf, int n, int dt, int op, int root, int isroot) {
	if (isroot)
		return MPI_Reduce(MPI_IN_PLACE, buf, n, prism_dt(dt), prism_op(op), root, prism_comm(h));
	return MPI_Reduce(buf, NULL, n, prism_dt(dt), prism_op(op), root, prism_comm(h));
}
static int prism_bcast(int h, void *buf, int n, int dt, int root) {
	return MPI_Bcast(buf, n, prism_dt(dt), root, prism_comm(h));
}
static int prism_gather(int h, void *sbuf, int n, int dt, void *rbuf, int root) {
	return MPI_Gather(sbuf, n, prism_dt(dt), rbuf, n, prism_dt(dt), root, prism_comm(h));
}
static int prism_gatherv(int h, void *sbuf, int n, void *rbuf, int *counts, int *displs, int root) {
	return MPI_Gatherv(sbuf, n, MPI_BYTE, rbuf, counts, displs, MPI_BYTE, root, prism_comm(h));
}

// Alerts (see alert.go's Alerter) travel on a private duplicate of each
// communicator, so they can never match collective traffic, as two int64:
// the hash of the tag and the sender's world rank. Buffers MPI keeps using
// after a nonblocking call returns live in C memory (cgo forbids C from
// keeping Go pointers).
enum { PRISM_ALERT_TAG = 0x5052, PRISM_ALERT_WORDS = 2 };

static int prism_comm_dup(int h, int *out) {
	MPI_Comm c;
	int rc = MPI_Comm_dup(prism_comm(h), &c);
	if (rc == MPI_SUCCESS) *out = (int)MPI_Comm_c2f(c);
	return rc;
}

// prism_arecv is one posted alert receive.
typedef struct {
	MPI_Request req;
	int64_t msg[PRISM_ALERT_WORDS];
} prism_arecv;

static prism_arecv *prism_arecv_new(void) {
	prism_arecv *r = calloc(1, sizeof *r);
	if (r) r->req = MPI_REQUEST_NULL;
	return r;
}
static void prism_arecv_free(prism_arecv *r) { free(r); }
static int prism_arecv_post(int h, prism_arecv *r) {
	return MPI_Irecv(r->msg, PRISM_ALERT_WORDS, MPI_INT64_T, MPI_ANY_SOURCE, PRISM_ALERT_TAG, prism_comm(h), &r->req);
}
static int prism_arecv_pending(prism_arecv *r) { return r->req != MPI_REQUEST_NULL; }
// prism_arecv_test sets *flag when a message arrived (the request is then
// complete and MPI_REQUEST_NULL).
static int prism_arecv_test(prism_arecv *r, int *flag) {
	return MPI_Test(&r->req, flag, MPI_STATUS_IGNORE);
}
// prism_arecv_cancel withdraws a pending receive and waits until MPI is done
// with it; *received says that a message matched it before the cancel did.
static int prism_arecv_cancel(prism_arecv *r, int *received) {
	*received = 0;
	if (r->req == MPI_REQUEST_NULL) return MPI_SUCCESS;
	int rc = MPI_Cancel(&r->req);
	if (rc != MPI_SUCCESS) return rc;
	MPI_Status st;
	rc = MPI_Wait(&r->req, &st);
	if (rc != MPI_SUCCESS) return rc;
	int cancelled = 0;
	rc = MPI_Test_cancelled(&st, &cancelled);
	*received = rc == MPI_SUCCESS && !cancelled;
	return rc;
}

// prism_asend is one alert sent to every other rank: the message and the
// requests of its sends, kept until they complete.
typedef struct {
	int n;
	int64_t msg[PRISM_ALERT_WORDS];
	MPI_Request reqs[];
} prism_asend;

// prism_alert_send starts an MPI_Isend of (hash, world) to every rank of h
// but rank; it never blocks. *out is NULL only if malloc failed.
static int prism_alert_send(int h, int64_t hash, int64_t world, int rank, int size, prism_asend **out) {
	prism_asend *s = malloc(sizeof *s + (size_t)size * sizeof(MPI_Request));
	*out = s;
	if (!s) return MPI_ERR_NO_MEM;
	s->n = 0;
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

// prism_alert_drain receives every alert that has arrived on h and not been
// received, so none is left pending when h is freed; *n counts them.
static int prism_alert_drain(int h, int *n) {
	MPI_Comm c = prism_comm(h);
	*n = 0;
	for (;;) {
		int flag = 0;
		MPI_Status st;
		int rc = MPI_Iprobe(MPI_ANY_SOURCE, PRISM_ALERT_TAG, c, &flag, &st);
		if (rc != MPI_SUCCESS || !flag) return rc;
		int64_t msg[PRISM_ALERT_WORDS];
		rc = MPI_Recv(msg, PRISM_ALERT_WORDS, MPI_INT64_T, st.MPI_SOURCE, PRISM_ALERT_TAG, c, MPI_STATUS_IGNORE);
		if (rc != MPI_SUCCESS) return rc;
		(*n)++;
	}
}
*/
import "C"

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"runtime"
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
// an *MPIError instead of aborting the job. Collectives check their context
// before they start, but an MPI call in progress cannot be cancelled: a
// collective that some rank never joins blocks until the job is aborted
// (use Abort, or let mpirun/the scheduler kill the job).
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
	// subs are the communicators from Split not closed yet: closing the
	// world stops their alert watchers before MPI_Finalize.
	subs map[*MPI]struct{}
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

	w := &MPI{h: C.prism_world(), world: true}
	if err := w.setup(); err != nil {
		if s.owned {
			s.finalized.Store(true)
			s.finalizeOnLockedThread()
		}
		return nil, err
	}
	w.host = processorName()
	s.world = w
	return w, nil
}

// initOnLockedThread runs MPI_Init_thread on a goroutine locked to its OS
// thread, which then waits to run MPI_Finalize on that same thread: the MPI
// standard wants Finalize called by the thread that initialized MPI, and Go
// gives no other way to guarantee a thread across calls.
func (s *mpiProcess) initOnLockedThread() error {
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
		s.finalizeOnLockedThread()
		return threadLevelError(r.provided)
	}
	return nil
}

// finalizeOnLockedThread runs MPI_Finalize on the thread that initialized
// MPI. The caller holds mpiState.mu and has set finalized.
func (s *mpiProcess) finalizeOnLockedThread() error {
	reply := make(chan error)
	s.finalize <- reply
	return <-reply
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

// setup makes m's MPI failures return instead of abort, and caches rank,
// size and local rank: they never change, and the local rank costs a
// collective (MPI_Comm_split_type) that must not run at every call.
func (m *MPI) setup() error {
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
	var shm, isnull C.int
	if err := mpiCheck("MPI_Comm_split_type", C.prism_comm_split_shared(m.h, &shm, &isnull)); err != nil {
		return err
	}
	if isnull != 0 {
		return errors.New("spmd: mpi: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) returned MPI_COMM_NULL")
	}
	var local C.int
	err := mpiCheck("MPI_Comm_rank", C.prism_comm_rank(shm, &local))
	if ferr := mpiCheck("MPI_Comm_free", C.prism_comm_free(shm)); err == nil {
		err = ferr
	}
	if err != nil {
		return err
	}
	// The alert communicator comes last, so that nothing can fail after it
	// exists and leak it.
	var ah C.int
	if err := mpiCheck("MPI_Comm_dup", C.prism_comm_dup(m.h, &ah)); err != nil {
		return err
	}
	if err := mpiCheck("MPI_Comm_set_errhandler", C.prism_set_errors_return(ah)); err != nil {
		C.prism_comm_free(ah)
		return err
	}
	m.ah = ah
	m.rank, m.size, m.localRank = int(rank), int(size), int(local)
	if m.world {
		m.worldRank = m.rank
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

// LocalRank is the rank among this communicator's ranks that share memory
// with this one (MPI_COMM_TYPE_SHARED, i.e. the same host), computed once
// when the communicator was made.
func (m *MPI) LocalRank() int { return m.localRank }

// Host is MPI_Get_processor_name (os.Hostname if MPI cannot tell).
func (m *MPI) Host() string { return m.host }

// Kind is "mpi", as the manifest records it.
func (m *MPI) Kind() string { return "mpi" }

// begin is the common entry check of collectives: a cancelled context, or a
// communicator that no longer exists, fails before any MPI call is made.
func (m *MPI) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.closed.Load() || mpiState.finalized.Load() {
		return errMPIClosed
	}
	return nil
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

// Barrier is MPI_Barrier.
func (m *MPI) Barrier(ctx context.Context) error {
	if err := m.begin(ctx); err != nil {
		return err
	}
	return mpiCheck("MPI_Barrier", C.prism_barrier(m.h))
}

// AllreduceInt64 is MPI_Allreduce in place on MPI_INT64_T (not MPI_LONG,
// whose size depends on the platform). An empty v makes no MPI call.
func (m *MPI) AllreduceInt64(ctx context.Context, op Op, v []int64) error {
	if err := m.begin(ctx); err != nil {
		return err
	}
	if len(v) == 0 {
		return nil
	}
	return m.allreduce(op, unsafe.Pointer(&v[0]), len(v), C.PRISM_INT64)
}

// AllreduceFloat64 is MPI_Allreduce in place on MPI_DOUBLE. An empty v makes
// no MPI call.
func (m *MPI) AllreduceFloat64(ctx context.Context, op Op, v []float64) error {
	if err := m.begin(ctx); err != nil {
		return err
	}
	if len(v) == 0 {
		return nil
	}
	return m.allreduce(op, unsafe.Pointer(&v[0]), len(v), C.PRISM_DOUBLE)
}

func (m *MPI) allreduce(op Op, p unsafe.Pointer, n int, dt C.int) error {
	o, err := mpiOp(op)
	if err != nil {
		return err
	}
	cn, err := mpiCount("MPI_Allreduce", n)
	if err != nil {
		return err
	}
	return mpiCheck("MPI_Allreduce", C.prism_allreduce(m.h, p, cn, dt, o))
}

// ReduceInt64 is MPI_Reduce on MPI_INT64_T, in place at root (MPI_IN_PLACE)
// so no second buffer is allocated for large histograms. Non-root v is left
// unchanged. An empty v makes no MPI call.
func (m *MPI) ReduceInt64(ctx context.Context, root int, op Op, v []int64) error {
	if err := m.begin(ctx); err != nil {
		return err
	}
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
	n, err := mpiCount("MPI_Reduce", len(v))
	if err != nil {
		return err
	}
	isRoot := C.int(0)
	if root == m.rank {
		isRoot = 1
	}
	return mpiCheck("MPI_Reduce", C.prism_reduce(m.h, unsafe.Pointer(&v[0]), n, C.PRISM_INT64, o, C.int(root), isRoot))
}

// Gather collects every rank's b on root, indexed by rank (nil elsewhere).
// Lengths may differ, including 0. It costs three MPI collectives: the
// lengths are gathered (MPI_Gather), root broadcasts whether they fit MPI's
// int counts (so an oversized gather fails on every rank instead of leaving
// the others blocked), then the bytes follow (MPI_Gatherv). The slices
// returned on root share one buffer but are capped, so appending to one
// never overwrites another.
func (m *MPI) Gather(ctx context.Context, root int, b []byte) ([][]byte, error) {
	if err := m.begin(ctx); err != nil {
		return nil, err
	}
	if err := checkRoot(root, m.size); err != nil {
		return nil, err
	}
	isRoot := root == m.rank

	mine := int64(len(b))
	var lens []int64
	var lensPtr unsafe.Pointer
	if isRoot {
		lens = make([]int64, m.size)
		lensPtr = unsafe.Pointer(&lens[0])
	}
	if err := mpiCheck("MPI_Gather", C.prism_gather(m.h, unsafe.Pointer(&mine), 1, C.PRISM_INT64, lensPtr, C.int(root))); err != nil {
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
	if err := mpiCheck("MPI_Bcast", C.prism_bcast(m.h, unsafe.Pointer(&verdict), 1, C.PRISM_INT64, C.int(root))); err != nil {
		return nil, err
	}
	switch {
	case verdict > 0:
		return nil, fmt.Errorf("spmd: mpi: gather: rank %d's piece exceeds MPI's count limit of %d bytes", verdict-1, math.MaxInt32)
	case verdict < 0:
		return nil, fmt.Errorf("spmd: mpi: gather: total exceeds MPI's count limit of %d bytes", math.MaxInt32)
	}

	var sendPtr unsafe.Pointer
	if len(b) > 0 {
		sendPtr = unsafe.Pointer(&b[0])
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
		if total > 0 {
			buf = make([]byte, total)
			recvPtr = unsafe.Pointer(&buf[0])
		}
	}
	if err := mpiCheck("MPI_Gatherv", C.prism_gatherv(m.h, sendPtr, C.int(len(b)), recvPtr, (*C.int)(countsPtr), (*C.int)(displsPtr), C.int(root))); err != nil {
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
// on every rank alike), then the bytes if there are any.
func (m *MPI) Bcast(ctx context.Context, root int, b []byte) ([]byte, error) {
	if err := m.begin(ctx); err != nil {
		return nil, err
	}
	if err := checkRoot(root, m.size); err != nil {
		return nil, err
	}
	isRoot := root == m.rank
	var n int64
	if isRoot {
		n = int64(len(b))
	}
	if err := mpiCheck("MPI_Bcast", C.prism_bcast(m.h, unsafe.Pointer(&n), 1, C.PRISM_INT64, C.int(root))); err != nil {
		return nil, err
	}
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
	if err := mpiCheck("MPI_Bcast", C.prism_bcast(m.h, unsafe.Pointer(&out[0]), C.int(n), C.PRISM_BYTE, C.int(root))); err != nil {
		return nil, err
	}
	return out, nil
}

// Split is MPI_Comm_split: ranks with the same color form a communicator,
// ordered by key then old rank. Undefined maps to MPI_UNDEFINED and yields a
// nil Comm. Other colors must be >= 0 (MPI rejects negative ones with an
// *MPIError); color and key must fit in an int32. The new communicator's
// local ranks are computed here, a collective on it.
func (m *MPI) Split(ctx context.Context, color, key int) (Comm, error) {
	if err := m.begin(ctx); err != nil {
		return nil, err
	}
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
	var h, isnull C.int
	if err := mpiCheck("MPI_Comm_split", C.prism_comm_split(m.h, c, C.int(key), &h, &isnull)); err != nil {
		return nil, err
	}
	if isnull != 0 {
		return nil, nil // a nil interface, not a typed nil *MPI
	}
	sub := &MPI{h: h, host: m.host, worldRank: m.worldRank}
	if err := sub.setup(); err != nil {
		C.prism_comm_free(h)
		return nil, err
	}
	s := &mpiState
	s.mu.Lock()
	if s.subs == nil {
		s.subs = map[*MPI]struct{}{}
	}
	s.subs[sub] = struct{}{}
	s.mu.Unlock()
	return sub, nil
}

// Abort is MPI_Abort on MPI_COMM_WORLD, whatever communicator it is called
// on: the whole job goes down with code (mpirun exits non-zero). It does not
// return; should MPI_Abort return (or MPI be finalized), the process exits.
func (m *MPI) Abort(code int) {
	if !mpiState.finalized.Load() {
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
func (m *MPI) Close() error {
	s := &mpiState
	if !m.world {
		if !m.closed.CompareAndSwap(false, true) {
			return nil
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.subs, m)
		if s.finalized.Load() {
			return nil
		}
		m.closeAlerts()
		return mpiCheck("MPI_Comm_free", C.prism_comm_free(m.h))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !m.closed.CompareAndSwap(false, true) {
		return nil
	}
	// Sub-communicators left open keep their handles, but no goroutine of
	// theirs may call MPI from now on.
	for sub := range s.subs {
		sub.stopAlerts()
	}
	s.subs = nil
	m.closeAlerts()
	if !s.owned {
		return nil
	}
	s.finalized.Store(true)
	return s.finalizeOnLockedThread()
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
				if C.prism_arecv_post(m.ah, r) != C.PRISM_SUCCESS {
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
