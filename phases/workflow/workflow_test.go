package workflow

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/prism-hpc/prism/examples"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/phasestest"
	"github.com/prism-hpc/prism/report"
)

// wfRunPlan runs plan text on one in-process rank and returns the manifest.
func wfRunPlan(t *testing.T, workdir, plan string) *report.Manifest {
	t.Helper()
	return phasestest.Run(t, registry(), plan, phasestest.Workdir(workdir), phasestest.File("wf.toml")).Manifest
}

// registry is the workflow family alone.
func registry() *phases.Registry {
	r := phases.NewRegistry()
	Register(r)
	return r
}

func wfNeedGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
}

// TestWorkflowPhases runs every workflow kind through the engine and checks
// the op counts: clones per rank, one archive per iteration, one extract
// and one extract_file per file. Verify (run by the engine) already checks
// that each clone holds every commit and file, that the archive reads back
// whole and that the extracted tree is complete; a failure there would
// fail the phase.
func TestWorkflowPhases(t *testing.T) {
	wfNeedGit(t)
	work := t.TempDir()
	m := wfRunPlan(t, work, `
[[phase]]
kind = "git_clone"
count = 3
files = 40
dirs = 5
commits = 6
file_size = "2KiB"

[[phase]]
name = "tar-zstd"
kind = "tar"
files = 50
dirs = 6
compression = "zstd"
iterations = 2
warmup = 1

[[phase]]
name = "untar-latest"
kind = "untar"

[[phase]]
name = "untar-gzip"
kind = "untar"
archive = "generate"
files = 30
compression = "gzip"

[[phase]]
name = "tar-plain"
kind = "tar"
files = 20
dirs = 0
keep_archive = false

[[phase]]
name = "untar-own"
kind = "untar"
files = 25
dirs = 3
`)
	want := map[string]map[string]int64{
		"git_clone":    {"clone": 3},
		"tar-zstd":     {"archive": 2},
		"untar-latest": {"extract": 1, "extract_file": 50},
		"untar-gzip":   {"extract": 1, "extract_file": 30},
		"tar-plain":    {"archive": 1},
		"untar-own":    {"extract": 1, "extract_file": 25},
	}
	if m.Status != "passed" || len(m.Phases) != len(want) {
		t.Fatalf("status %s, %d phases: %+v", m.Status, len(m.Phases), m.Phases)
	}
	for _, p := range m.Phases {
		if p.Status != "passed" {
			t.Errorf("%s: %s: %s", p.Name, p.Status, p.Error)
			continue
		}
		if len(p.OpsByType) != len(want[p.Name]) {
			t.Errorf("%s: ops %v, want %v", p.Name, p.OpsByType, want[p.Name])
		}
		for op, n := range want[p.Name] {
			if got := p.OpsByType[op].Ops; got != n {
				t.Errorf("%s: %d %s ops, want %d", p.Name, got, op, n)
			}
		}
		if p.Bytes <= 0 {
			t.Errorf("%s: %d bytes", p.Name, p.Bytes)
		}
	}
	if m.Phases[1].Metrics["archive_bytes"] <= 0 {
		t.Errorf("tar: metrics %v", m.Phases[1].Metrics)
	}
	// untar-latest extracted the tar phase's tree (50 files), not a tree of
	// its own defaults (1000 files): the bytes match.
	if m.Phases[2].Bytes != m.Phases[1].Bytes/2 {
		t.Errorf("untar-latest extracted %d bytes, tar archived %d per iteration", m.Phases[2].Bytes, m.Phases[1].Bytes/2)
	}
}

// TestGitCloneVerifyCatchesIncompleteClone: Verify counts the commits and
// the checked-out files of every clone.
func TestGitCloneVerifyCatchesIncompleteClone(t *testing.T) {
	wfNeedGit(t)
	ctx := context.Background()
	for _, damage := range []string{"history", "checkout"} {
		env := phasestest.Env(t, "git_clone")
		p := &gitClone{cfg: defaultGitClone()}
		p.cfg.Count, p.cfg.Files, p.cfg.Dirs, p.cfg.Commits = 2, 12, 2, 4
		if err := p.Setup(ctx, env); err != nil {
			t.Fatal(err)
		}
		if err := p.Run(ctx, env); err != nil {
			t.Fatal(err)
		}
		if err := p.Verify(ctx, env); err != nil {
			t.Fatalf("intact clones: %v", err)
		}
		c := p.clones[1]
		if damage == "history" {
			if _, err := wfGit(ctx, p.env, p.root, "-C", c, "reset", "--quiet", "--hard", "HEAD~1"); err != nil {
				t.Fatal(err)
			}
		} else if err := os.Remove(filepath.Join(p.root, c, "README.md")); err != nil {
			t.Fatal(err)
		}
		if err := p.Verify(ctx, env); err == nil || !strings.Contains(err.Error(), p.pin.shown(c)) {
			t.Errorf("%s damaged: Verify said %v", damage, err)
		}
		if err := p.Teardown(ctx, env); err != nil {
			t.Fatal(err)
		}
		if ents, _ := os.ReadDir(env.RankDir); len(ents) != 0 {
			t.Errorf("teardown left %v", ents)
		}
	}
}

// TestGitClonePath clones a local repository given by path; Verify
// compares HEADs, and Teardown leaves the source alone.
func TestGitClonePath(t *testing.T) {
	wfNeedGit(t)
	src := filepath.Join(t.TempDir(), "my repo.git")
	if _, err := wfMakeRepo(context.Background(), wfGitEnv(true), filepath.Dir(src), src, wfTree{Files: 10, Dirs: 2, FileSize: 512, Seed: 3}, 3, 0); err != nil {
		t.Fatal(err)
	}
	m := wfRunPlan(t, t.TempDir(), "[[phase]]\nkind = \"git_clone\"\ncount = 2\npath = \""+src+"\"\n")
	if p := m.Phases[0]; p.Status != "passed" || p.OpsByType["clone"].Ops != 2 {
		t.Fatalf("%s: %s %v", p.Status, p.Error, p.OpsByType)
	}
	if _, err := os.Stat(filepath.Join(src, "HEAD")); err != nil {
		t.Errorf("source repository damaged: %v", err)
	}
}

func TestGitCloneNeedsGit(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := phases.DecodePlan(registry(), "p.toml", []byte("[[phase]]\nkind = \"git_clone\"\n"))
	if err == nil || !strings.Contains(err.Error(), "git") || !strings.Contains(err.Error(), "PATH") {
		t.Fatalf("decode without git: %v", err)
	}
}

func TestWorkflowValidation(t *testing.T) {
	for _, tc := range []struct{ plan, want string }{
		{"kind = \"tar\"\ncompression = \"xz\"", "compression"},
		{"kind = \"untar\"\ncompression = \"lz4\"", "compression"},
		{"kind = \"tar\"\nfiles = 0", "files"},
		{"kind = \"tar\"\ndirs = -1", "dirs"},
		{"kind = \"untar\"\nfile_size = \"1GiB\"", "file_size"},
		{"kind = \"git_clone\"\ncount = 0", "count"},
		{"kind = \"git_clone\"\ncommits = 0", "commits"},
		{"kind = \"git_clone\"\nurl = \"x\"\npath = \"y\"", "path"},
		{"kind = \"git_clone\"\nurl = \"--upload-pack=evil\"", "url"},
	} {
		_, err := phases.DecodePlan(registry(), "p.toml", []byte("[[phase]]\n"+tc.plan+"\n"))
		var pe *phases.PlanError
		if !errors.As(err, &pe) || pe.Key != tc.want {
			t.Errorf("%q: %v, want an error at key %s", tc.plan, err, tc.want)
		}
	}
}

func TestTreeDeterministic(t *testing.T) {
	tr := wfTree{Files: 100, Dirs: 9, FileSize: 3000, Seed: 7}
	dirs, files := tr.layout()
	if len(dirs) != 9 || len(files) != 100 || files[0].Rel != "README.md" || !strings.HasPrefix(dirs[8], "pkg2/mod9") {
		t.Fatalf("layout %v %v", dirs, files[:3])
	}
	var sum int64
	kinds := map[byte]int{}
	for i, f := range files {
		sum += f.Size
		kinds[f.Kind]++
		c := tr.content(nil, i, f, 0, 0)
		if int64(len(c)) != f.Size {
			t.Fatalf("%s: %d bytes, want %d", f.Rel, len(c), f.Size)
		}
		if !bytes.Equal(c, tr.content(nil, i, f, 0, 0)) || (f.Size > 64 && bytes.Equal(c, tr.content(nil, i, f, 1, 0))) {
			t.Fatalf("%s: content not deterministic per rank", f.Rel)
		}
	}
	if sum != tr.bytes() || kinds['b'] != 10 || kinds['t'] != 10 || kinds['p'] != 78 {
		t.Errorf("bytes %d vs %d, kinds %v", sum, tr.bytes(), kinds)
	}
	root := filepath.Join(t.TempDir(), "tree")
	n, err := tr.write(context.Background(), root, 0, false)
	if err != nil || n != sum {
		t.Fatalf("write: %d %v", n, err)
	}
	if c, _ := wfCountFiles(root, ".git"); c != 100 {
		t.Errorf("%d files written", c)
	}
}

// wfCraft builds an archive of the given entries with compression.
func wfCraft(t *testing.T, compression string, entries []tar.Header) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "crafted"+wfExt(compression))
	if err := os.WriteFile(path, wfCraftBytes(t, compression, entries), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// wfCraftBytes is the archive of entries (a regular file holds its own
// name), compressed.
func wfCraftBytes(t testing.TB, compression string, entries []tar.Header) []byte {
	t.Helper()
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, h := range entries {
		h := h
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(h.Name))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(h.Name))
		}
	}
	tw.Close()
	var out bytes.Buffer
	switch compression {
	case "gzip":
		zw := gzip.NewWriter(&out)
		zw.Write(raw.Bytes())
		zw.Close()
	case "zstd":
		zw, _ := zstd.NewWriter(&out)
		zw.Write(raw.Bytes())
		zw.Close()
	default:
		out = raw
	}
	return out.Bytes()
}

func wfReg(name string) tar.Header { return tar.Header{Name: name, Typeflag: tar.TypeReg} }
func wfDir(name string) tar.Header { return tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755} }
func wfSym(name, to string) tar.Header {
	return tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: to}
}
func wfHard(name, to string) tar.Header {
	return tar.Header{Name: name, Typeflag: tar.TypeLink, Linkname: to}
}

// wfListTree lists every path under dir, for "nothing escaped" checks.
func wfListTree(t *testing.T, dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// TestExtractRefusesEscapes: every way out of the target directory is
// refused with an error naming the entry, in plain, gzip and zstd
// archives, and nothing appears outside the target.
func TestExtractRefusesEscapes(t *testing.T) {
	cases := []struct {
		name    string
		entries []tar.Header
		entry   string // the entry the error must name
	}{
		{"dotdot", []tar.Header{wfReg("ok"), wfReg("../evil")}, "../evil"},
		{"dotdot inside", []tar.Header{wfDir("a/"), wfReg("a/../../evil")}, "a/../../evil"},
		{"absolute", []tar.Header{wfReg("/tmp/evil")}, "/tmp/evil"},
		{"dotdot dir", []tar.Header{wfDir("../evil/")}, "../evil/"},
		{"symlink out", []tar.Header{wfSym("ln", "../outside")}, "ln"},
		{"symlink deep out", []tar.Header{wfDir("a/b/"), wfSym("a/b/ln", "../../../x")}, "a/b/ln"},
		{"symlink absolute", []tar.Header{wfSym("ln", "/etc")}, "ln"},
		{"symlink via symlink", []tar.Header{wfDir("d/"), wfSym("d/up", ".."), wfSym("esc", "d/up/..")}, "esc"},
		{"later link redirects earlier", []tar.Header{wfDir("x/y/"), wfSym("x/y/s", "t/../../.."), wfSym("x/y/t", "../../z")}, "x/y/t"},
		{"later link redirects chain", []tar.Header{wfSym("a", "p/q/b"), wfSym("e", "a/../../.."), wfDir("p/q/"), wfSym("p/q/b", "../../z")}, "p/q/b"},
		{"symlink loop", []tar.Header{wfSym("l1", "l2"), wfSym("l2", "l1")}, "l2"},
		{"write through symlink", []tar.Header{wfDir("sub/"), wfSym("d", "sub"), wfReg("d/f")}, "d/f"},
		{"hard link out", []tar.Header{wfHard("hl", "../x")}, "hl"},
		{"hard link absolute", []tar.Header{wfHard("hl", "/etc/passwd")}, "hl"},
		{"hard link to symlink", []tar.Header{wfSym("s", "f"), wfHard("hl", "s")}, "hl"},
		{"hard link to nothing", []tar.Header{wfHard("hl", "missing")}, "hl"},
		{"device", []tar.Header{{Name: "dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}}, "dev"},
	}
	for _, compression := range wfCompressions {
		for _, tc := range cases {
			t.Run(compression+"/"+tc.name, func(t *testing.T) {
				archive := wfCraft(t, compression, tc.entries)
				parent := t.TempDir()
				target := filepath.Join(parent, "target")
				os.Mkdir(target, 0o755)
				var x wfExtractor
				if err := x.prepare(report.NewRecorder("extract_file")); err != nil {
					t.Fatal(err)
				}
				err := x.extract(context.Background(), archive, target)
				var ue *UnsafeEntryError
				if !errors.As(err, &ue) || ue.Entry != tc.entry || !strings.Contains(err.Error(), "refused") {
					t.Fatalf("error %v, want an UnsafeEntryError naming %q", err, tc.entry)
				}
				got := wfListTree(t, parent)
				for _, p := range got {
					if p != "." && p != "target" && !strings.HasPrefix(p, "target/") {
						t.Errorf("%s appeared outside the target", p)
					}
				}
			})
		}
	}
}

// TestExtractAllowsSafeLinks: links that stay inside, including chains
// made in either order (lib.so -> lib.so.1 -> lib.so.1.2), hard links to
// files of the archive and "./" names are extracted.
func TestExtractAllowsSafeLinks(t *testing.T) {
	archive := wfCraft(t, "zstd", []tar.Header{
		wfDir("./"), wfDir("./lib/"), wfSym("./lib/lib.so", "lib.so.1"), wfSym("lib/lib.so.1", "lib.so.1.2"), wfReg("lib/lib.so.1.2"),
		wfDir("a/b/"), wfSym("a/b/up", "../../lib"), wfSym("a/top", ".."), wfReg("a/b/f"), wfHard("a/hl", "a/b/f"), wfSym("dangling", "not/yet"),
	})
	target := filepath.Join(t.TempDir(), "out")
	os.Mkdir(target, 0o755)
	var x wfExtractor
	rec := report.NewRecorder("extract_file")
	if err := x.prepare(rec); err != nil {
		t.Fatal(err)
	}
	if err := x.extract(context.Background(), archive, target); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(target, "lib/lib.so")); err != nil || string(b) != "lib/lib.so.1.2" {
		t.Errorf("lib.so chain: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(target, "a/b/up/lib.so.1.2")); err != nil || string(b) != "lib/lib.so.1.2" {
		t.Errorf("a/b/up: %q %v", b, err)
	}
	if x.files != 3 || x.hardlinks != 1 || x.links != 5 || rec.Ops != 2 {
		t.Errorf("files %d hardlinks %d links %d extract_file ops %d", x.files, x.hardlinks, x.links, rec.Ops)
	}
}

// TestUntarRefusesThroughEngine: a crafted archive given to untar fails
// the phase with the entry in the manifest's error, and the workdir holds
// nothing new.
func TestUntarRefusesThroughEngine(t *testing.T) {
	for _, compression := range []string{"gzip", "zstd"} {
		archive := wfCraft(t, compression, []tar.Header{wfDir("pkg/"), wfReg("pkg/a.py"), wfReg("pkg/../../../escaped.py")})
		work := t.TempDir()
		m := wfRunPlan(t, work, "[[phase]]\nkind = \"untar\"\narchive = \""+archive+"\"\n")
		p := m.Phases[0]
		if m.Status != "failed" || p.Status != "failed" || !strings.Contains(p.Error, `"pkg/../../../escaped.py" refused`) {
			t.Errorf("%s: status %s/%s error %q", compression, m.Status, p.Status, p.Error)
		}
		if got := wfListTree(t, work); len(got) != 1 {
			t.Errorf("%s: workdir holds %v", compression, got)
		}
		if _, err := os.Stat(archive); err != nil {
			t.Errorf("the user's archive was removed: %v", err)
		}
	}
}

// TestArchiveLargeFile: files larger than the extraction buffer stream
// through in chunks and come back intact.
func TestArchiveLargeFile(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	os.MkdirAll(filepath.Join(src, "d"), 0o755)
	big := bytes.Repeat([]byte("0123456789abcdef"), 300_000) // 4.6 MiB
	os.WriteFile(filepath.Join(src, "d", "big.bin"), big, 0o644)
	os.WriteFile(filepath.Join(src, "small"), []byte("x"), 0o644)
	os.Symlink("d/big.bin", filepath.Join(src, "link"))
	for _, c := range wfCompressions {
		var a wfArchiver
		if err := a.prepare(c); err != nil {
			t.Fatal(err)
		}
		archive := filepath.Join(t.TempDir(), "a"+wfExt(c))
		files, n, err := a.write(context.Background(), src, archive, true)
		if err != nil || files != 2 || n != int64(len(big))+1 {
			t.Fatalf("%s: write %d files %d bytes: %v", c, files, n, err)
		}
		target := filepath.Join(t.TempDir(), "out")
		os.Mkdir(target, 0o755)
		var x wfExtractor
		rec := report.NewRecorder("extract_file")
		x.prepare(rec)
		if err := x.extract(context.Background(), archive, target); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(target, "link")); !bytes.Equal(b, big) || rec.Ops != 2 || x.bytes != n {
			t.Errorf("%s: big file %d bytes back, ops %d bytes %d", c, len(b), rec.Ops, x.bytes)
		}
	}
}

func TestWorkflowExamplePlan(t *testing.T) {
	wfNeedGit(t)
	src, err := examples.FS.ReadFile("workflow.toml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := phases.DecodePlan(registry(), "workflow.toml", src)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Phases {
		fp, ok := s.Phase.(phases.Footprinter)
		if !ok {
			t.Errorf("%s: no footprint", s.Name)
			continue
		}
		if f := fp.Footprint(4); f.Files <= 0 || f.Bytes <= 0 {
			t.Errorf("%s: footprint %+v", s.Name, f)
		}
	}
}

// TestArchiveCopiesThroughItsBuffer: archiving copies each file through
// the archiver's own buffer, so what it allocates per file is the header's
// bookkeeping, not a fresh 32 KiB copy buffer (io.CopyBuffer ignores its
// buffer for an *os.File, a WriterTo, unless the file is hidden behind a
// plain Reader).
func TestArchiveCopiesThroughItsBuffer(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	os.MkdirAll(src, 0o755)
	const files = 200
	body := bytes.Repeat([]byte("x"), 64<<10)
	for i := range files {
		os.WriteFile(filepath.Join(src, "f"+strings.Repeat("0", 3)+string(rune('a'+i%26))+string(rune('a'+i/26))), body, 0o644)
	}
	var a wfArchiver
	if err := a.prepare("none"); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	archive := func(name string) {
		if n, _, err := a.write(context.Background(), src, filepath.Join(out, name), false); err != nil || n != files {
			t.Fatalf("archived %d files: %v", n, err)
		}
	}
	archive("warm.tar")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	archive("a.tar")
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / files; per > 8<<10 {
		t.Errorf("archiving allocates %d bytes per 64 KiB file: a copy buffer per file", per)
	}
	if per := float64(after.Mallocs-before.Mallocs) / files; per > 10 {
		t.Errorf("archiving allocates %.1f times per file: want the header's name and the tar writer's bookkeeping only", per)
	}
	t.Logf("%.1f allocations, %d bytes per file", float64(after.Mallocs-before.Mallocs)/files, (after.TotalAlloc-before.TotalAlloc)/files)
}

// wfTreeOf lists a tree as name -> kind and content (files) or target
// (links), for comparing two trees.
func wfTreeOf(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case d.Type()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out[rel] = "link:" + l
		case d.IsDir():
			out[rel] = "dir"
		default:
			b, _ := os.ReadFile(p)
			out[rel] = "file:" + string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestArchiveRoundTrip: the descriptor-relative walk archives nested
// directories, empty ones, empty and multi-buffer files and links, and
// extracting the archive gives the same tree back.
func TestArchiveRoundTrip(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	for _, d := range []string{"a/b/c", "a/empty", "z"} {
		os.MkdirAll(filepath.Join(src, d), 0o755)
	}
	os.WriteFile(filepath.Join(src, "a/b/c/deep.txt"), []byte("deep"), 0o644)
	os.WriteFile(filepath.Join(src, "a/zero"), nil, 0o600)
	os.WriteFile(filepath.Join(src, "z/big"), bytes.Repeat([]byte("0123456789"), 250_000), 0o644)
	os.Symlink("../a/b/c/deep.txt", filepath.Join(src, "z/link"))
	var a wfArchiver
	if err := a.prepare("none"); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "a.tar")
	files, n, err := a.write(context.Background(), src, archive, false)
	if err != nil || files != 3 || n != 4+2_500_000 {
		t.Fatalf("archived %d files, %d bytes: %v", files, n, err)
	}
	target := filepath.Join(t.TempDir(), "out")
	os.Mkdir(target, 0o755)
	var x wfExtractor
	x.prepare(report.NewRecorder("extract_file"))
	if err := x.extract(context.Background(), archive, target); err != nil {
		t.Fatal(err)
	}
	want, got := wfTreeOf(t, src), wfTreeOf(t, target)
	if len(want) != 9 || len(got) != len(want) {
		t.Fatalf("source has %d entries, extraction %d", len(want), len(got))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: extracted %.30q, source %.30q", k, got[k], v)
		}
	}
}

// TestTarSource: tar with source = an absolute directory archives that
// tree (every file and byte, counted by Verify's re-read) and leaves it
// untouched.
func TestTarSource(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	os.MkdirAll(filepath.Join(src, "d"), 0o755)
	os.WriteFile(filepath.Join(src, "d", "f1"), bytes.Repeat([]byte("a"), 5000), 0o644)
	os.WriteFile(filepath.Join(src, "f2"), []byte("bb"), 0o644)
	before := wfTreeOf(t, src)
	m := wfRunPlan(t, t.TempDir(), "[[phase]]\nkind = \"tar\"\nsource = \""+src+"\"\n[[phase]]\nkind = \"untar\"\n")
	for _, ph := range m.Phases {
		if ph.Status != report.StatusPassed {
			t.Fatalf("%s: %s %s", ph.Name, ph.Status, ph.Error)
		}
	}
	if m.Phases[0].Bytes != 5002 || m.Phases[1].Bytes != 5002 || m.Phases[1].OpsByType["extract_file"].Ops != 2 {
		t.Fatalf("tar %d bytes, untar %d bytes in %d files; want 5002 in 2", m.Phases[0].Bytes, m.Phases[1].Bytes, m.Phases[1].OpsByType["extract_file"].Ops)
	}
	if after := wfTreeOf(t, src); len(after) != len(before) || after["d/f1"] != before["d/f1"] {
		t.Fatalf("the source changed: %v", after)
	}
}

// The archive is the user's: swapped after Setup found a regular file,
// for a FIFO (whose open would block) or a device, it is judged again on
// the descriptor extract reads and refused.
func TestUntarArchiveSwappedAfterSetup(t *testing.T) {
	dir := t.TempDir()
	archive := filepath.Join(dir, "a.tar")
	if err := os.Symlink("/dev/null", archive); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "out")
	os.Mkdir(target, 0o755)
	var x wfExtractor
	if err := x.prepare(report.NewRecorder("extract_file")); err != nil {
		t.Fatal(err)
	}
	err := x.extract(context.Background(), archive, target)
	if err == nil || !strings.Contains(err.Error(), "no longer a regular file") {
		t.Fatalf("%v; want the device refused", err)
	}
}
