package ckpt

import (
	"encoding/binary"
	"math"
)

// A Python pickle writer that emits, opcode for opcode, what CPython's C
// pickler (_pickle.Pickler, Python 3.11) emits for the objects checkpoints
// hold: torch.save's data.pkl (protocol 2) and DCP's .metadata (protocol 4,
// pickle.dump's default). Byte equality matters because the files are
// compared with what real torch writes, so the pickler follows CPython's
// memo, batching and framing rules, and the caller models Python's object
// identity: a value that is the same Python object in two places is the
// same Go pointer (a *pyStr, *pyGlobal, *pyDict ...), which the memo
// refers back to (BINGET) instead of writing it again. Plain Go strings
// and pyTuples are fresh objects every time they appear.

// Value kinds (anything else panics: the callers build the trees).
type (
	// pyStr is a str object with identity (field names, which Python
	// interns, or a key that several objects share).
	pyStr struct{ s string }
	// pyTuple is a fresh tuple.
	pyTuple []any
	pyList  struct{ items []any }
	pyDict  struct{ keys, vals []any }
	// pyGlobal is a module attribute pickled by reference (a class, a
	// function, torch.float32). mod and name are string or *pyStr: in
	// protocol 4 they are pickled as str objects, and Python shares the
	// module name of classes from one module.
	pyGlobal struct{ mod, name any }
	// pyReduce is fn(*args), optionally followed by dict items (an
	// OrderedDict's entries) and a state set by BUILD.
	pyReduce struct {
		fn    *pyGlobal
		args  pyTuple
		items *pyDict // nil: none
		state any     // nil: no BUILD
	}
	// pyNewObj is object.__reduce_ex__'s copyreg.__newobj__ form for
	// cls() with a state (a dataclass's __dict__, or what __getstate__
	// returns; nil: an empty __dict__, no BUILD).
	pyNewObj struct {
		cls   *pyGlobal
		state any
	}
	// pyPersID is a persistent id (torch.save's storage references).
	pyPersID pyTuple
)

func str(s string) *pyStr { return &pyStr{s} }

// interned returns one shared *pyStr per value: Python's interned
// identifiers (attribute names, string literals in the same function).
type interned map[string]*pyStr

func (in interned) get(s string) *pyStr {
	if p, ok := in[s]; ok {
		return p
	}
	p := str(s)
	in[s] = p
	return p
}

const (
	pickleBatch     = 1000      // CPython's BATCHSIZE
	frameSizeTarget = 64 * 1024 // protocol 4 frames
	frameSizeMin    = 4
	frameHeader     = 9
)

type pickler struct {
	proto      int
	out        []byte
	memo       map[any]int
	frameStart int // protocol 4: where the open frame's header is reserved
}

// pickleDump is pickle.dumps(obj, proto) for proto 2 or 4.
func pickleDump(obj any, proto int) []byte {
	p := &pickler{proto: proto, memo: map[any]int{}}
	p.out = append(p.out, 0x80, byte(proto))
	if proto >= 4 {
		p.frameStart = len(p.out)
		p.out = append(p.out, make([]byte, frameHeader)...)
	}
	p.save(obj)
	p.out = append(p.out, '.')
	if proto >= 4 {
		p.commitFrame()
		// commitFrame reserved the next frame's header: drop it.
		p.out = p.out[:len(p.out)-frameHeader]
	}
	return p.out
}

// commitFrame closes the open frame (a FRAME opcode with its length, or
// no opcode when it is shorter than frameSizeMin) and opens the next.
func (p *pickler) commitFrame() {
	n := len(p.out) - p.frameStart - frameHeader
	if n >= frameSizeMin {
		p.out[p.frameStart] = 0x95
		binary.LittleEndian.PutUint64(p.out[p.frameStart+1:], uint64(n))
	} else {
		copy(p.out[p.frameStart:], p.out[p.frameStart+frameHeader:])
		p.out = p.out[:len(p.out)-frameHeader]
	}
	p.frameStart = len(p.out)
	p.out = append(p.out, make([]byte, frameHeader)...)
}

// boundary is where the pickler may end a frame: before it saves each
// object, a frame of frameSizeTarget bytes or more is committed (so the
// opcodes a container writes after its last element, SETITEMS or BUILD,
// stay in the frame).
func (p *pickler) boundary() {
	if p.proto >= 4 && len(p.out)-p.frameStart-frameHeader >= frameSizeTarget {
		p.commitFrame()
	}
}

func (p *pickler) op(b ...byte) { p.out = append(p.out, b...) }

// memoize records obj (a pointer, or nil for an anonymous object) at the
// next memo index: PUT opcodes in protocol 2, MEMOIZE in 4.
func (p *pickler) memoize(obj any) {
	i := len(p.memo)
	if obj == nil {
		obj = &i // a fresh key: nothing refers back to it
	}
	p.memo[obj] = i
	switch {
	case p.proto >= 4:
		p.op(0x94)
	case i < 256:
		p.op('q', byte(i))
	default:
		p.op('r')
		p.out = binary.LittleEndian.AppendUint32(p.out, uint32(i))
	}
}

// get writes a memo reference to obj if it has been pickled before.
func (p *pickler) get(obj any) bool {
	i, ok := p.memo[obj]
	if !ok {
		return false
	}
	if i < 256 {
		p.op('h', byte(i))
	} else {
		p.op('j')
		p.out = binary.LittleEndian.AppendUint32(p.out, uint32(i))
	}
	return true
}

func (p *pickler) save(v any) {
	p.boundary()
	p.saveValue(v)
}

func (p *pickler) saveValue(v any) {
	switch x := v.(type) {
	case nil:
		p.op('N')
	case bool:
		if x {
			p.op(0x88)
		} else {
			p.op(0x89)
		}
	case int:
		p.int(int64(x))
	case int64:
		p.int(x)
	case float64:
		p.op('G')
		p.out = binary.BigEndian.AppendUint64(p.out, math.Float64bits(x))
	case string:
		p.str(x)
		p.memoize(nil)
	case *pyStr:
		if !p.get(x) {
			p.str(x.s)
			p.memoize(x)
		}
	case pyTuple:
		p.tuple(x)
	case *pyList:
		if p.get(x) {
			return
		}
		p.op(']')
		p.memoize(x)
		p.list(x.items)
	case *pyDict:
		if p.get(x) {
			return
		}
		p.op('}')
		p.memoize(x)
		p.dictExact(x)
	case *pyGlobal:
		p.global(x)
	case *pyReduce:
		if p.get(x) {
			return
		}
		p.save(x.fn)
		p.save(x.args)
		p.op('R')
		p.memoize(x)
		if x.items != nil {
			p.dictIter(x.items)
		}
		if x.state != nil {
			p.save(x.state)
			p.op('b')
		}
	case *pyNewObj:
		if p.get(x) {
			return
		}
		p.save(x.cls)
		p.save(pyTuple{})
		p.op(0x81) // NEWOBJ
		p.memoize(x)
		if x.state != nil {
			p.save(x.state)
			p.op('b')
		}
	case pyPersID:
		p.save(pyTuple(x))
		p.op('Q') // BINPERSID
	default:
		panic("ckpt: pickler: unsupported value")
	}
}

// int is CPython's save_long: the shortest of BININT1, BININT2, BININT,
// then LONG1.
func (p *pickler) int(v int64) {
	switch {
	case v >= 0 && v < 1<<8:
		p.op('K', byte(v))
	case v >= 0 && v < 1<<16:
		p.op('M')
		p.out = binary.LittleEndian.AppendUint16(p.out, uint16(v))
	case v >= math.MinInt32 && v <= math.MaxInt32:
		p.op('J')
		p.out = binary.LittleEndian.AppendUint32(p.out, uint32(int32(v)))
	default:
		// Little-endian two's complement, as few bytes as keep the sign.
		var b []byte
		for u := uint64(v); ; u >>= 8 {
			b = append(b, byte(u))
			rest := int64(u) >> 8
			if (rest == 0 && b[len(b)-1]&0x80 == 0) || (rest == -1 && b[len(b)-1]&0x80 != 0) {
				break
			}
		}
		p.op(0x8a, byte(len(b)))
		p.op(b...)
	}
}

func (p *pickler) str(s string) {
	switch {
	case p.proto >= 4 && len(s) < 256:
		p.op(0x8c, byte(len(s)))
	default:
		p.op('X')
		p.out = binary.LittleEndian.AppendUint32(p.out, uint32(len(s)))
	}
	p.out = append(p.out, s...)
}

func (p *pickler) tuple(t pyTuple) {
	if len(t) == 0 {
		p.op(')')
		return
	}
	if len(t) <= 3 {
		for _, e := range t {
			p.save(e)
		}
		p.op(0x85 + byte(len(t)-1)) // TUPLE1..3
	} else {
		p.op('(')
		for _, e := range t {
			p.save(e)
		}
		p.op('t')
	}
	p.memoize(nil)
}

// list is batch_list_exact: one APPEND for a single item, else batches of
// MARK items APPENDS.
func (p *pickler) list(items []any) {
	if len(items) == 1 {
		p.save(items[0])
		p.op('a')
		return
	}
	for i := 0; i < len(items); {
		p.op('(')
		for n := 0; n < pickleBatch && i < len(items); n, i = n+1, i+1 {
			p.save(items[i])
		}
		p.op('e')
	}
}

// dictExact is batch_dict_exact (a dict's own items): one SETITEM for a
// single item, else batches of MARK pairs SETITEMS, with a trailing empty
// batch after a full one, as CPython writes it.
func (p *pickler) dictExact(d *pyDict) {
	n := len(d.keys)
	if n == 0 {
		return
	}
	if n == 1 {
		p.save(d.keys[0])
		p.save(d.vals[0])
		p.op('s')
		return
	}
	i := 0
	for {
		p.op('(')
		k := 0
		for ; k < pickleBatch && i < n; k, i = k+1, i+1 {
			p.save(d.keys[i])
			p.save(d.vals[i])
		}
		p.op('u')
		if k < pickleBatch {
			return
		}
	}
}

// dictIter is batch_dict (items from a reduce's iterator): batches of up
// to 1000 pairs, a batch of one written as SETITEM.
func (p *pickler) dictIter(d *pyDict) {
	for i := 0; i < len(d.keys); {
		end := min(i+pickleBatch, len(d.keys))
		if end-i == 1 {
			p.save(d.keys[i])
			p.save(d.vals[i])
			p.op('s')
		} else {
			p.op('(')
			for ; i < end; i++ {
				p.save(d.keys[i])
				p.save(d.vals[i])
			}
			p.op('u')
		}
		i = end
	}
}

func (p *pickler) global(g *pyGlobal) {
	if p.get(g) {
		return
	}
	if p.proto >= 4 {
		p.save(g.mod)
		p.save(g.name)
		p.op(0x93) // STACK_GLOBAL
	} else {
		p.op('c')
		p.out = append(p.out, strOf(g.mod)...)
		p.op('\n')
		p.out = append(p.out, strOf(g.name)...)
		p.op('\n')
	}
	p.memoize(g)
}

func strOf(v any) string {
	if s, ok := v.(*pyStr); ok {
		return s.s
	}
	return v.(string)
}
