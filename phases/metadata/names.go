package metadata

import (
	"strconv"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/phases"
)

// nameChunk is how many file names a metadata phase holds at once. A
// prepared name costs ~150 bytes (the kernel's NUL-terminated bytes, the
// string, the Name), so a phase of 1e8 files would hold 15 GB before its
// first op if it prepared them all; in chunks it holds ~10 MB whatever the
// count, and a count up to the chunk (every benchmark's) prepares its
// names in Setup as before.
const nameChunk = 1 << 16

// nameBytes is what one prepared name costs in memory, for the estimate.
const nameBytes = 160

// names are the file names prefix<i>, i < count, held a chunk at a time.
// Every loop walks them in increasing order, so each chunk is built once
// per pass.
type names struct {
	prefix string
	count  int
	lo     int        // index of chunk[0]
	chunk  []pio.Name // names lo .. lo+len(chunk)-1
}

// reset prepares names for prefix and count, building the first chunk.
func (ns *names) reset(prefix string, count int) {
	ns.prefix, ns.count, ns.chunk = prefix, count, nil
	if count > 0 {
		ns.fill(0)
	}
}

// at returns name i, building its chunk first when needed.
func (ns *names) at(i int) *pio.Name {
	if i < ns.lo || i >= ns.lo+len(ns.chunk) {
		ns.fill(i)
	}
	return &ns.chunk[i-ns.lo]
}

// next is at for a timed loop: building a chunk is charged to no op (the
// op clock restarts after it).
func (ns *names) next(i int, clk *phases.OpClock) *pio.Name {
	if i < ns.lo || i >= ns.lo+len(ns.chunk) {
		ns.fill(i)
		clk.Skip()
	}
	return &ns.chunk[i-ns.lo]
}

func (ns *names) fill(i int) {
	lo := i / nameChunk * nameChunk
	// A new slice, not the old one refilled: the stall watchdog may still
	// be reading the last op's name in it.
	chunk := make([]pio.Name, min(nameChunk, ns.count-lo))
	for j := range chunk {
		chunk[j] = pio.MustName(ns.prefix + strconv.Itoa(lo+j))
	}
	ns.lo, ns.chunk = lo, chunk
}

// memory is what one rank of a storm holds: a chunk of names and the data
// buffer.
func (c *metaConfig) memory() (int64, string) {
	return int64(min(c.Count, nameChunk))*nameBytes + int64(c.Size), "size"
}
