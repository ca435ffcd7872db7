package ckpt

import (
	"encoding/binary"
)

// torchPickle returns the data.pkl torch.save writes for a state dict of
// tensors (an OrderedDict of name -> tensor) or, when names is nil, for the
// single tensor tensors[0]: pickle protocol 2, each tensor rebuilt by
// torch._utils._rebuild_tensor_v2 from a persistent storage id
// ('storage', torch.<Type>Storage, key, 'cpu', numel) whose bytes are the
// archive's data/<key> record. A contiguous tensor: offset 0, row-major
// strides, requires_grad False, no backward hooks.
func torchPickle(tensors []Tensor, names []string) []byte {
	p := []byte{0x80, 2} // PROTO 2
	if names != nil {
		p = pglobal(p, "collections", "OrderedDict")
		p = append(p, ')', 'R', '(') // EMPTY_TUPLE REDUCE MARK
		for i, t := range tensors {
			p = pstr(p, names[i])
			p = ptensor(p, t, i)
		}
		p = append(p, 'u') // SETITEMS
	} else {
		p = ptensor(p, tensors[0], 0)
	}
	return append(p, '.') // STOP
}

func ptensor(p []byte, t Tensor, key int) []byte {
	p = pglobal(p, "torch._utils", "_rebuild_tensor_v2")
	p = append(p, '(', '(') // MARK (args) MARK (persistent id)
	p = pstr(p, "storage")
	p = pglobal(p, "torch", t.DType.storageClass())
	p = pstr(p, itoa(key))
	p = pstr(p, "cpu")
	p = pint(p, t.Elems())
	p = append(p, 't', 'Q') // TUPLE BINPERSID
	p = pint(p, 0)          // storage offset
	p = ptuple(p, t.Shape)
	strides := make([]int64, len(t.Shape))
	s := int64(1)
	for i := len(t.Shape) - 1; i >= 0; i-- {
		strides[i] = s
		s *= t.Shape[i]
	}
	p = ptuple(p, strides)
	p = append(p, 0x89) // NEWFALSE: requires_grad
	p = pglobal(p, "collections", "OrderedDict")
	p = append(p, ')', 'R') // backward_hooks = OrderedDict()
	return append(p, 't', 'R')
}

func pglobal(p []byte, module, name string) []byte {
	p = append(p, 'c')
	p = append(p, module...)
	p = append(p, '\n')
	p = append(p, name...)
	return append(p, '\n')
}

func pstr(p []byte, s string) []byte {
	p = append(p, 'X')
	p = binary.LittleEndian.AppendUint32(p, uint32(len(s)))
	return append(p, s...)
}

// pint writes a non-negative integer: BININT when it fits in int32, else
// LONG1 (little-endian two's complement).
func pint(p []byte, v int64) []byte {
	if v >= 0 && v < 1<<31 {
		p = append(p, 'J')
		return binary.LittleEndian.AppendUint32(p, uint32(v))
	}
	var b []byte
	for u := uint64(v); u != 0; u >>= 8 {
		b = append(b, byte(u))
	}
	if b[len(b)-1]&0x80 != 0 {
		b = append(b, 0)
	}
	p = append(p, 0x8a, byte(len(b)))
	return append(p, b...)
}

func ptuple(p []byte, v []int64) []byte {
	if len(v) == 0 {
		return append(p, ')')
	}
	p = append(p, '(')
	for _, x := range v {
		p = pint(p, x)
	}
	return append(p, 't')
}
