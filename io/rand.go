package io

import "math/bits"

// The deterministic mixing and random streams every generator of prism
// derives its content, offsets and orders from. They are written out here,
// not taken from math/rand, so that a dataset, a checkpoint or an offset
// sequence is the same on every machine and every Go version, and a reader
// can recompute what a writer wrote.

// Mix64 is the splitmix64 finalizer: a bijection whose every output bit
// depends on every input bit.
func Mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Mix3 mixes three words into one (a key from seed, stream and index).
func Mix3(a, b, c uint64) uint64 {
	return Mix64(Mix64(Mix64(a)+b+0x9e3779b97f4a7c15) + c)
}

// PCG is the PCG-XSL-RR 128/64 generator. The zero value is a valid
// stream; seed it by setting Hi and Lo.
type PCG struct{ Hi, Lo uint64 }

// Next returns the next 64 random bits.
func (p *PCG) Next() uint64 {
	const mulHi, mulLo = 2549297995355413924, 4865540595714422341
	const incHi, incLo = 6364136223846793005, 1442695040888963407
	hi, lo := bits.Mul64(p.Lo, mulLo)
	hi += p.Hi*mulLo + p.Lo*mulHi
	lo, c := bits.Add64(lo, incLo, 0)
	hi, _ = bits.Add64(hi, incHi, c)
	p.Lo, p.Hi = lo, hi
	x := hi ^ lo
	rot := hi >> 58
	return bits.RotateLeft64(x, -int(rot))
}

// Below returns a number in [0, n), n > 0, without modulo bias (Lemire's
// multiply with rejection).
func (p *PCG) Below(n uint64) uint64 {
	hi, lo := bits.Mul64(p.Next(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(p.Next(), n)
		}
	}
	return hi
}

// Float returns a number in [0, 1) with 53 random bits.
func (p *PCG) Float() float64 { return float64(p.Next()>>11) / (1 << 53) }
