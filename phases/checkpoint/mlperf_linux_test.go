package checkpoint

import (
	"context"
	"os"
	"runtime/debug"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/prism-hpc/prism/phases/phasestest"
)

// TestMLPerfSetupPrefaultsReadBuffers: every process's read buffer is
// mapped when Setup returns (mincore), so the first load does not fault
// its pages in inside its duration, as it did (~1.7 ms over 8 processes
// of a scale 0.00002 checkpoint, docs/PERFORMANCE.md).
func TestMLPerfSetupPrefaultsReadBuffers(t *testing.T) {
	p := &mlperfCheckpoint{cfg: defaultMLPerfConfig()}
	p.cfg.Scale, p.cfg.NumWrite, p.cfg.NumRead, p.cfg.TimeBetween = 0.00002, 1, 1, 0
	env := phasestest.Env(t, "mlperf_checkpoint")
	ctx := context.Background()
	debug.FreeOSMemory() // the buffers come fresh from the OS, as after the engine's quiesceHeap
	if err := p.Setup(ctx, env); err != nil {
		t.Fatal(err)
	}
	defer p.Teardown(ctx, env)
	page := os.Getpagesize()
	for _, pr := range p.procs {
		b := pr.buf
		// mincore wants a page-aligned start: from b's first page boundary.
		skip := (page - int(uintptr(unsafe.Pointer(&b[0]))%uintptr(page))) % page
		span := b[skip:]
		if len(span) == 0 {
			continue
		}
		vec := make([]byte, (len(span)+page-1)/page)
		if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&span[0])), uintptr(len(span)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
			t.Fatal(e)
		}
		for i, v := range vec {
			if v&1 == 0 {
				t.Fatalf("process %d: page %d of %d of its read buffer is not mapped after Setup", pr.id, i, len(vec))
			}
		}
	}
}
