package checkpoint

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/prism-hpc/prism/internal/stracelog"
)

// overridePlan is what TestSyscallOverrides traces: a torch file saved
// with write_size, loaded with read_size and with mmap = true, and a
// safetensors file loaded as its loader does by default (mapped).
const overridePlan = `[plan]
keep = true
drop_caches = "none"
[[phase]]
name = "ws-save"
kind = "ddp_save"
write_size = "64KiB"
optimizer = "adam"
layers = 2
input_dim = 512
hidden_dim = 512
[[phase]]
name = "rs-load"
kind = "ddp_load"
read_size = "64KiB"
optimizer = "adam"
layers = 2
input_dim = 512
hidden_dim = 512
[[phase]]
name = "map-load"
kind = "ddp_load"
mmap = true
optimizer = "adam"
layers = 2
input_dim = 512
hidden_dim = 512
[[phase]]
name = "st-save"
kind = "ddp_save"
format = "safetensors"
layers = 3
input_dim = 512
hidden_dim = 512
[[phase]]
name = "st-map"
kind = "ddp_load"
layers = 3
input_dim = 512
hidden_dim = 512
`

// mmapRe is a mapping of a file strace -y names: mmap(addr, length,
// prot, flags, fd<path>, offset).
var mmapRe = regexp.MustCompile(`^\d+\s+mmap\([^,]*, (\d+), PROT_READ, MAP_SHARED, \d+<([^>]*)>, 0\)`)

// TestSyscallOverrides: the explicit overrides replace the framework's
// calls as documented: write_size = 64KiB saves every byte of the torch
// file in pwrite64s of at most 64 KiB (no write or writev), read_size =
// 64KiB loads it in pread64s of at most 64 KiB (no read); mmap = true
// loads the torch file, and the default load of a safetensors file loads
// it, from one read-only shared mapping of the whole file, with no read
// call on it at all.
func TestSyscallOverrides(t *testing.T) {
	log, run := underStrace(t, "TestSyscallOverrides", "openat,write,writev,pwrite64,read,pread64,lseek,mmap", overridePlan)
	if log == "" {
		return // the traced child
	}
	file := func(save, name string) (string, int64) {
		dirs, _ := filepath.Glob(filepath.Join(run, "*-"+save, "checkpoint"))
		if len(dirs) != 1 {
			t.Fatalf("no checkpoint of %s", save)
		}
		p := filepath.Join(dirs[0], name)
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return p, st.Size()
	}
	tr := traceLog(t, log, run)
	// The mappings, by file, in trace order, split calls joined.
	maps := map[string][]int64{}
	stracelog.Read(t, log, func(_ int, line string) {
		if m := mmapRe.FindStringSubmatch(line); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			maps[m[2]] = append(maps[m[2]], n)
		}
	})

	pt, size := file("ws-save", "checkpoint.pt")
	sessions := func(open string) [][]tracedCall {
		var out [][]tracedCall
		cs := tr[pt]
		for i, c := range cs {
			if c.op != open {
				continue
			}
			out = append(out, session(cs[i:], open))
		}
		return out
	}
	t.Run("write_size", func(t *testing.T) {
		ws := sessions("open_w")
		if len(ws) != 1 {
			t.Fatalf("%d opens for writing of %s, want 1", len(ws), pt)
		}
		var sum, biggest int64
		for _, c := range ws[0] {
			switch c.op {
			case "pwrite64":
				sum += c.ret
				biggest = max(biggest, c.ret)
			case "write", "writev":
				t.Errorf("%s with write_size set", c.shape())
			}
		}
		if sum != size || biggest != 64<<10 {
			t.Errorf("pwrite64s wrote %d bytes of the file's %d, the largest %d: want every byte, in calls of at most 64 KiB", sum, size, biggest)
		}
	})
	rs := sessions("open_r")
	if len(rs) != 2 {
		t.Fatalf("%d opens for reading of %s, want 2 (read_size, mmap)", len(rs), pt)
	}
	t.Run("read_size", func(t *testing.T) {
		var sum, biggest int64
		for _, c := range rs[0] {
			switch c.op {
			case "pread64":
				sum += c.ret
				biggest = max(biggest, c.ret)
			case "read":
				t.Errorf("%s with read_size set", c.shape())
			}
		}
		if sum < size || biggest != 64<<10 {
			t.Errorf("pread64s read %d bytes of the file's %d, the largest %d: want every byte, in calls of at most 64 KiB", sum, size, biggest)
		}
	})
	t.Run("mmap", func(t *testing.T) {
		for _, c := range rs[1] {
			if c.op == "read" || c.op == "pread64" {
				t.Errorf("mmap = true: %s of %s", c.shape(), pt)
			}
		}
		if m := maps[pt]; len(m) != 1 || m[0] != size {
			t.Errorf("mappings of %s: %v, want one of the whole %d bytes", pt, m, size)
		}
	})
	t.Run("safetensors", func(t *testing.T) {
		st, size := file("st-save", "model.safetensors")
		cs := session(tr[st], "open_r")
		if cs == nil {
			t.Fatalf("%s never opened for reading", st)
		}
		for _, c := range cs {
			if c.op == "read" || c.op == "pread64" {
				t.Errorf("the default safetensors load: %s of %s", c.shape(), st)
			}
		}
		if m := maps[st]; len(m) != 1 || m[0] != size {
			t.Errorf("mappings of %s: %v, want one of the whole %d bytes", st, m, size)
		}
	})
}
