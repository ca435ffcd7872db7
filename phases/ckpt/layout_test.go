package ckpt

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prism-hpc/prism/internal/torchtest"
)

// writeLayout writes every file of l under dir the simple way (no timing),
// so the formats can be checked by independent readers.
func writeLayout(t *testing.T, dir string, l *Layout, pl *Pool, gen uint64) {
	t.Helper()
	l.Checksum(pl, gen, nil)
	for _, final := range []bool{false, true} {
		for i := range l.Files {
			if l.Files[i].Final != final {
				continue
			}
			l.Build(i, true)
			var buf bytes.Buffer
			_, w := pl.Size()
			for _, s := range l.Files[i].Segs {
				if s.Off != int64(buf.Len()) {
					t.Fatalf("%s: segment at %d, file at %d", l.Files[i].Name, s.Off, buf.Len())
				}
				if s.Piece < 0 {
					buf.Write(s.Lit)
					continue
				}
				p := l.Pieces[s.Piece]
				for off := int64(0); off < p.Len(); off += w {
					buf.Write(pl.Chunk(p.Key, gen, off, min(w, p.Len()-off)))
					pl.Release()
				}
			}
			if int64(buf.Len()) != l.Files[i].Size {
				t.Fatalf("%s: wrote %d bytes, size %d", l.Files[i].Name, buf.Len(), l.Files[i].Size)
			}
			if err := os.WriteFile(filepath.Join(dir, l.Files[i].Name), buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func runPython(t *testing.T, script string, args ...string) string {
	t.Helper()
	cmd := exec.Command(torchtest.Python3(t), append([]string{"-c", script}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	return string(out)
}

func smallModel(t *testing.T) *Model {
	return mustBuild(t, "synthetic", Synthetic(3, 40, 24, BF16), OptNone, 1)
}

// pyTorchZip lists a torch.save archive with zipfile (CRCs checked by
// testzip) and unpickles data.pkl with stand-ins for torch's classes,
// printing name, storage class, key, numel, shape for every tensor and the
// size of every data record.
const pyTorchZip = `
import sys, zipfile, pickle, io
def check(path, base, length):
  raw = open(path, 'rb').read()
  if length > 0:
    raw = raw[base:base+length]
  z = zipfile.ZipFile(io.BytesIO(raw))
  bad = z.testzip()
  assert bad is None, 'bad CRC in ' + bad
  names = z.namelist()
  pkl = [n for n in names if n.endswith('/data.pkl')][0]
  arch = pkl[:-len('/data.pkl')]
  class Storage:
      def __init__(self, name): self.name = name
  def rebuild(storage, offset, shape, stride, requires_grad, hooks):
      return ('T', storage, offset, shape, stride)
  class U(pickle.Unpickler):
      def find_class(self, mod, name):
          if (mod, name) == ('torch._utils', '_rebuild_tensor_v2'): return rebuild
          if (mod, name) == ('collections', 'OrderedDict'):
              import collections; return collections.OrderedDict
          if mod == 'torch' and name.endswith('Storage'): return Storage(name)
          raise pickle.UnpicklingError('unexpected global %s.%s' % (mod, name))
      def persistent_load(self, pid):
          kind, cls, key, loc, numel = pid
          assert kind == 'storage' and loc == 'cpu'
          return (cls.name, key, numel)
  obj = U(io.BytesIO(z.read(pkl))).load()
  items = obj.items() if isinstance(obj, dict) else [('-', obj)]
  for name, t in items:
      _, (cls, key, numel), offset, shape, stride = t
      info = z.getinfo(arch + '/data/' + key)
      assert info.file_size == numel * (4 if cls == 'FloatStorage' else 2), (name, info.file_size, numel)
      print(name, cls, key, numel, 'x'.join(map(str, shape)) or '-', info.file_size)
  print('version', z.read(arch + '/version').decode().strip())
args = sys.argv[1:]
for k in range(0, len(args), 3):
  check(args[k], int(args[k+1]), int(args[k+2]))
`

// TestTorchArchive reads prism's torch.save archive with Go's and
// Python's zip readers (CRCs checked) and an unpickler with stand-ins for
// torch's classes, in the ordinary and the zip64 encoding (forced with a
// low threshold, as a >4 GiB tensor would need it).
func TestTorchArchive(t *testing.T) {
	for _, z64 := range []int64{0, 1} {
		t.Run(fmt.Sprintf("zip64=%v", z64 > 0), func(t *testing.T) {
			forceZip64 = z64
			defer func() { forceZip64 = 0 }()
			m := smallModel(t)
			l := NewTorchState(FlatState(m.Tensors), 9, "checkpoint.pt", Torch113)
			pl := NewPool(9, 64<<10, 8<<10)
			dir := t.TempDir()
			writeLayout(t, dir, l, pl, 3)
			path := filepath.Join(dir, "checkpoint.pt")
			zr, err := zip.OpenReader(path)
			if err != nil {
				t.Fatal(err)
			}
			defer zr.Close()
			if len(zr.File) != len(l.Pieces)+2 || zr.File[0].Name != "checkpoint/data.pkl" || zr.File[len(zr.File)-1].Name != "checkpoint/version" {
				t.Fatalf("%d records, first %s", len(zr.File), zr.File[0].Name)
			}
			// Records in 1.13's order: keys sorted as strings.
			keys := make([]string, len(l.Pieces))
			for i := range keys {
				keys[i] = strconv.Itoa(i)
			}
			sort.Strings(keys)
			for i, k := range keys {
				f := zr.File[1+i]
				if f.Name != "checkpoint/data/"+k {
					t.Fatalf("record %d is %s, want data/%s", 1+i, f.Name, k)
				}
				p := l.Pieces[atoi(k)]
				off, _ := f.DataOffset()
				if off%64 != 0 || off != p.Off {
					t.Fatalf("%s: data at %d (piece says %d), not 64-aligned", f.Name, off, p.Off)
				}
				rc, _ := f.Open()
				got, err := io.ReadAll(rc) // checks the CRC
				if err != nil {
					t.Fatalf("%s: %v", f.Name, err)
				}
				if crc32.ChecksumIEEE(got) != p.CRC {
					t.Fatalf("%s: crc mismatch", f.Name)
				}
			}
			out := runPython(t, pyTorchZip, path, "0", "0")
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != len(m.Tensors)+1 || lines[len(lines)-1] != "version 3" {
				t.Fatalf("python saw:\n%s", out)
			}
			for i, tn := range m.Tensors {
				shape := strings.Trim(strings.ReplaceAll(fmt.Sprint(tn.Shape), " ", "x"), "[]")
				if shape == "" {
					shape = "-"
				}
				want := fmt.Sprintf("%s %s %d %d %s %d", tn.Name, tn.DType.storageClass(), i, tn.Elems(), shape, tn.Bytes())
				if lines[i] != want {
					t.Fatalf("python line %d: %q, want %q", i, lines[i], want)
				}
			}
		})
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func TestSafetensorsLayout(t *testing.T) {
	m := smallModel(t)
	for _, ranks := range []int{1, 3} {
		l := NewSafetensors(m.Tensors, 1, ranks, true)
		pl := NewPool(1, 64<<10, 8<<10)
		dir := t.TempDir()
		writeLayout(t, dir, l, pl, 1)
		seen := map[string]string{}
		for _, f := range l.Files {
			if f.Final {
				continue
			}
			b, _ := os.ReadFile(filepath.Join(dir, f.Name))
			n := binary.LittleEndian.Uint64(b)
			if (8+n)%8 != 0 {
				t.Fatalf("%s: header length %d not padded", f.Name, n)
			}
			var hdr map[string]json.RawMessage
			if err := json.Unmarshal(b[8:8+n], &hdr); err != nil {
				t.Fatalf("%s: %v", f.Name, err)
			}
			var end int64
			for name, raw := range hdr {
				if name == "__metadata__" {
					continue
				}
				var ti struct {
					DataOffsets [2]int64 `json:"data_offsets"`
				}
				json.Unmarshal(raw, &ti)
				end = max(end, ti.DataOffsets[1])
				seen[name] = f.Name
			}
			if int64(len(b))-8-int64(n) != end {
				t.Fatalf("%s: data section %d bytes, last tensor ends at %d", f.Name, int64(len(b))-8-int64(n), end)
			}
		}
		var idx struct {
			Metadata struct {
				TotalSize int64 `json:"total_size"`
			} `json:"metadata"`
			WeightMap map[string]string `json:"weight_map"`
		}
		b, _ := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
		if err := json.Unmarshal(b, &idx); err != nil {
			t.Fatal(err)
		}
		if idx.Metadata.TotalSize != m.Bytes() || len(idx.WeightMap) != len(m.Tensors) {
			t.Fatalf("index: total %d (want %d), %d entries", idx.Metadata.TotalSize, m.Bytes(), len(idx.WeightMap))
		}
		for name, file := range idx.WeightMap {
			if seen[name] != file {
				t.Fatalf("index maps %s to %s, header of %s holds it", name, file, seen[name])
			}
		}
	}
}

func TestChunkRows(t *testing.T) {
	for ranks := 1; ranks <= 8; ranks++ {
		for _, rows := range []int64{1, 2, 7, 8, 9, 24, 1000} {
			next := int64(0)
			for r := 0; r < ranks; r++ {
				lo, hi := ChunkRows(rows, ranks, r)
				if lo != next || hi < lo || hi-lo > (rows+int64(ranks)-1)/int64(ranks) {
					t.Fatalf("rows %d ranks %d: rank %d gets [%d,%d), expected start %d", rows, ranks, r, lo, hi, next)
				}
				next = hi
			}
			if next != rows {
				t.Fatalf("rows %d ranks %d: chunks end at %d", rows, ranks, next)
			}
		}
	}
}

func TestBalanceBySize(t *testing.T) {
	sizes := []int64{100, 5, 60, 60, 30, 30, 30, 1, 1, 80}
	var total int64
	for _, s := range sizes {
		total += s
	}
	for ranks := 1; ranks <= 8; ranks++ {
		owner := BalanceBySize(sizes, ranks)
		load := make([]int64, ranks)
		for i, o := range owner {
			if o < 0 || o >= ranks {
				t.Fatalf("ranks %d: item %d to rank %d", ranks, i, o)
			}
			load[o] += sizes[i]
		}
		var hi, lo int64 = 0, total
		for _, l := range load {
			hi, lo = max(hi, l), min(lo, l)
		}
		// Greedy largest-first: the spread is at most the largest item,
		// and the heaviest rank holds at most its fair share plus one item.
		if hi-lo > 100 || hi > (total+int64(ranks)-1)/int64(ranks)+100 {
			t.Fatalf("ranks %d: loads %v", ranks, load)
		}
		if owner[0] != 0 {
			t.Fatalf("ranks %d: the largest item goes to rank %d, want 0", ranks, owner[0])
		}
	}
	if got := BalanceBySize([]int64{4, 3, 3, 2}, 2); fmt.Sprint(got) != "[0 1 1 0]" {
		t.Fatalf("BalanceBySize = %v", got)
	}
}
