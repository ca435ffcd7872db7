package workflow

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/phases"
)

// wfTree is the source tree the workflow phases generate: a small Python
// project — a README, a pyproject.toml, .py modules of a few KiB spread over
// nested packages, and one data file in ten (.npy binary, .csv text). Its
// layout and sizes follow from the configuration and the seed alone, so
// every rank has the same shape and `prism check` can count its bytes; the
// content also depends on the rank (and, for git history, on a version),
// so storage that deduplicates cannot fold the ranks' trees into one.
type wfTree struct {
	Files    int
	Dirs     int
	FileSize phases.Size
	Seed     uint64
}

// wfEntry is one file of a tree.
type wfEntry struct {
	Rel  string // path relative to the tree root, '/'-separated
	Size int64
	Kind byte // 'r' readme, 'c' config, 'p' python, 't' text data, 'b' binary data
}

const (
	wfMaxFiles    = 1_000_000
	wfMaxDirs     = 100_000
	wfMaxFileSize = 64 << 20
)

// validate checks the tree keys of a workflow phase.
func (t wfTree) validate() error {
	switch {
	case t.Files < 1 || t.Files > wfMaxFiles:
		return &phases.KeyError{Key: "files", Msg: fmt.Sprintf("%d out of range (1 .. %d)", t.Files, wfMaxFiles)}
	case t.Dirs < 0 || t.Dirs > wfMaxDirs:
		return &phases.KeyError{Key: "dirs", Msg: fmt.Sprintf("%d out of range (0 .. %d)", t.Dirs, wfMaxDirs)}
	case t.FileSize < 0 || t.FileSize > wfMaxFileSize:
		return &phases.KeyError{Key: "file_size", Msg: fmt.Sprintf("%s out of range (0 .. 64MiB)", t.FileSize)}
	case int64(t.Files)*int64(t.FileSize)*4 > 1<<40:
		return &phases.KeyError{Key: "file_size", Msg: "files x file_size is more than a workflow tree should hold (1TiB per rank)"}
	}
	return nil
}

// layout returns the tree's directories (parents first, relative paths)
// and files. Directory i (1-based) hangs off directory (i-1)/4, so the
// packages nest four wide.
func (t wfTree) layout() (dirs []string, files []wfEntry) {
	dirs = make([]string, t.Dirs)
	for i := 1; i <= t.Dirs; i++ {
		parent := (i - 1) / 4
		name := fmt.Sprintf("pkg%d", i)
		if parent > 0 {
			name = filepath.ToSlash(filepath.Join(dirs[parent-1], fmt.Sprintf("mod%d", i)))
		}
		dirs[i-1] = name
	}
	rng := rand.New(rand.NewPCG(t.Seed, 0x7472656573)) // sizes: seed only
	files = make([]wfEntry, 0, t.Files)
	fs := int64(t.FileSize)
	for i := 0; i < t.Files; i++ {
		var e wfEntry
		dir := ""
		if t.Dirs > 0 {
			dir = dirs[i%t.Dirs] + "/"
		}
		switch {
		case i == 0:
			e = wfEntry{Rel: "README.md", Size: fs, Kind: 'r'}
		case i == 1:
			e = wfEntry{Rel: "pyproject.toml", Size: min(fs, 1024), Kind: 'c'}
		case i%10 == 9:
			e = wfEntry{Rel: fmt.Sprintf("%sdata_%d.npy", dir, i), Size: 4 * fs, Kind: 'b'}
		case i%10 == 4:
			e = wfEntry{Rel: fmt.Sprintf("%stable_%d.csv", dir, i), Size: 2 * fs, Kind: 't'}
		default:
			// Modules vary from a quarter to 1.75x the mean size.
			e = wfEntry{Rel: fmt.Sprintf("%smodule_%d.py", dir, i), Size: fs/4 + rng.Int64N(3*fs/2+1), Kind: 'p'}
		}
		files = append(files, e)
	}
	return dirs, files
}

// bytes is the sum of the file sizes.
func (t wfTree) bytes() int64 {
	_, files := t.layout()
	var n int64
	for _, f := range files {
		n += f.Size
	}
	return n
}

var wfWords = strings.Fields(`data model batch loader config path value index result tensor shard
	step epoch rank size count buffer stream record checkpoint optimizer weight grad loss metric
	sample token vocab layer block head cache reader writer client server request response`)

// content returns file e's bytes for this rank and version in buf's
// storage (grown as needed): Python-like text for modules and text files,
// random bytes for binary data, compressible like the real thing.
func (t wfTree) content(buf []byte, i int, e wfEntry, rank, version int) []byte {
	buf = buf[:0]
	rng := rand.New(rand.NewPCG(t.Seed^uint64(rank)<<32^uint64(version), uint64(i)))
	if e.Kind == 'b' {
		buf = append(buf, "\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False}\n"...)
		for int64(len(buf)) < e.Size {
			v := rng.Uint64()
			for k := 0; k < 8; k++ {
				buf = append(buf, byte(v>>(8*k)))
			}
		}
		return buf[:e.Size]
	}
	w := func() string { return wfWords[rng.IntN(len(wfWords))] }
	switch e.Kind {
	case 'r':
		buf = fmt.Appendf(buf, "# %s-%s\n\nA %s %s for %s %s.\n\n", w(), w(), w(), w(), w(), w())
	case 'c':
		buf = fmt.Appendf(buf, "[project]\nname = \"%s-%s\"\nversion = \"0.%d.0\"\n", w(), w(), version)
	case 't':
		buf = append(buf, "step,rank,loss,throughput\n"...)
	default:
		buf = fmt.Appendf(buf, "\"\"\"The %s %s module.\"\"\"\nimport os\nimport numpy as np\n\n", w(), w())
	}
	for n := 0; int64(len(buf)) < e.Size; n++ {
		switch {
		case e.Kind == 't':
			buf = fmt.Appendf(buf, "%d,%d,%.4f,%d\n", n, rng.IntN(64), rng.Float64()*4, 1000+rng.IntN(9000))
		case e.Kind == 'r' || e.Kind == 'c':
			buf = fmt.Appendf(buf, "# %s %s %s %s.\n", w(), w(), w(), w())
		case n%6 == 0:
			buf = fmt.Appendf(buf, "\n\ndef %s_%s(%s, %s=%d):\n", w(), w(), w(), w(), rng.IntN(128))
		case n%6 == 1:
			buf = fmt.Appendf(buf, "    \"\"\"Return the %s of the %s.\"\"\"\n", w(), w())
		case n%6 == 5:
			buf = fmt.Appendf(buf, "    return %s\n", w())
		default:
			buf = fmt.Appendf(buf, "    %s = %s.%s(%s, %d)\n", w(), w(), w(), w(), rng.IntN(1<<16))
		}
	}
	return buf[:e.Size]
}

// write creates the tree under root (which must not exist yet) for rank,
// untimed, and returns the bytes written. With evict, every file's cached
// pages are dropped after writing (drop_caches = "fadvise").
func (t wfTree) write(ctx context.Context, root string, rank int, evict bool) (int64, error) {
	dirs, files := t.layout()
	if err := os.Mkdir(root, 0o755); err != nil {
		return 0, err
	}
	for _, d := range dirs {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			return 0, err
		}
	}
	var buf []byte
	var total int64
	for i, e := range files {
		if i%256 == 0 && ctx.Err() != nil {
			return total, ctx.Err()
		}
		buf = t.content(buf, i, e, rank, 0)
		if err := wfWriteFile(filepath.Join(root, e.Rel), buf, evict); err != nil {
			return total, err
		}
		total += e.Size
	}
	return total, nil
}

// wfWriteFile creates path with data (O_EXCL: a tree is written once).
func wfWriteFile(path string, data []byte, evict bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil && evict {
		err = pio.Evict(int(f.Fd()))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// wfEvictTree drops the cached pages of every regular file under root, so
// the timed op reads from storage (drop_caches = "fadvise").
func wfEvictTree(root string) error {
	return filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		err = pio.Evict(int(f.Fd()))
		f.Close()
		return err
	})
}
