package io

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/bits"
	mrand "math/rand/v2"
	"strings"
)

// Data kinds a Generator produces; plans name them in their data key.
const (
	// GenRandom is fast non-cryptographic pseudo-random data (wyrand) under
	// a seed drawn from crypto/rand, so two runs never write the same
	// bytes; Generator.Seed tells what it drew, for verification.
	GenRandom = "random"
	// GenDeterministic is reproducible everywhere and cryptographically
	// strong: each block is the ChaCha8 stream keyed by SHA-256 of the
	// seed, stream and block index, so no storage system can predict or
	// deduplicate it, and a dataset written on one machine verifies on any
	// other.
	GenDeterministic = "deterministic"
	// GenSeededRandom is GenRandom with an explicit seed: reproducible and
	// as fast, but not cryptographically strong.
	GenSeededRandom = "seeded_random"
	// GenZero is all zero bytes (storage that compresses or detects zero
	// blocks will look very fast).
	GenZero = "zero"
	// GenPattern repeats GenConfig.Pattern from the start of every block.
	GenPattern = "pattern"
)

// GenKinds lists the data kinds.
var GenKinds = []string{GenRandom, GenDeterministic, GenSeededRandom, GenZero, GenPattern}

// DefaultGenBlock is the block size of a Generator whose config gives none.
const DefaultGenBlock = 4096

// compressChunk is the unit inside which Compressible splits random bytes
// from zeros. It is small (like fio's buffer_compress_chunk) so that the
// ratio holds for storage that compresses in 4-128 KiB records, not only
// for whole files.
const compressChunk = 4096

// GenConfig describes the content a Generator produces.
type GenConfig struct {
	Kind string // one of GenKinds
	// Seed selects the content of deterministic and seeded_random data
	// (and of the dedupe choices of every kind); random draws its own.
	Seed uint64
	// Pattern is the byte pattern of GenPattern.
	Pattern []byte
	// Compressible is the percentage (0..100) of every 4 KiB chunk that is
	// zeros rather than random bytes, as fio's buffer_compress_percentage.
	// It applies to the random kinds; zero and pattern data are fully
	// compressible already.
	Compressible int
	// Dedupe is the percentage (0..100) of blocks that repeat an earlier
	// block of the same stream, as fio's dedupe_percentage.
	Dedupe int
	// BlockSize is the unit of content identity and of dedupe (a write's
	// size, typically); DefaultGenBlock when 0.
	BlockSize int
}

// Validate checks c's values.
func (c GenConfig) Validate() error {
	known := false
	for _, k := range GenKinds {
		known = known || c.Kind == k
	}
	bad := func(field, format string, args ...any) error {
		return &GenConfigError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case !known:
		return bad("data", "unknown data kind %q (allowed: %s)", c.Kind, strings.Join(GenKinds, ", "))
	case c.Compressible < 0 || c.Compressible > 100:
		return bad("compressible", "compressible = %d out of range (0 .. 100)", c.Compressible)
	case c.Dedupe < 0 || c.Dedupe > 100:
		return bad("dedupe", "dedupe = %d out of range (0 .. 100)", c.Dedupe)
	case c.Compressible > 0 && (c.Kind == GenZero || c.Kind == GenPattern):
		return bad("compressible", "compressible applies to random, deterministic and seeded_random data; %s data is fully compressible already", c.Kind)
	case c.Kind == GenPattern && len(c.Pattern) == 0:
		return bad("pattern", "pattern data needs a non-empty pattern")
	case c.BlockSize < 0:
		return bad("bs", "negative generator block size %d", c.BlockSize)
	}
	return nil
}

// GenConfigError is a bad generator setting; Field names it as plans
// write it (data, compressible, dedupe, pattern, bs).
type GenConfigError struct {
	Field string
	Msg   string
}

func (e *GenConfigError) Error() string { return "io: " + e.Msg }

// Generator produces block contents that are a pure function of its
// config, a stream number and a block index, so that a reader can
// regenerate what a writer wrote and compare. A stream is an independent
// sequence of blocks: give each file its own (rank and file number, say).
// Filling is meant for Setup, before t0: it runs at a few GB/s, which is
// not free next to a fast device.
//
// The content for a given seed is part of prism's compatibility promise:
// datasets written by one version verify with the next.
//
// A Generator is not safe for concurrent use; Clone it per goroutine.
type Generator struct {
	cfg  GenConfig
	seed uint64
	cc   mrand.ChaCha8
	key  [8 * 4]byte // SHA-256 input, kept here so Fill does not allocate
}

// NewGenerator validates c and returns its Generator.
func NewGenerator(c GenConfig) (*Generator, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.BlockSize == 0 {
		c.BlockSize = DefaultGenBlock
	}
	c.Pattern = append([]byte(nil), c.Pattern...)
	g := &Generator{cfg: c, seed: c.Seed}
	if c.Kind == GenRandom {
		var b [8]byte
		_, _ = rand.Read(b[:]) // never fails on Linux 3.17+ (getrandom)
		g.seed = binary.LittleEndian.Uint64(b[:])
	}
	return g, nil
}

// Clone returns an independent Generator producing the same content.
func (g *Generator) Clone() *Generator {
	return &Generator{cfg: g.cfg, seed: g.seed}
}

// Seed returns the seed in use: the configured one, or the one a random
// generator drew.
func (g *Generator) Seed() uint64 { return g.seed }

// BlockSize returns the unit of content identity.
func (g *Generator) BlockSize() int { return g.cfg.BlockSize }

// Kind returns the data kind.
func (g *Generator) Kind() string { return g.cfg.Kind }

// Fill writes into buf the bytes of stream 0 starting at block blockIndex:
// blocks blockIndex, blockIndex+1, … as many as buf holds (a final partial
// block gets that block's first bytes).
func (g *Generator) Fill(buf []byte, blockIndex int64) { g.FillStream(buf, 0, blockIndex) }

// FillStream is Fill for a given stream.
func (g *Generator) FillStream(buf []byte, stream uint64, blockIndex int64) {
	bs := g.cfg.BlockSize
	for len(buf) > 0 {
		n := min(len(buf), bs)
		g.fillBlock(buf[:n], stream, g.Source(stream, blockIndex))
		buf = buf[n:]
		blockIndex++
	}
}

// Source returns the block whose content block carries: itself, or, for a
// dedupe block, an earlier block of the stream (never one that is itself a
// duplicate, so every duplicate points at original data). Block 0 is always
// original.
func (g *Generator) Source(stream uint64, block int64) int64 {
	if g.cfg.Dedupe == 0 {
		return block
	}
	for block > 0 {
		h := Mix3(g.seed^saltDedupe, stream, uint64(block))
		if h%100 >= uint64(g.cfg.Dedupe) {
			return block
		}
		block = int64(Mix64(h) % uint64(block))
	}
	return 0
}

// Salts keep the choices made from one seed independent of each other.
const (
	saltDedupe = 0x6465647570652121 // "dedupe!!"
	saltData   = 0x6461746121212121 // "data!!!!"
)

// fillBlock writes the first len(dst) bytes of block's own content.
func (g *Generator) fillBlock(dst []byte, stream uint64, block int64) {
	switch g.cfg.Kind {
	case GenZero:
		clear(dst)
		return
	case GenPattern:
		for i := 0; i < len(dst); {
			i += copy(dst[i:], g.cfg.Pattern)
		}
		return
	}
	var wy wyrand
	crypto := g.cfg.Kind == GenDeterministic
	if crypto {
		binary.LittleEndian.PutUint64(g.key[0:], saltData)
		binary.LittleEndian.PutUint64(g.key[8:], g.seed)
		binary.LittleEndian.PutUint64(g.key[16:], stream)
		binary.LittleEndian.PutUint64(g.key[24:], uint64(block))
		g.cc.Seed(sha256.Sum256(g.key[:]))
	} else {
		wy = wyrand(Mix3(g.seed^saltData, stream, uint64(block)))
	}
	// Each chunk: its random part, then zeros. The split depends on the
	// chunk's length in the full block, not in dst, so a shorter fill is
	// always a prefix of a longer one.
	bs := g.cfg.BlockSize
	for off := 0; off < len(dst); off += compressChunk {
		nominal := min(compressChunk, bs-off)
		random := nominal - nominal*g.cfg.Compressible/100
		c := dst[off:min(off+nominal, len(dst))]
		r := min(random, len(c))
		if crypto {
			_, _ = g.cc.Read(c[:r])
		} else {
			wy.fill(c[:r])
		}
		clear(c[r:])
	}
}

// wyrand is Wang Yi's wyrand: one 64×64→128 multiply per 8 bytes, passes
// BigCrush, and is what Go's runtime uses for its own fast random numbers.
type wyrand uint64

func (s *wyrand) next() uint64 {
	*s += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(uint64(*s), uint64(*s)^0xe7037ed1a0b428db)
	return hi ^ lo
}

// fill writes random bytes 8 at a time; a tail of fewer than 8 takes the
// first bytes of one more word.
func (s *wyrand) fill(b []byte) {
	st := uint64(*s) // a local, so the loop keeps the state in a register
	i := 0
	for ; i+8 <= len(b); i += 8 {
		st += 0xa0761d6478bd642f
		hi, lo := bits.Mul64(st, st^0xe7037ed1a0b428db)
		binary.LittleEndian.PutUint64(b[i:], hi^lo)
	}
	*s = wyrand(st)
	if i < len(b) {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], s.next())
		copy(b[i:], w[:])
	}
}

// ParsePattern reads a pattern as plans write it: "0x" followed by hex
// digits for bytes ("0xdeadbeef"), anything else as its literal bytes.
func ParsePattern(s string) ([]byte, error) {
	if h, ok := strings.CutPrefix(strings.ToLower(s), "0x"); ok {
		b, err := hex.DecodeString(h)
		if err != nil || len(b) == 0 {
			return nil, fmt.Errorf("io: bad hex pattern %q (write e.g. \"0xdeadbeef\", an even number of hex digits)", s)
		}
		return b, nil
	}
	if s == "" {
		return nil, fmt.Errorf("io: empty pattern")
	}
	return []byte(s), nil
}
