package checkpoint

import (
	"bytes"
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
	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/ckpt"
	"github.com/prism-hpc/prism/phases/phasestest"
	"github.com/prism-hpc/prism/report"
)

// tracedCall is one system call strace saw on a checkpoint file.
type tracedCall struct {
	op   string
	args string
	ret  int64
	line int // position in the log, for ordering across files
}

// shape is the call as the comparisons read it: the op and what it asked
// for (bytes, writev's buffers, lseek's target).
func (c tracedCall) shape() string {
	// Only the trailing scalar arguments matter; buffers are abbreviated.
	a := strings.Split(c.args, ",")
	switch c.op {
	case "write", "read", "pwrite64", "pread64":
		return c.op + " " + strings.TrimSpace(a[len(a)-1])
	case "writev":
		var lens []string
		for _, m := range iovLen.FindAllStringSubmatch(c.args, -1) {
			lens = append(lens, m[1])
		}
		return "writev " + strconv.FormatInt(c.ret, 10) + " " + strings.Join(lens, "+")
	case "lseek":
		return "lseek " + strings.TrimSpace(a[1])
	}
	return c.op
}

var (
	iovLen = regexp.MustCompile(`iov_len=(\d+)`)
	// rename(path, …) or renameat(fd<dir>, "name", …), as prism renames
	// relative to the checkpoint directory's descriptor.
	renameRe = regexp.MustCompile(`^(\d+)\s+rename(?:at2?)?\((?:\d+<([^>]*)>, )?"([^"]*\.metadata\.tmp)"`)
	openRe   = regexp.MustCompile(`^(\d+)\s+openat\(.*, "[^"]*", ([A-Z_|]+).*\)\s+=\s+\d+<([^>]*)>`)
	straceRe = regexp.MustCompile(`^(\d+)\s+(\w+)\((\d+)<([^>]*)>(.*)\)\s+=\s+(-?\d+)`)
)

// traceLog reads an `strace -f -y` log into the calls on each file whose
// path contains within (traceLines joins interrupted calls).
func traceLog(t *testing.T, log, within string) map[string][]tracedCall {
	t.Helper()
	out := map[string][]tracedCall{}
	stracelog.Read(t, log, func(n int, line string) {
		if m := renameRe.FindStringSubmatch(line); m != nil {
			name := m[3]
			if m[2] != "" && !filepath.IsAbs(name) {
				name = filepath.Join(m[2], name)
			}
			out[name] = append(out[name], tracedCall{op: "rename", line: n})
			return
		}
		if m := openRe.FindStringSubmatch(line); m != nil {
			if strings.Contains(m[3], within) {
				op := "open_r"
				if strings.Contains(m[2], "O_WRONLY") {
					op = "open_w"
				}
				out[m[3]] = append(out[m[3]], tracedCall{op: op, line: n})
			}
			return
		}
		m := straceRe.FindStringSubmatch(line)
		if m == nil || !strings.Contains(m[4], within) {
			return
		}
		ret, _ := strconv.ParseInt(m[6], 10, 64)
		out[m[4]] = append(out[m[4]], tracedCall{op: m[2], args: m[5], ret: ret, line: n})
	})
	return out
}

// session is the calls on a file from one open of it (op "open_w" or
// "open_r") to the next.
func session(cs []tracedCall, open string) []tracedCall {
	for i, c := range cs {
		if c.op != open {
			continue
		}
		j := i + 1
		for j < len(cs) && cs[j].op != "open_r" && cs[j].op != "open_w" {
			j++
		}
		return cs[i+1 : j]
	}
	return nil
}

// callShapes renders a layout's calls as tracedCall.shape renders
// strace's.
func callShapes(calls []ckpt.Call) []string {
	var out []string
	for _, c := range calls {
		switch c.Op {
		case ckpt.CallWritev:
			out = append(out, fmt.Sprintf("writev %d %d+%d", c.Len, c.Iov[0], c.Iov[1]))
		case ckpt.CallSeek:
			out = append(out, fmt.Sprintf("lseek %d", c.Off))
		case ckpt.CallFsync:
			out = append(out, "fsync")
		default:
			out = append(out, fmt.Sprintf("%s %d", c.Op, c.Len))
		}
	}
	return out
}

func shapes(cs []tracedCall) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.shape())
	}
	return out
}

// sameCalls reports the first difference of two call lists.
func sameCalls(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") == strings.Join(want, "\n") {
		return
	}
	i := 0
	for i < min(len(got), len(want)) && got[i] == want[i] {
		i++
	}
	at := func(s []string) string {
		if i < len(s) {
			return s[i]
		}
		return "(none)"
	}
	t.Errorf("%s: prism made %d calls, the framework's shape has %d; first difference at call %d: %q vs %q", what, len(got), len(want), i, at(got), at(want))
}

// syscallPlan is what TestSyscalls traces: saves in each format and
// torch version, and loads of them by one rank (several ranks reading
// one file would interleave its calls in the trace).
const syscallPlan = `[plan]
keep = true
drop_caches = "none"
[[phase]]
name = "ddp-save"
kind = "ddp_save"
optimizer = "adam"
layers = 3
input_dim = 512
hidden_dim = 512
[[phase]]
name = "ddp-load"
kind = "ddp_load"
ranks = 1
optimizer = "adam"
layers = 3
input_dim = 512
hidden_dim = 512
[[phase]]
name = "dcp-rank"
kind = "fsdp_save"
optimizer = "adam"
layers = 2
input_dim = 512
hidden_dim = 512
[[phase]]
name = "dcp-rank-rl"
kind = "rl_load"
readers = 1
optimizer = "adam"
layers = 2
input_dim = 512
hidden_dim = 512
[[phase]]
name = "dcp-item"
kind = "fsdp_save"
dcp_file_per_tensor = true
optimizer = "adam"
layers = 4
input_dim = 512
hidden_dim = 512
[[phase]]
name = "dcp2"
kind = "fsdp_save"
torch_version = "2.x"
layers = 5
input_dim = 512
hidden_dim = 512
[[phase]]
name = "ddp2-save"
kind = "ddp_save"
torch_version = "2.x"
optimizer = "adam"
layers = 7
input_dim = 512
hidden_dim = 512
[[phase]]
name = "ddp2-load"
kind = "ddp_load"
ranks = 1
torch_version = "2.x"
optimizer = "adam"
layers = 7
input_dim = 512
hidden_dim = 512
[[phase]]
name = "st-save"
kind = "ddp_save"
format = "safetensors"
layers = 6
input_dim = 512
hidden_dim = 512
[[phase]]
name = "st-load"
kind = "ddp_load"
mmap = false
ranks = 1
layers = 6
input_dim = 512
hidden_dim = 512
`

// TestSyscalls traces prism's saves and loads with strace and checks
// that, file by file, prism made exactly the calls ckpt's WriteCalls and
// ReadCalls list, which phases/ckpt checks against real torch's (so
// prism's I/O has torch's shape), for torch 1.13's files and 2.x's:
// torch.save's writevs, DCP's buffered writes, lseeks and fsyncs,
// torch.load's and
// FileSystemReader's reads, safetensors' writes and reads; no pwrite or
// pread; and .metadata.tmp renamed to .metadata after every shard's
// fsync, as a pickle of torch's Metadata.
func TestSyscalls(t *testing.T) {
	log, run := underStrace(t, "TestSyscalls", "openat,write,writev,pwrite64,read,pread64,lseek,fsync,fdatasync,rename,renameat,renameat2",
		syscallPlan, phasestest.Ranks(2))
	if log == "" {
		return // the traced child
	}
	tr := traceLog(t, log, run)
	for path, cs := range tr {
		if filepath.Base(path) == phases.RunMarker {
			continue // the engine's marker, not a checkpoint file
		}
		for _, c := range cs {
			if c.op == "pwrite64" || c.op == "pread64" {
				t.Errorf("%s: %s: torch makes no positional I/O", path, c.shape())
				break
			}
		}
	}
	model := func(layers int, opt string) *ckpt.Model {
		m, err := ckpt.Build("synthetic", ckpt.Synthetic(int64(layers), 512, 512, ckpt.F32), opt, 1)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, tc := range []struct {
		save, load string // phase names
		m          *ckpt.Model
		spec       writeSpec
		ranks      int
	}{
		{"ddp-save", "ddp-load", model(3, ckpt.OptAdam), writeSpec{kind: "ddp", format: ckpt.FormatTorch}, 1},
		{"dcp-rank", "dcp-rank-rl", model(2, ckpt.OptAdam), writeSpec{kind: "fsdp", format: ckpt.FormatDCP, fsync: true}, 2},
		{"dcp-item", "", model(4, ckpt.OptAdam), writeSpec{kind: "fsdp", format: ckpt.FormatDCP, fsync: true, perTensor: true}, 2},
		{"dcp2", "", model(5, ckpt.OptNone), writeSpec{kind: "fsdp", format: ckpt.FormatDCP, fsync: true, version: ckpt.Torch2}, 2},
		{"ddp2-save", "ddp2-load", model(7, ckpt.OptAdam), writeSpec{kind: "ddp", format: ckpt.FormatTorch, version: ckpt.Torch2}, 1},
		{"st-save", "st-load", model(6, ckpt.OptNone), writeSpec{kind: "ddp", format: ckpt.FormatSafetensors}, 1},
	} {
		t.Run(tc.save, func(t *testing.T) {
			dirs, _ := filepath.Glob(filepath.Join(run, "*-"+tc.save, "checkpoint"))
			if len(dirs) != 1 {
				t.Fatalf("no checkpoint of %s", tc.save)
			}
			dir := dirs[0]
			l := newLayout(tc.m, tc.spec, tc.ranks, 1, dir)
			dh, err := pio.OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			o := ckpt.CallOptions{BlockSize: blockSize(dh)}
			dh.Close()
			lastFsync, renamed := 0, 0
			for i, f := range l.Files {
				name := f.Name
				if f.Tmp != "" {
					name = f.Tmp
				}
				want := callShapes(l.WriteCalls(i, o))
				if tc.spec.format != ckpt.FormatDCP && tc.spec.fsync {
					want = append(want, "fsync")
				}
				var wr []tracedCall
				for _, c := range session(tr[filepath.Join(dir, name)], "open_w") {
					switch c.op {
					case "rename", "renameat", "renameat2":
						renamed = c.line
						continue
					case "fsync":
						if f.Tmp == "" {
							lastFsync = max(lastFsync, c.line)
						}
					}
					wr = append(wr, c)
				}
				sameCalls(t, "save "+name, shapes(wr), want)
			}
			if tc.spec.format == ckpt.FormatDCP {
				if renamed == 0 || renamed < lastFsync {
					t.Errorf(".metadata.tmp renamed at trace line %d, the last shard fsync at line %d: want the rename after every shard's fsync", renamed, lastFsync)
				}
				b, _ := os.ReadFile(filepath.Join(dir, ".metadata"))
				mod := "torch.distributed._shard.checkpoint.metadata"
				if tc.spec.version == ckpt.Torch2 {
					mod = "torch.distributed.checkpoint.metadata"
				}
				if !bytes.HasPrefix(b, []byte{0x80, 0x04, 0x95}) || !bytes.Contains(b, []byte(mod)) {
					t.Errorf(".metadata is not a pickle of %s's Metadata: %q", mod, b[:min(len(b), 64)])
				}
			}
			if tc.load == "" {
				return
			}
			// The load's reads, as the framework makes them.
			ents := l.DCPEntries()
			for i, f := range l.Files {
				var want []string
				switch {
				case l.Format == ckpt.FormatDCP && !f.Final:
					for _, e := range l.DCPLoadPlan(1, 0) {
						if ents[e].File == i {
							want = append(want, callShapes(l.EntryReadCalls(e))...)
						}
					}
				default:
					want = callShapes(l.ReadCalls(i, o))
				}
				sameCalls(t, "load "+f.Name, shapes(session(tr[filepath.Join(dir, f.Name)], "open_r")), want)
			}
		})
	}
}

// underStrace runs plan (with opts) in a child of this test binary under
// strace -f -y, tracing calls, and returns the log and the child's run
// directory. In the child (name re-run with PRISM_TRACE_CHILD set) it runs
// the plan and returns "", "".
func underStrace(t *testing.T, name, calls, plan string, opts ...phasestest.Option) (log, run string) {
	t.Helper()
	if os.Getenv("PRISM_TRACE_CHILD") != "" {
		res := phasestest.Run(t, registry(), plan, append(opts, phasestest.Workdir(os.Getenv("PRISM_TRACE_WORK")))...)
		if res.Outcome.Status != report.StatusPassed {
			for _, ph := range res.Manifest.Phases {
				t.Logf("%s: %s %s", ph.Name, ph.Status, ph.Error)
			}
			t.Fatal(res.Outcome.Status)
		}
		return "", ""
	}
	strace := torchtest.Strace(t)
	work := t.TempDir()
	log = filepath.Join(work, "strace.log")
	cmd := exec.Command(strace, "-f", "-y", "-s", "4", "-e", "trace="+calls,
		"-o", log, os.Args[0], "-test.run=^"+name+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PRISM_TRACE_CHILD=1", "PRISM_TRACE_WORK="+work)
	if b, err := cmd.CombinedOutput(); err != nil {
		if bytes.Contains(b, []byte("PTRACE")) || bytes.Contains(b, []byte("Operation not permitted")) {
			if torchtest.Required() {
				t.Fatalf("strace cannot trace here (CI needs ptrace): %s", b)
			}
			t.Skipf("strace cannot trace here: %s", b)
		}
		t.Fatalf("traced child: %v\n%s", err, b)
	}
	runs, _ := filepath.Glob(filepath.Join(work, "prism-*"))
	if len(runs) != 1 {
		t.Fatalf("no run directory in %s", work)
	}
	return log, runs[0]
}
