package ckpt

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/prism-hpc/prism/internal/stracelog"
	"github.com/prism-hpc/prism/internal/torchtest"
)

var straceLine = regexp.MustCompile(`^(?:\d+\s+)?(\w+)\((\d+)<([^>]*)>(.*)\)\s+=\s+(-?\d+)`)

// tracedCalls reads an `strace -f -y` log: the calls made on files whose
// path ends in suffix, by path, in order, as shape lines (see shape).
func tracedCalls(t *testing.T, log, suffix string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	pos := map[string]int64{}
	iov := regexp.MustCompile(`iov_len=(\d+)`)
	stracelog.Read(t, log, func(_ int, line string) {
		m := straceLine.FindStringSubmatch(line)
		if m == nil || !strings.HasSuffix(m[3], suffix) {
			return
		}
		path := m[3]
		ret, _ := strconv.ParseInt(m[5], 10, 64)
		args := m[4]
		count := args[strings.LastIndexByte(args, ',')+1:]
		switch m[1] {
		case "write", "read":
			out[path] = append(out[path], m[1]+" "+strings.TrimSpace(count))
			pos[path] += ret
		case "writev":
			var lens []string
			for _, x := range iov.FindAllStringSubmatch(args, -1) {
				lens = append(lens, x[1])
			}
			out[path] = append(out[path], "writev "+strconv.FormatInt(ret, 10)+" "+strings.Join(lens, "+"))
			pos[path] += ret
		case "lseek":
			if ret != pos[path] {
				out[path] = append(out[path], "lseek "+m[5])
				pos[path] = ret
			}
		case "fsync":
			out[path] = append(out[path], "fsync")
		}
	})
	return out
}

// TestTracedCallsJoinsSplitCalls: a call another thread interrupted (in
// strace 6.1's format, as a loaded 2-core machine splits them) counts, at
// its resumption.
func TestTracedCallsJoinsSplitCalls(t *testing.T) {
	log := filepath.Join(t.TempDir(), "strace.log")
	text := "12 read(5</r/a.pt>,  <unfinished ...>\n" +
		"13 read(6</r/b.pt>, \"x\", 4) = 1\n" +
		"12 <... read resumed>\"abcd\"..., 4096) = 4096\n"
	if err := os.WriteFile(log, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	got := tracedCalls(t, log, ".pt")
	if g := got["/r/a.pt"]; len(g) != 1 || g[0] != "read 4096" {
		t.Errorf("calls on the split file %q, want [read 4096]", g)
	}
}

// shape renders a layout's calls as tracedCalls renders strace's: lseeks
// that do not move (Python answering tell()) left out, reads by the
// count asked.
func shape(calls []Call, size int64) []string {
	var out []string
	var pos int64
	for _, c := range calls {
		switch c.Op {
		case CallSeek:
			if c.Off != pos {
				out = append(out, "lseek "+strconv.FormatInt(c.Off, 10))
				pos = c.Off
			}
		case CallRead:
			out = append(out, "read "+strconv.FormatInt(c.Len, 10))
			pos = min(c.Off+c.Len, size)
		case CallWrite:
			out = append(out, "write "+strconv.FormatInt(c.Len, 10))
			pos = c.Off + c.Len
		case CallWritev:
			var lens []string
			for _, n := range c.Iov {
				lens = append(lens, strconv.FormatInt(n, 10))
			}
			out = append(out, "writev "+strconv.FormatInt(c.Len, 10)+" "+strings.Join(lens, "+"))
			pos = c.Off + c.Len
		case CallFsync:
			out = append(out, "fsync")
		}
	}
	return out
}

// runTraced runs the oracle under strace, returning the log's path.
func runTraced(t *testing.T, args ...string) string {
	t.Helper()
	py := torchtest.Python(t)
	log := t.TempDir() + "/strace.log"
	cmd := exec.Command(torchtest.Strace(t), append([]string{"-f", "-y", "-s", "4", "-e", "trace=write,writev,read,lseek,fsync", "-o", log, py, "testdata/torch_oracle.py"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("strace %v: %v\n%s", args, err, out)
	}
	return log
}

// TestCallsMatchStrace: the calls WriteCalls and ReadCalls list are the
// ones torch 1.13 makes, as strace sees them: torch.save (ofstream
// writevs) and torch.load of a torch file; DCP's FileSystemWriter
// (BufferedWriter writes, fsync) for the shard files and .metadata, and
// FileSystemReader's 8 KiB buffered reads, one file per rank and one per
// item. The model is large enough that tensors bypass the buffers and
// small enough to keep the test fast.
func TestCallsMatchStrace(t *testing.T) {
	m := mustBuild(t, "synthetic", Synthetic(4, 512, 512, F32), OptAdam, 1)
	spec := writeSpec(t, m, 4, 512, 512)
	o := CallOptions{BlockSize: 4096}
	compare := func(t *testing.T, what string, got, want []string) {
		t.Helper()
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			i := 0
			for i < min(len(got), len(want)) && got[i] == want[i] {
				i++
			}
			t.Errorf("%s: strace saw %d calls, the layout lists %d; first difference at call %d: %q vs %q",
				what, len(got), len(want), i, at(got, i), at(want, i))
		}
	}
	t.Run("torch", func(t *testing.T) {
		l := NewTorchState(m.State(Torch113, false), 11, "checkpoint.pt", Torch113)
		dir, ref := t.TempDir(), t.TempDir()
		writeLayout(t, dir, l, NewPool(11, 1<<20, 1<<20), 2)
		log := runTraced(t, "torch", spec, filepath.Join(dir, "checkpoint.pt"), filepath.Join(ref, "checkpoint.pt"))
		tr := tracedCalls(t, log, "checkpoint.pt")
		compare(t, "torch.save", tr[filepath.Join(ref, "checkpoint.pt")], shape(l.WriteCalls(0, o), l.Files[0].Size))
		compare(t, "torch.load", tr[filepath.Join(dir, "checkpoint.pt")], shape(l.ReadCalls(0, o), l.Files[0].Size))
	})
	for _, per := range []bool{false, true} {
		t.Run(fmt.Sprintf("dcp/file_per_tensor=%v", per), func(t *testing.T) {
			l := NewDCPState(m.State(Torch113, true), 5, 1, DCPOptions{FilePerTensor: per, Version: Torch113})
			dir, ref := t.TempDir(), filepath.Join(t.TempDir(), "ref")
			writeLayout(t, dir, l, NewPool(5, 1<<20, 1<<20), 3)
			flag := map[bool]string{false: "0", true: "1"}[per]
			log := runTraced(t, "dcp-save", spec, dir, ref, flag)
			tr := tracedCalls(t, log, "")
			for i, f := range l.Files {
				name := f.Name
				if f.Tmp != "" {
					name = f.Tmp
				}
				compare(t, "save "+name, tr[filepath.Join(ref, name)], shape(l.WriteCalls(i, o), f.Size))
				compare(t, "load "+f.Name, tr[filepath.Join(dir, f.Name)], shape(l.ReadCalls(i, o), f.Size))
			}
		})
	}
	t.Run("dcp/metadata-frames", func(t *testing.T) {
		// 2059 items: a .metadata of several 64 KiB frames.
		m, spec := newOracleModel(t, 256, F32, OptAdam)
		l := NewDCPState(m.State(Torch113, true), 5, 1, DCPOptions{Version: Torch113})
		dir, ref := t.TempDir(), filepath.Join(t.TempDir(), "ref")
		writeLayout(t, dir, l, NewPool(5, 64<<10, 8<<10), 3)
		log := runTraced(t, "dcp-save", spec, dir, ref, "0")
		tr := tracedCalls(t, log, "")
		md := len(l.Files) - 1
		want := shape(l.WriteCalls(md, o), l.Files[md].Size)
		if len(want) < 5 {
			t.Fatalf("only %d calls for a %d-byte .metadata", len(want), l.Files[md].Size)
		}
		compare(t, "save .metadata.tmp", tr[filepath.Join(ref, ".metadata.tmp")], want)
		compare(t, "load .metadata", tr[filepath.Join(dir, ".metadata")], shape(l.ReadCalls(md, o), l.Files[md].Size))
	})
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "(none)"
}
