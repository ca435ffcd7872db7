package dataload

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/phasestest"
	"github.com/prism-hpc/prism/report"
)

// runDataPlan runs plan with reg and returns the outcome and what it
// printed.
func runDataPlan(t *testing.T, reg *phases.Registry, plan string) (*phases.Outcome, string) {
	t.Helper()
	res := phasestest.Run(t, reg, plan, phasestest.File("data.toml"))
	return res.Outcome, res.Stdout + res.Stderr
}

// registry is the dataload family alone.
func registry() *phases.Registry {
	r := phases.NewRegistry()
	Register(r)
	return r
}

func TestDatasetOrder(t *testing.T) {
	isPerm := func(o []int, n int) bool {
		s := slices.Clone(o)
		sort.Ints(s)
		for i := range s {
			if s[i] != i {
				return false
			}
		}
		return len(s) == n
	}
	for _, order := range md5Orders {
		for _, n := range []int{0, 1, 7, 100} {
			o := datasetOrder(n, order, 42, 3, 0)
			if !isPerm(o, n) {
				t.Errorf("%s n=%d: %v is not a permutation", order, n, o)
			}
		}
	}
	a, b := datasetOrder(100, "random", 42, 1, 0), datasetOrder(100, "random", 42, 1, 0)
	if !slices.Equal(a, b) {
		t.Error("random: same seed and epoch gave different orders")
	}
	if slices.Equal(a, datasetOrder(100, "random", 43, 1, 0)) {
		t.Error("random: different seeds gave the same order")
	}
	if slices.Equal(a, datasetOrder(100, "random", 42, 1, 1)) {
		t.Error("random: a new epoch gave the same order")
	}
	// The order is part of the compatibility promise: a seeded run reads
	// the files in the same order with every version of prism and Go.
	if got, want := datasetOrder(8, "random", 1, 1, 0), []int{1, 0, 7, 6, 4, 3, 5, 2}; !slices.Equal(got, want) {
		t.Errorf("random order of 8 with seed 1 is %v, was %v: a change breaks reproducibility across versions", got, want)
	}
	if got, want := datasetOrder(7, "strided", 0, 3, 0), []int{0, 3, 6, 1, 4, 2, 5}; !slices.Equal(got, want) {
		t.Errorf("strided: got %v, want %v", got, want)
	}
}

func TestDatasetSizes(t *testing.T) {
	k := DatasetKeys{Sizes: []phases.Size{10, 20}, Copies: 2}
	if got := k.fileSizes(); !slices.Equal(got, []int64{10, 20, 10, 20}) {
		t.Errorf("copies: %v", got)
	}
	k.Total = 45
	if got := k.fileSizes(); !slices.Equal(got, []int64{10, 20, 10, 5}) {
		t.Errorf("total: %v", got)
	}
	if got := datasetName(3, 4); got != "d0001/f0000004.bin" {
		t.Errorf("sharded name %s", got)
	}
	if got := datasetName(1, 4); got != "f0000004.bin" {
		t.Errorf("flat name %s", got)
	}
}

// TestDatasetContent: the same seed gives the same bytes (MD5s), whether
// the content is generated in setup or chunk by chunk during the run; a
// different seed gives different bytes.
func TestDatasetContent(t *testing.T) {
	sums := func(seed int64, budget phases.Size) []string {
		dir := t.TempDir()
		env := phasestest.EnvIn(t, "create_dataset", dir)
		p := &createDataset{cfg: defaultCreateDatasetConfig()}
		p.cfg.Sizes = []phases.Size{5000, 300 << 10}
		p.cfg.Copies = 2
		p.cfg.Chunk = 64 << 10
		p.cfg.Seed = seed
		p.cfg.BufferBudget = budget
		if err := p.prepare(env, "data"); err != nil {
			t.Fatal(err)
		}
		if err := p.write(context.Background(), env, report.NewRecorder("create")); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range p.mine {
			b, err := os.ReadFile(filepath.Join(dir, "data", f.Path))
			if err != nil {
				t.Fatal(err)
			}
			s := md5.Sum(b)
			if hex.EncodeToString(s[:]) != f.MD5 {
				t.Errorf("%s: recorded MD5 %s does not match the file", f.Path, f.MD5)
			}
			out = append(out, f.MD5)
		}
		return out
	}
	a, streamed := sums(7, 1<<30), sums(7, 0)
	// Part of the compatibility promise: a dataset written by this version
	// verifies with the next, on any machine.
	if want := "1e0e8359154cfb0efc542b8fa280ee5f"; a[0] != want {
		t.Errorf("seed 7, file 0 (5000 bytes): MD5 %s, was %s", a[0], want)
	}
	if !slices.Equal(a, streamed) {
		t.Errorf("same seed, content in setup vs during the run: %v vs %v", a, streamed)
	}
	if b := sums(8, 1<<30); slices.Equal(a, b) || a[0] == b[0] {
		t.Errorf("different seeds gave the same content")
	}
	if a[0] == a[2] {
		t.Error("two copies of one size have the same content")
	}
}

// TestCreateDatasetThenMD5Check runs the two phases through the engine:
// every file is written once and read epochs times, in every order, with
// the cache bypassed each way.
func TestCreateDatasetThenMD5Check(t *testing.T) {
	plan := `[plan]
drop_caches = "none"
[[phase]]
kind = "create_dataset"
sizes = ["8KiB", "100KiB", "5000"]
copies = 3
subdirs = 4
chunk = "64KiB"
[[phase]]
kind = "md5_check"
name = "seq"
chunk = "16KiB"
[[phase]]
kind = "md5_check"
name = "rand"
order = "random"
seed = 3
epochs = 2
fadvise = "dontneed"
[[phase]]
kind = "md5_check"
name = "strided-direct"
order = "strided"
stride = 4
direct = true
chunk = "8KiB"
[[phase]]
kind = "md5_check"
name = "shared-fadvise"
shared = true
drop_caches = "fadvise"
`
	out, log := runDataPlan(t, registry(), plan)
	if out.Status != report.StatusPassed {
		t.Fatalf("status %s\n%s", out.Status, log)
	}
	const files, bytes = 9, 3 * (8<<10 + 100<<10 + 5000)
	cd := phasestest.Phase(t, out.Manifest, "create_dataset")
	if cd.OpsByType["create"].Ops != files || cd.Bytes != bytes {
		t.Errorf("create_dataset: %d creates, %d bytes; want %d, %d", cd.OpsByType["create"].Ops, cd.Bytes, files, bytes)
	}
	for name, epochs := range map[string]int{"seq": 1, "rand": 2, "strided-direct": 1, "shared-fadvise": 1} {
		ph := phasestest.Phase(t, out.Manifest, name)
		if got := ph.OpsByType["file"].Ops; got != int64(files*epochs) {
			t.Errorf("%s: %d file ops, want %d", name, got, files*epochs)
		}
		if ph.Bytes != int64(bytes*epochs) {
			t.Errorf("%s: %d bytes, want %d", name, ph.Bytes, bytes*epochs)
		}
	}
	if c := phasestest.Phase(t, out.Manifest, "shared-fadvise").Cache.Applied; c != "fadvise" {
		t.Errorf("shared-fadvise: cache %q applied, want fadvise", c)
	}
}

// TestMD5CheckOwnDataset: without a create_dataset, md5_check writes its
// own dataset in setup and checks it.
func TestMD5CheckOwnDataset(t *testing.T) {
	out, log := runDataPlan(t, registry(), `[plan]
drop_caches = "none"
[[phase]]
kind = "md5_check"
sizes = ["4KiB", "12345"]
copies = 2
order = "random"
iterations = 2
`)
	if out.Status != report.StatusPassed {
		t.Fatalf("status %s\n%s", out.Status, log)
	}
	if ph := phasestest.Phase(t, out.Manifest, "md5_check"); ph.OpsByType["file"].Ops != 8 {
		t.Errorf("%d file ops over 2 iterations, want 8", ph.OpsByType["file"].Ops)
	}
}

// flipByte is a test phase that flips one byte of file 2 of the latest
// dataset in its setup.
type flipByte struct{}

func (flipByte) Config() any { return &struct{}{} }
func (flipByte) Setup(ctx context.Context, env *phases.Env) error {
	ds := env.State[stateDataset].(*dataset)
	path := filepath.Join(ds.Dir, ds.Files[2].Path)
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	b[len(b)/2] ^= 0x40
	return os.WriteFile(path, b, 0o644)
}
func (flipByte) Run(context.Context, *phases.Env) error      { return nil }
func (flipByte) Verify(context.Context, *phases.Env) error   { return nil }
func (flipByte) Teardown(context.Context, *phases.Env) error { return nil }

// TestMD5CheckNamesCorruptFile: a byte changed after create_dataset fails
// md5_check with the file named.
func TestMD5CheckNamesCorruptFile(t *testing.T) {
	reg := registry()
	reg.Register(phases.Kind{Name: "flip_byte", Family: "test", New: func() phases.Phase { return flipByte{} }})
	out, log := runDataPlan(t, reg, `[plan]
drop_caches = "none"
[[phase]]
kind = "create_dataset"
sizes = ["8KiB"]
copies = 5
subdirs = 2
[[phase]]
kind = "flip_byte"
[[phase]]
kind = "md5_check"
`)
	if out.Status != report.StatusFailed {
		t.Fatalf("status %s, want failed\n%s", out.Status, log)
	}
	ph := phasestest.Phase(t, out.Manifest, "md5_check")
	want := filepath.Join("d0000", "f0000002.bin")
	if !strings.Contains(ph.Error, "MD5 mismatch") || !strings.Contains(ph.Error, want) {
		t.Errorf("error %q does not name %s", ph.Error, want)
	}
}

func TestDataPlanErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`kind = "create_dataset"` + "\nsizes = []", "sizes"},
		{`kind = "create_dataset"` + "\nchunk = \"1000\"", "chunk"},
		{`kind = "md5_check"` + "\norder = \"backwards\"", "order"},
		{`kind = "md5_check"` + "\nfadvise = \"willneed\"", "fadvise"},
		{`kind = "md5_check"` + "\ndirect = true\nchunk = \"1000\"", "chunk"},
	} {
		_, err := phases.DecodePlan(registry(), "bad.toml", []byte("[[phase]]\n"+tc.body+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one about %s", tc.body, err, tc.want)
		}
	}
}

// TestMD5CheckLoopAllocatesNothing: the read loop (open, preads, MD5,
// close, compare) allocates nothing per file.
func TestMD5CheckLoopAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	env := phasestest.EnvIn(t, "md5_check", dir)
	cd := &createDataset{cfg: defaultCreateDatasetConfig()}
	cd.cfg.Sizes, cd.cfg.Copies = []phases.Size{10000}, 4
	if err := cd.prepare(env, "data"); err != nil {
		t.Fatal(err)
	}
	if err := cd.write(ctx, env, report.NewRecorder("create")); err != nil {
		t.Fatal(err)
	}
	if _, err := cd.share(ctx, env); err != nil {
		t.Fatal(err)
	}
	p := &md5Check{cfg: defaultMD5Config()}
	p.cfg.Chunk, p.cfg.Order, p.cfg.Epochs = 4096, "random", 3
	if err := p.Setup(ctx, env); err != nil {
		t.Fatal(err)
	}
	if err := p.Run(ctx, env); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(5, func() {
		if err := p.Run(ctx, env); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("md5_check's loop over 12 files allocates %.0f times", allocs)
	}
}
