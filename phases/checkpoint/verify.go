package checkpoint

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"runtime/debug"

	"golang.org/x/sys/unix"

	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/ckpt"
)

// feed checks the fragments of one op's bytes b: literal bytes against
// what was written, byte for byte; tensor bytes into their fragment's
// CRC-32, combined per need in verify.
func (r *reader) feed(op *readOp, b []byte) error {
	for i := op.f0; i < op.f1; i++ {
		fr := &r.frags[i]
		part := b[fr.rel : fr.rel+fr.n]
		nd := &r.needs[fr.need]
		s := &r.l.Files[r.files[nd.slot]].Segs[nd.seg]
		if s.Piece >= 0 {
			fr.crc = crc32.ChecksumIEEE(part)
			continue
		}
		want := s.Lit[fr.at : fr.at+fr.n]
		if !bytes.Equal(part, want) {
			k := 0
			for k < len(part) && part[k] == want[k] {
				k++
			}
			return fmt.Errorf("%s: byte %d (header/metadata bytes [%d,%d)) is %#02x, written %#02x: the storage returned different bytes than were written",
				r.l.Files[r.files[nd.slot]].Name, s.Off+fr.at+int64(k), s.Off, s.Off+s.Len, part[k], want[k])
		}
	}
	return nil
}

// verify checks what Run read: from the arena or the mappings
// (deferred), then every tensor need's CRC-32, combined from its
// fragments', against the one computed at save time.
func (r *reader) verify(env *phases.Env) (err error) {
	if r.mode == modeMmap {
		defer r.unmap()
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer guardFault(env, &err)
	}
	if !r.inline {
		for i := range r.ops {
			op := &r.ops[i]
			var b []byte
			switch op.kind {
			case ropTouch:
				b = r.maps[op.slot][op.off : op.off+op.n]
			case ropRead, ropPread:
				b = r.arena[op.pos : op.pos+op.n]
			default:
				continue
			}
			if err := r.feed(op, b); err != nil {
				return env.Errorf("verify: %w", err)
			}
		}
	}
	for i := range r.needs {
		nd := &r.needs[i]
		s := r.l.Files[r.files[nd.slot]].Segs[nd.seg]
		if s.Piece < 0 {
			continue
		}
		var c uint32
		for k, fi := range nd.frags {
			if k == 0 {
				c = r.frags[fi].crc
			} else {
				c = ckpt.Combine(c, r.frags[fi].crc, r.frags[fi].n)
			}
		}
		if c != nd.want {
			pc := r.l.Pieces[s.Piece]
			t := r.l.Tensors[pc.Tensor]
			return env.Errorf("verify: tensor %s (bytes [%d,%d) of %d) in %s at offset %d: CRC-32 %08x, written %08x: the storage returned different bytes than were written",
				t.Name, pc.Lo+nd.lo, pc.Lo+nd.hi, t.Bytes(), r.l.Files[r.files[nd.slot]].Name, s.Off+nd.lo, c, nd.want)
		}
	}
	return nil
}

// guardFault turns a fault reading a mapping in verify into an error.
func guardFault(env *phases.Env, err *error) {
	if x := recover(); x != nil {
		if _, ok := x.(interface{ Addr() uintptr }); !ok {
			panic(x)
		}
		*err = env.Errorf("verify: %w", errFault)
	}
}

func (r *reader) unmap() {
	for i, m := range r.maps {
		if m != nil {
			unix.Munmap(m)
			r.maps[i] = nil
		}
	}
}
