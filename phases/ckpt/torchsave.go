package ckpt

import (
	"hash/crc32"
	"hash/fnv"
	"sort"
	"strconv"
)

// torch.save(obj, f): a zip archive whose data.pkl pickles obj (protocol
// 2, torch's persistent ids for storages) and whose data/<key> records
// hold the storages' bytes, key k being the k-th storage the pickler met.

// torchPickler turns a state tree into the objects torch.save's pickler
// writes, with Python's object identity: the globals, the interned
// literals ("storage", "cpu", dict keys written in the source) are
// shared; parameter names, storage keys, shapes and each tensor's empty
// backward-hooks OrderedDict are fresh objects.
type torchPickler struct {
	in      interned
	od      *pyGlobal
	rebuild *pyGlobal
	storage map[DType]*pyGlobal
	tensors []Tensor
	keys    []int // the tensor of storage key k
}

func newTorchPickler(tensors []Tensor) *torchPickler {
	return &torchPickler{
		in:      interned{},
		od:      &pyGlobal{mod: "collections", name: "OrderedDict"},
		rebuild: &pyGlobal{mod: "torch._utils", name: "_rebuild_tensor_v2"},
		storage: map[DType]*pyGlobal{},
		tensors: tensors,
	}
}

func (tp *torchPickler) conv(v any) any {
	switch x := v.(type) {
	case *stateDict:
		d := &pyDict{}
		for i, k := range x.keys {
			d.keys = append(d.keys, tp.key(k, x.fresh))
			d.vals = append(d.vals, tp.conv(x.vals[i]))
		}
		if !x.ordered {
			return d
		}
		r := &pyReduce{fn: tp.od, args: pyTuple{}, items: d}
		if x.modules != nil {
			meta := &pyDict{}
			for _, m := range x.modules {
				meta.keys = append(meta.keys, tp.key(m, m != ""))
				meta.vals = append(meta.vals, &pyDict{keys: []any{tp.in.get("version")}, vals: []any{1}})
			}
			r.state = &pyDict{keys: []any{tp.in.get("_metadata")}, vals: []any{&pyReduce{fn: tp.od, args: pyTuple{}, items: meta}}}
		}
		return r
	case stateList:
		l := &pyList{}
		for _, e := range x {
			l.items = append(l.items, tp.conv(e))
		}
		return l
	case tensorRef:
		return tp.tensor(int(x))
	case pyTuple:
		t := make(pyTuple, len(x))
		for i, e := range x {
			t[i] = tp.conv(e)
		}
		return t
	}
	return v // nil, bool, int, float64, string
}

func (tp *torchPickler) key(k any, fresh bool) any {
	if s, ok := k.(string); ok && !fresh {
		return tp.in.get(s)
	}
	return k
}

// tensor is Tensor.__reduce_ex__: _rebuild_tensor_v2(storage, offset,
// size, stride, requires_grad, backward_hooks), the storage a persistent
// id ('storage', torch.<Type>Storage, key, 'cpu', numel).
func (tp *torchPickler) tensor(i int) any {
	t := tp.tensors[i]
	key := strconv.Itoa(len(tp.keys))
	tp.keys = append(tp.keys, i)
	cls := tp.storage[t.DType]
	if cls == nil {
		cls = &pyGlobal{mod: "torch", name: t.DType.storageClass()}
		tp.storage[t.DType] = cls
	}
	pid := pyPersID{tp.in.get("storage"), cls, key, tp.in.get("cpu"), t.Elems()}
	shape := make(pyTuple, len(t.Shape))
	stride := make(pyTuple, len(t.Shape))
	s := int64(1)
	for d := len(t.Shape) - 1; d >= 0; d-- {
		shape[d], stride[d] = t.Shape[d], s
		s *= t.Shape[d]
	}
	hooks := &pyReduce{fn: tp.od, args: pyTuple{}}
	return &pyReduce{fn: tp.rebuild, args: pyTuple{pid, 0, shape, stride, false, hooks}}
}

// torchData says where tensor i's bytes come from: a layout piece, or
// the tensor's literal Value.
type torchData func(tensor int) (piece int, size int64, crc uint32)

// torchArchive lays out torch.save(root) at the builder's position, the
// archive directory being archive (the file's base name, or "archive"
// when saving to a stream). It returns the archive's layout and the
// tensor of each data record, in record order.
func torchArchive(b *segBuilder, v TorchVersion, archive string, tensors []Tensor, root any, data torchData) (zipLayout, []int) {
	tp := newTorchPickler(tensors)
	pkl := pickleDump(tp.conv(root), 2)
	p := archive + "/"
	entries := []zipEntry{{name: p + "data.pkl", lit: pkl}}
	if v == Torch2 {
		entries = append(entries,
			zipEntry{name: p + ".format_version", lit: []byte("1")},
			zipEntry{name: p + ".storage_alignment", lit: []byte("64")},
			zipEntry{name: p + "byteorder", lit: []byte("little")})
	}
	order := allIndices(len(tp.keys))
	if v == Torch113 {
		// 1.13 writes sorted(serialized_storages.keys()): "10" before "2".
		sort.Slice(order, func(i, j int) bool { return strconv.Itoa(order[i]) < strconv.Itoa(order[j]) })
	}
	first := len(entries)
	recTensors := make([]int, 0, len(order))
	for _, k := range order {
		ti := tp.keys[k]
		e := zipEntry{name: p + "data/" + strconv.Itoa(k)}
		if val := tensors[ti].Value; val != nil {
			e.lit = val
		} else {
			e.piece, e.size, e.crc = data(ti)
		}
		entries = append(entries, e)
		recTensors = append(recTensors, ti)
	}
	entries = append(entries, zipEntry{name: p + "version", lit: []byte("3\n")})
	if v == Torch2 {
		entries = append(entries, zipEntry{name: p + ".data/serialization_id", lit: serializationID(entries)})
	}
	zl := zipArchive(b, entries)
	zl.byKey = make([]int, len(order))
	for pos, k := range order {
		zl.byKey[k] = first + pos
	}
	if v == Torch2 {
		zl.trailing = 1
	}
	return zl, recTensors
}

// serializationID stands in for the 40 digits torch 2.x writes (a hash
// of the record names and one of their CRCs, with C++ std::hash, which
// prism cannot reproduce): deterministic, the same length and alphabet.
// Loaders do not check it.
func serializationID(entries []zipEntry) []byte {
	h := fnv.New64a()
	var c uint32
	for _, e := range entries {
		h.Write([]byte(e.name))
		crc := e.crc
		if e.lit != nil {
			crc = crc32.ChecksumIEEE(e.lit)
		}
		c = c*31 + crc
	}
	return []byte(leftPad(strconv.FormatUint(h.Sum64(), 10), 20) + leftPad(strconv.FormatUint(uint64(c), 10), 20))
}

func leftPad(s string, n int) string {
	for len(s) < n {
		s = "0" + s
	}
	return s
}
