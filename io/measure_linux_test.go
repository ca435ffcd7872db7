package io

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prism-hpc/prism/internal/fstest"
	"golang.org/x/sys/unix"
)

// TestMeasureAtVsPath is a measurement, not a check: it never judges a
// timing. PRISM_IO_MEASURE=1 (root, xfsprogs) runs it:
//
//	PRISM_IO_MEASURE=1 go test ./io -run TestMeasureAtVsPath -v
//
// On a fresh loop-mounted XFS it times, in each round, 20,000 creates
// (open O_CREAT|O_EXCL + close), then 20,000 stats, then 20,000 unlinks,
// once through full paths from the working directory (the Path calls, as
// the phases make them today) and once through a Dir with one-component
// Names, each side on its own files in the same directory. The sides
// alternate every 500 ops, so that both see the same background load on
// a noisy machine, and take turns going first. It
// reports each side's mean per op and the paired ratio at/path over the
// rounds with a 90% bootstrap interval. PRISM_IO_ROUNDS sets the rounds
// (default 12), PRISM_IO_FILES the files (default 20000).
func TestMeasureAtVsPath(t *testing.T) {
	if os.Getenv("PRISM_IO_MEASURE") == "" {
		t.Skip("a measurement: set PRISM_IO_MEASURE=1 to run it")
	}
	rounds := envInt("PRISM_IO_ROUNDS", 12)
	files := envInt("PRISM_IO_FILES", 20000)
	const block = 500
	mnt := mountXFS(t)
	root := openRoot(t, mnt)
	dir, err := root.EnsureSub("prism-20251201T000000Z-0123456789abcdef/03-create_files/r0/files", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	// Each side has its own files, named alike, in the same directory;
	// the two sets of names change sides every round, so that where XFS
	// puts a name is no part of the comparison.
	var names [2][]Name
	var paths [2][]Path
	for set := range 2 {
		for i := range files {
			rel := fmt.Sprintf("f%d.%d", set, i)
			names[set] = append(names[set], MustName(rel))
			paths[set] = append(paths[set], MustPath(dir.Join(rel)))
		}
	}
	t.Logf("XFS at %s, %d files per side, %d rounds, blocks of %d; full path e.g. %s", mnt, files, rounds, block, paths[0][17])
	var st unix.Stat_t
	// op runs op k (0 create, 1 stat, 2 unlink) on files [i, j) of one side.
	op := func(k int, at bool, set, i, j int) time.Duration {
		names, paths := names[set], paths[set]
		t0 := time.Now()
		for ; i < j; i++ {
			var err error
			switch {
			case k == 0 && at:
				var fd int
				if fd, err = dir.Open(names[i], unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644); err == nil {
					Close(fd)
				}
			case k == 0:
				var fd int
				if fd, err = Open(unix.AT_FDCWD, paths[i], unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644); err == nil {
					Close(fd)
				}
			case k == 1 && at:
				err = dir.Stat(names[i], &st)
			case k == 1:
				err = Stat(unix.AT_FDCWD, paths[i], &st)
			case at:
				err = dir.Unlink(names[i])
			default:
				err = Unlink(unix.AT_FDCWD, paths[i])
			}
			if err != nil {
				t.Fatalf("op %d (at %v) on file %d: %v", k, at, i, err)
			}
		}
		return time.Since(t0)
	}
	type side [3]time.Duration // create, stat, unlink
	var pathSide, atSide []side
	for r := -1; r < rounds; r++ { // round -1 warms the directory up
		var p, a side
		unix.Sync()
		for k := range 3 {
			for i := 0; i < files; i += block {
				j := min(i+block, files)
				ps, as := r&1, 1-r&1
				if (r+i/block)%2 == 0 {
					p[k] += op(k, false, ps, i, j)
					a[k] += op(k, true, as, i, j)
				} else {
					a[k] += op(k, true, as, i, j)
					p[k] += op(k, false, ps, i, j)
				}
			}
		}
		if r >= 0 {
			pathSide, atSide = append(pathSide, p), append(atSide, a)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for op, name := range []string{"create", "stat", "unlink", "all three"} {
		var ratios []float64
		var sumP, sumA time.Duration
		for r := range rounds {
			p, a := pathSide[r][min(op, 2)], atSide[r][min(op, 2)]
			if op == 3 {
				p = pathSide[r][0] + pathSide[r][1] + pathSide[r][2]
				a = atSide[r][0] + atSide[r][1] + atSide[r][2]
			}
			sumP += p
			sumA += a
			ratios = append(ratios, float64(a)/float64(p))
		}
		mean, lo, hi := bootstrap(rng, ratios, 10000)
		perOp := func(d time.Duration) float64 { return float64(d) / float64(rounds*files) / 1e3 }
		t.Logf("%-9s path %6.2f µs/op  at %6.2f µs/op  at/path %.3f  90%% interval [%.3f, %.3f]", name, perOp(sumP), perOp(sumA), mean, lo, hi)
	}
}

// bootstrap returns the mean of xs and a 90% percentile interval of the
// mean over n resamples.
func bootstrap(rng *rand.Rand, xs []float64, n int) (mean, lo, hi float64) {
	avg := func(pick func(int) float64) float64 {
		s := 0.0
		for i := range xs {
			s += pick(i)
		}
		return s / float64(len(xs))
	}
	mean = avg(func(i int) float64 { return xs[i] })
	means := make([]float64, n)
	for k := range means {
		means[k] = avg(func(int) float64 { return xs[rng.IntN(len(xs))] })
	}
	slices.Sort(means)
	return mean, means[n*5/100], means[n*95/100]
}

func envInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil && v > 0 {
		return v
	}
	return def
}

// mountXFS makes a fresh XFS in a sparse image and loop-mounts it for the
// test's lifetime.
func mountXFS(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a loop device")
	}
	mkfs, err := exec.LookPath("mkfs.xfs")
	if err != nil {
		t.Skip("mkfs.xfs missing: apt-get install xfsprogs")
	}
	img := filepath.Join(t.TempDir(), "io-safe-xfs.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if out, err := exec.Command(mkfs, "-q", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.xfs: %v: %s", err, out)
	}
	return fstest.Mount(t, "-o", "loop", img)
}
