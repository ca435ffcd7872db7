package workflow

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/prism-hpc/prism/report"
)

func extractor(t testing.TB, l wfLimits) *wfExtractor {
	x := &wfExtractor{limits: l}
	if err := x.prepare(report.NewRecorder("extract_file")); err != nil {
		t.Fatal(err)
	}
	return x
}

func target(t testing.TB) string {
	d := filepath.Join(t.TempDir(), "target")
	os.Mkdir(d, 0o755)
	return d
}

// A gzip bomb (300 MB of zeros in a ~300 KB archive) is refused on its
// header, before anything is written, by the default limit (64 x the
// archive, at least 64 MiB); raising max_bytes lets it through.
func TestExtractRefusesGzipBomb(t *testing.T) {
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	tw := tar.NewWriter(gz)
	const size = 300 << 20
	tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Mode: 0o644, Size: size})
	zero := make([]byte, 1<<20)
	for range size >> 20 {
		tw.Write(zero)
	}
	tw.Close()
	gz.Close()
	archive := filepath.Join(t.TempDir(), "bomb.tar.gz")
	os.WriteFile(archive, buf.Bytes(), 0o644)
	limit := max(int64(64<<20), 64*int64(buf.Len()))
	tgt := target(t)
	err := extractor(t, wfLimits{bytes: limit}).extract(context.Background(), archive, tgt)
	var le *LimitError
	if !errors.As(err, &le) || le.Entry != "zeros" || !strings.Contains(err.Error(), "max_bytes") {
		t.Fatalf("a %d-byte archive declaring %d bytes: %v", buf.Len(), size, err)
	}
	if ents, _ := os.ReadDir(tgt); len(ents) != 0 {
		t.Errorf("wrote %v before refusing", ents)
	}
}

// A sparse file archived by GNU tar (--sparse) extracts as a sparse file:
// its logical size, its data, and holes where it had holes. A sparse bomb
// (a terabyte of holes) is refused by max_bytes on its header.
func TestExtractSparse(t *testing.T) {
	gnutar, err := exec.LookPath("tar")
	if err != nil {
		t.Skip("GNU tar not installed")
	}
	src := t.TempDir()
	f, _ := os.Create(filepath.Join(src, "sparse"))
	f.WriteAt([]byte("head"), 0)
	f.WriteAt([]byte("tail"), 200<<20)
	f.Close()
	archive := filepath.Join(t.TempDir(), "sparse.tar")
	if out, err := exec.Command(gnutar, "--sparse", "--format=posix", "-C", src, "-cf", archive, "sparse").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}
	tgt := target(t)
	if err := extractor(t, wfLimits{bytes: 1 << 30}).extract(context.Background(), archive, tgt); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(tgt, "sparse"), &st); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(tgt, "sparse"))
	if st.Size != 200<<20+4 || string(b[:4]) != "head" || string(b[200<<20:]) != "tail" {
		t.Fatalf("size %d, head %q", st.Size, b[:4])
	}
	if used := st.Blocks * 512; used > 1<<20 {
		t.Errorf("the 200 MiB sparse file takes %d bytes on disk: its holes were written as zeros", used)
	}
	// The bomb: one entry declaring 1 TiB, almost all holes.
	big := filepath.Join(src, "big")
	f, _ = os.Create(big)
	f.Truncate(1 << 40)
	f.Close()
	bomb := filepath.Join(t.TempDir(), "bomb.tar")
	if out, err := exec.Command(gnutar, "--sparse", "--format=posix", "-C", src, "-cf", bomb, "big").CombinedOutput(); err != nil {
		t.Skipf("tar cannot archive a 1 TiB sparse file here: %v %s", err, out)
	}
	err = extractor(t, wfLimits{bytes: 64 << 20}).extract(context.Background(), bomb, target(t))
	var le *LimitError
	if !errors.As(err, &le) || !strings.Contains(err.Error(), "max_bytes") {
		t.Fatalf("a 1 TiB sparse entry: %v", err)
	}
}

// Depth and entry count are limited on the header: a 100,000-level name
// is refused at once, and so is the entry past max_entries.
func TestExtractLimitsDepthAndEntries(t *testing.T) {
	deep := strings.Repeat("d/", 100_000) + "f"
	var entries []tar.Header
	for i := range 20 {
		entries = append(entries, wfReg("f"+string(rune('a'+i))))
	}
	cases := []struct {
		name    string
		entries []tar.Header
		limits  wfLimits
		want    string
	}{
		{"depth", []tar.Header{wfReg(deep)}, wfLimits{depth: 256}, "max_depth"},
		{"entries", entries, wfLimits{entries: 10}, "max_entries"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			archive := wfCraft(t, "none", tc.entries)
			tgt := target(t)
			err := extractor(t, tc.limits).extract(context.Background(), archive, tgt)
			var le *LimitError
			if !errors.As(err, &le) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want a LimitError naming %s", err, tc.want)
			}
			if n := len(wfListTree(t, tgt)); tc.name == "entries" && n != 11 {
				t.Errorf("%d paths extracted before the limit, want 10 and the target", n)
			}
		})
	}
}

// FuzzExtract: no archive may panic the extractor, hang it, or make it
// write anything outside its target.
func FuzzExtract(f *testing.F) {
	for _, c := range wfCompressions {
		f.Add(wfCraftBytes(f, c, []tar.Header{wfDir("a/"), wfReg("a/f"), wfSym("a/l", "f"), wfHard("h", "a/f")}))
	}
	f.Add(wfCraftBytes(f, "none", []tar.Header{wfReg("../evil"), wfSym("ln", "/etc")}))
	f.Fuzz(func(t *testing.T, b []byte) {
		parent := t.TempDir()
		archive := filepath.Join(parent, "a.tar")
		os.WriteFile(archive, b, 0o644)
		tgt := filepath.Join(parent, "target")
		os.Mkdir(tgt, 0o755)
		x := extractor(t, wfLimits{bytes: 16 << 20, entries: 1000, depth: 64})
		_ = x.extract(context.Background(), archive, tgt) // errors are expected; panics and escapes are not
		for _, p := range wfListTree(t, parent) {
			if p != "." && p != "a.tar" && p != "target" && !strings.HasPrefix(p, "target/") {
				t.Fatalf("%s appeared outside the target", p)
			}
		}
	})
}
