//go:build linux

package uring

import (
	"errors"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	offSQRing = 0
	offCQRing = 0x8000000
	offSQEs   = 0x10000000

	featSingleMmap = 1 << 0

	enterGetEvents = 1 << 0

	registerBuffers     = 0
	registerFiles       = 2
	registerEnableRings = 12

	setupCoopTaskrun  = 1 << 8
	setupRDisabled    = 1 << 6
	setupSingleIssuer = 1 << 12
	setupDeferTaskrun = 1 << 13
)

// setupFlags are tried in order until the kernel takes one. The first is
// fio's choice on current kernels: one task submits and reaps
// (SINGLE_ISSUER), and completions are processed when it waits for them
// instead of by interrupting it (DEFER_TASKRUN, 6.1+); the ring starts
// disabled so that Setup may register buffers and files from any thread
// and the loop's locked thread claims it with Enable. COOP_TASKRUN
// (5.19+) alone keeps the no-IPI part; 0 works on every kernel since 5.1.
var setupFlags = []uint32{setupSingleIssuer | setupDeferTaskrun | setupCoopTaskrun | setupRDisabled, setupCoopTaskrun, 0}

// params is struct io_uring_params.
type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sqOff                                                                  sqOffsets
	cqOff                                                                  cqOffsets
}

type sqOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type cqOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// Ring is one io_uring instance, driven by one goroutine.
type Ring struct {
	fd                int
	sqMem, cqMem, sqe []byte

	sqHead, sqTail *uint32
	sqMask         uint32
	sqEntries      uint32
	cqHead, cqTail *uint32
	cqMask         uint32
	sqes           unsafe.Pointer // [sqEntries]SQE
	cqes           unsafe.Pointer // [cqEntries]CQE

	tail    uint32 // local SQ tail: SQEs handed out by Get
	pending uint32 // handed out but not yet submitted

	flags    uint32 // the setup flags the kernel took
	disabled bool   // created R_DISABLED and not yet Enabled
	enters   int64  // io_uring_enter calls made, EINTR retries included
}

// setupHook, when a test sets it, replaces io_uring_setup's result, so the
// fallback path is tested on kernels that allow io_uring.
var setupHook func() error

// SetSetupHookForTest makes every New fail with err (nil restores the
// real syscall). Only tests call it.
func SetSetupHookForTest(err error) {
	if err == nil {
		setupHook = nil
		return
	}
	setupHook = func() error { return err }
}

func isPerm(err error) bool  { return errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) }
func isNoSys(err error) bool { return errors.Is(err, unix.ENOSYS) }

// New sets up a ring with room for entries submissions (rounded up to a
// power of two by the kernel) and twice as many completions.
func New(entries uint32) (*Ring, error) {
	if setupHook != nil {
		if err := setupHook(); err != nil {
			return nil, &SetupError{Errno: err, Disabled: readDisabled()}
		}
	}
	var p params
	var fd uintptr
	var errno unix.Errno
	for _, f := range setupFlags {
		p = params{flags: f}
		fd, _, errno = unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
		if errno != unix.EINVAL {
			break
		}
	}
	if errno != 0 {
		return nil, &SetupError{Errno: errno, Disabled: readDisabled()}
	}
	r := &Ring{fd: int(fd), flags: p.flags, disabled: p.flags&setupRDisabled != 0}
	if err := r.mmap(&p); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

func (r *Ring) mmap(p *params) error {
	sqSize := int(p.sqOff.array) + int(p.sqEntries)*4
	cqSize := int(p.cqOff.cqes) + int(p.cqEntries)*int(unsafe.Sizeof(CQE{}))
	single := p.features&featSingleMmap != 0
	if single {
		sqSize = max(sqSize, cqSize)
	}
	var err error
	r.sqMem, err = unix.Mmap(r.fd, offSQRing, sqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return errors.New("io_uring: mmap of the submission ring: " + err.Error())
	}
	if single {
		r.cqMem = r.sqMem
	} else if r.cqMem, err = unix.Mmap(r.fd, offCQRing, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return errors.New("io_uring: mmap of the completion ring: " + err.Error())
	}
	r.sqe, err = unix.Mmap(r.fd, offSQEs, int(p.sqEntries)*int(unsafe.Sizeof(SQE{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return errors.New("io_uring: mmap of the SQE array: " + err.Error())
	}
	u32 := func(mem []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }
	r.sqHead, r.sqTail = u32(r.sqMem, p.sqOff.head), u32(r.sqMem, p.sqOff.tail)
	r.sqMask, r.sqEntries = *u32(r.sqMem, p.sqOff.ringMask), *u32(r.sqMem, p.sqOff.ringEntries)
	r.cqHead, r.cqTail = u32(r.cqMem, p.cqOff.head), u32(r.cqMem, p.cqOff.tail)
	r.cqMask = *u32(r.cqMem, p.cqOff.ringMask)
	r.sqes = unsafe.Pointer(&r.sqe[0])
	r.cqes = unsafe.Pointer(&r.cqMem[p.cqOff.cqes])
	// The indirection array maps ring slot i to SQE i, once: Get hands out
	// SQEs in ring order, so it never changes.
	for i := uint32(0); i < r.sqEntries; i++ {
		*u32(r.sqMem, p.sqOff.array+4*i) = i
	}
	r.tail = atomic.LoadUint32(r.sqTail)
	return nil
}

// SingleIssuer reports whether only one thread may submit: then the
// caller locks its goroutine to a thread (runtime.LockOSThread) and calls
// Enable from it before the first Enter.
func (r *Ring) SingleIssuer() bool { return r.flags&setupSingleIssuer != 0 }

// Enable starts a ring created disabled, making the calling thread its
// only submitter; it does nothing on a ring already enabled.
func (r *Ring) Enable() error {
	if !r.disabled {
		return nil
	}
	if err := r.register(registerEnableRings, nil, 0); err != nil {
		return err
	}
	r.disabled = false
	return nil
}

// Entries is the submission queue's size.
func (r *Ring) Entries() int { return int(r.sqEntries) }

// Get returns the next free SQE, zeroed, or nil when the submission queue
// is full (Enter first).
func (r *Ring) Get() *SQE {
	if r.tail-atomic.LoadUint32(r.sqHead) >= r.sqEntries {
		return nil
	}
	s := (*SQE)(unsafe.Add(r.sqes, uintptr(r.tail&r.sqMask)*unsafe.Sizeof(SQE{})))
	*s = SQE{}
	r.tail++
	r.pending++
	return s
}

// Enter publishes every SQE handed out since the last Enter and waits
// until at least wait completions are ready (0: do not wait), in one
// io_uring_enter. It returns the number the kernel consumed. EINTR is
// retried; the error is a bare Errno, so nothing is allocated.
func (r *Ring) Enter(wait uint32) (int, error) {
	atomic.StoreUint32(r.sqTail, r.tail) // release: the SQEs are written
	flags := uintptr(0)
	if wait > 0 {
		flags = enterGetEvents
	}
	for {
		n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(r.pending), uintptr(wait), flags, 0, 0)
		r.enters++
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		r.pending -= uint32(n)
		return int(n), nil
	}
}

// Enters is how many io_uring_enter calls the ring has made: the syscall
// cost per request that tests and the bench compare with fio's.
func (r *Ring) Enters() int64 { return r.enters }

// Peek returns the oldest unreaped completion, or nil. It stays valid
// until Advance.
func (r *Ring) Peek() *CQE {
	head := *r.cqHead // only this goroutine writes it
	if head == atomic.LoadUint32(r.cqTail) {
		return nil
	}
	return (*CQE)(unsafe.Add(r.cqes, uintptr(head&r.cqMask)*unsafe.Sizeof(CQE{})))
}

// Advance frees the completion Peek returned, for the kernel to reuse.
func (r *Ring) Advance() { atomic.StoreUint32(r.cqHead, *r.cqHead+1) }

// RegisterBuffers pins bufs for OpReadFixed/OpWriteFixed; BufIndex names
// one by its position.
func (r *Ring) RegisterBuffers(bufs [][]byte) error {
	iov := make([]unix.Iovec, len(bufs))
	for i, b := range bufs {
		iov[i].Base = &b[0]
		iov[i].SetLen(len(b))
	}
	return r.register(registerBuffers, unsafe.Pointer(&iov[0]), len(iov))
}

// RegisterFiles makes fds addressable by index with SqeFixedFile, which
// saves the kernel a file-table lookup and reference per request.
func (r *Ring) RegisterFiles(fds []int) error {
	f := make([]int32, len(fds))
	for i, fd := range fds {
		f[i] = int32(fd)
	}
	return r.register(registerFiles, unsafe.Pointer(&f[0]), len(f))
}

func (r *Ring) register(op uintptr, arg unsafe.Pointer, n int) error {
	for {
		_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), op, uintptr(arg), uintptr(n), 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return errno
		}
		return nil
	}
}

// Close unmaps the rings and closes the ring's descriptor; the kernel
// cancels whatever is still in flight.
func (r *Ring) Close() error {
	if r.sqe != nil {
		_ = unix.Munmap(r.sqe)
	}
	if r.cqMem != nil && (r.sqMem == nil || &r.cqMem[0] != &r.sqMem[0]) {
		_ = unix.Munmap(r.cqMem)
	}
	if r.sqMem != nil {
		_ = unix.Munmap(r.sqMem)
	}
	r.sqe, r.cqMem, r.sqMem = nil, nil, nil
	if r.fd >= 0 {
		err := unix.Close(r.fd)
		r.fd = -1
		return err
	}
	return nil
}

// probeByte gives the probe's zero-length buffer an address: the kernel
// touches no byte of it.
var probeByte [1]byte

// Punts probes whether this kernel hands every read (write = false) or
// every write of fd to an io-wq worker thread instead of doing it inline
// at submission. It submits one zero-length request of that kind with
// RWF_NOWAIT through a fresh ring (from a locked thread, as a
// single-issuer ring wants). With RWF_NOWAIT the kernel fails a request
// it would punt instead of punting it: a file without FMODE_NOWAIT
// (tmpfs) fails with EOPNOTSUPP, a buffered write to a filesystem without
// FOP_BUFFER_WASYNC (ext4) with EAGAIN, and a request it does inline
// completes with 0. Zero bytes: nothing is read into memory, nothing
// written, no data or timestamp changes, and what the page cache holds
// does not matter, so the answer is the same on every call. It cannot
// see punts that depend on the request (a direct write that must
// allocate or convert blocks, a lock another writer holds): those send
// some requests to io-wq, not every one.
func Punts(fd int, write bool) (Punt, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r, err := New(2)
	if err != nil {
		return Punt{}, err
	}
	defer r.Close()
	if err := r.Enable(); err != nil {
		return Punt{}, err
	}
	op := uint8(OpRead)
	if write {
		op = OpWrite
	}
	s := r.Get()
	s.PrepRW(op, fd, probeByte[:0], 0)
	s.OpFlags = unix.RWF_NOWAIT
	if _, err := r.Enter(1); err != nil {
		return Punt{}, err
	}
	c := r.Peek()
	if c == nil {
		return Punt{}, errors.New("io_uring: the probe's completion is missing")
	}
	res := c.Res
	r.Advance()
	if res >= 0 {
		return Punt{}, nil
	}
	e := unix.Errno(-res)
	return Punt{Punts: e == unix.EAGAIN || e == unix.EOPNOTSUPP, Errno: e}, nil
}
