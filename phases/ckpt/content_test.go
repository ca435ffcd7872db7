package ckpt

import (
	"bytes"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// pieceBytes produces a piece the slow way: chunk by chunk.
func pieceBytes(pl *Pool, key, gen uint64, n, chunk int64) []byte {
	out := make([]byte, 0, n)
	for off := int64(0); off < n; off += chunk {
		c := pl.Chunk(key, gen, off, min(chunk, n-off))
		out = append(out, c...)
		pl.Release()
	}
	return out
}

func TestCombine(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200; i++ {
		a := make([]byte, r.IntN(5000))
		b := make([]byte, r.IntN(70000))
		for j := range a {
			a[j] = byte(r.Uint32())
		}
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		want := crc32.ChecksumIEEE(append(append([]byte{}, a...), b...))
		if got := Combine(crc32.ChecksumIEEE(a), crc32.ChecksumIEEE(b), int64(len(b))); got != want {
			t.Fatalf("Combine(%d, %d bytes) = %08x, want %08x", len(a), len(b), got, want)
		}
	}
}

// TestPoolChecksum checks the algebraic CRC against the bytes, over lengths
// that wrap the pool several times, end inside a stamp, or are tiny, and
// chunkings that split stamps.
func TestPoolChecksum(t *testing.T) {
	pl := NewPool(7, 3*StampEvery, StampEvery)
	p, w := pl.Size()
	if p != 3*StampEvery || w != StampEvery {
		t.Fatalf("Size() = %d, %d", p, w)
	}
	lengths := []int64{0, 1, 7, 8, 9, 4095, 4096, 4097, 4100, 3 * 4096, 3*4096 + 3, 10*4096 + 5, 40000}
	for _, n := range lengths {
		for _, chunk := range []int64{4096, 1000, 3} {
			for key := uint64(0); key < 3; key++ {
				for gen := uint64(0); gen < 2; gen++ {
					b := pieceBytes(pl, key, gen, n, chunk)
					if int64(len(b)) != n {
						t.Fatalf("piece length %d, want %d", len(b), n)
					}
					if got, want := pl.Checksum(key, gen, n), crc32.ChecksumIEEE(b); got != want {
						t.Fatalf("Checksum(key %d, gen %d, n %d) = %08x, bytes say %08x (chunk %d)", key, gen, n, got, want, chunk)
					}
				}
			}
		}
	}
}

// TestPoolRestores: after Chunk and Release the pool is what it was, and a
// piece read in different chunkings is the same bytes.
func TestPoolRestores(t *testing.T) {
	pl := NewPool(1, 64<<10, 8<<10)
	before := append([]byte(nil), pl.buf...)
	a := pieceBytes(pl, 5, 9, 100<<10, 8<<10)
	b := pieceBytes(pl, 5, 9, 100<<10, 777)
	if !bytes.Equal(a, b) {
		t.Fatal("the same piece differs between chunkings")
	}
	if !bytes.Equal(before, pl.buf) {
		t.Fatal("Release did not restore the pool")
	}
}

// TestPoolUnique: no 4 KiB block repeats within a piece that wraps the pool
// many times, nor between generations.
func TestPoolUnique(t *testing.T) {
	pl := NewPool(3, 16<<10, 4<<10)
	seen := map[string]bool{}
	for gen := uint64(0); gen < 3; gen++ {
		b := pieceBytes(pl, 11, gen, 256<<10, 4<<10)
		for off := 0; off < len(b); off += StampEvery {
			k := string(b[off : off+StampEvery])
			if seen[k] {
				t.Fatalf("gen %d: block at %d repeats", gen, off)
			}
			seen[k] = true
		}
	}
}

func TestPoolAgreesAcrossInstances(t *testing.T) {
	a, b := NewPool(42, 1<<16, 1<<13), NewPool(42, 1<<16, 1<<13)
	if !bytes.Equal(pieceBytes(a, 1, 2, 30000, 8192), pieceBytes(b, 1, 2, 30000, 8192)) {
		t.Fatal("two pools with the same seed differ")
	}
}

func BenchmarkPoolChecksum(b *testing.B) {
	pl := NewPool(1, 64<<20, 4<<20)
	b.SetBytes(1 << 30)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pl.Checksum(uint64(i), 1, 1<<30)
	}
}

func BenchmarkPoolChunk(b *testing.B) {
	pl := NewPool(1, 64<<20, 4<<20)
	b.SetBytes(4 << 20)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pl.Chunk(1, 2, int64(i%100)*(4<<20), 4<<20)
		pl.Release()
	}
}
