package phases

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"math/bits"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/report"
	"github.com/prism-hpc/prism/spmd"
)

// The data family (PRISM §3.1.3, §3.1.5): create_dataset writes a
// deterministic dataset and records the MD5 of every file as it is
// generated; md5_check reads a dataset back in a seeded order and checks
// every file against those sums; train (train.go) emulates MLPerf
// Storage's training workload on such files.
//
// A dataset's content is io.Generator "deterministic" data: file i is
// stream i of the generator keyed by the seed, so the same seed gives the
// same bytes on every run and machine, whatever the chunk size or the
// number of ranks that wrote it. Files are assigned to ranks round-robin by
// index. At the end of create_dataset every rank holds the manifest of the
// whole dataset (paths, sizes, MD5s) in Env.State, so the phases after it
// can read any file, also at another rank count.

func registerData(r *Registry) {
	r.Register(Kind{Name: "create_dataset", Family: "dataload",
		Summary: "write a deterministic dataset (sizes x copies, or total bytes) over subdirs, files round-robin over ranks, MD5 of each recorded at generation; op create (open, writes, fsync, close; data generation excluded)",
		New:     func() Phase { return &createDataset{cfg: defaultCreateDatasetConfig()} }})
	r.Register(Kind{Name: "md5_check", Family: "dataload",
		Summary: "read every file of the latest create_dataset (or its own) in sequential, random or strided order for epochs, MD5 each and compare; ops read (one pread), file (open, reads, MD5, close)",
		New:     func() Phase { return &md5Check{cfg: defaultMD5Config()} }})
	r.Register(Kind{Name: "train", Family: "dataload",
		Summary: "MLPerf Storage training emulation (DLIO): simulated accelerators compute compute_time per batch while read_threads prefetch samples; AU%, samples/s, MiB/s as [METRIC] lines; op read (open, pread of a sample, close)",
		New:     func() Phase { return &train{cfg: defaultTrainConfig()} }})
	r.Register(Kind{Name: "synthetic_workload", Family: "generate",
		Summary: "create files with seeded arrivals (deterministic, poisson, burst) and sizes (fixed, exponential, uniform, lognormal); op create; metric arrival_rate_per_sec",
		New:     func() Phase { return &syntheticWorkload{cfg: defaultSyntheticConfig()} }})
}

// DatasetKeys choose a dataset's files and content.
type DatasetKeys struct {
	Sizes   []Size `toml:"sizes" doc:"file sizes; with copies, copies files of each size; with total, cycled until total bytes"`
	Copies  int    `toml:"copies" doc:"files of each size (ignored when total is set)"`
	Total   Size   `toml:"total" doc:"dataset bytes: files of sizes in turn until this total (the last one shortened); 0 = sizes x copies"`
	Subdirs int    `toml:"subdirs" doc:"0 or 1 = one flat directory; N = files spread over N subdirectories (file i in d<i % N>)"`
	Seed    int64  `toml:"seed" doc:"content seed: the same seed gives the same bytes on every run and machine"`
}

const maxDatasetFiles = 10_000_000

func defaultDatasetKeys() DatasetKeys {
	return DatasetKeys{Sizes: []Size{8 << 10, 1 << 20}, Copies: 4, Seed: 1}
}

// validate checks the keys; prefix names them in messages.
func (k *DatasetKeys) validate(prefix string) error {
	if len(k.Sizes) == 0 {
		return &KeyError{Key: prefix + "sizes", Msg: "empty: give at least one file size"}
	}
	for _, s := range k.Sizes {
		if s < 1 || s > 1<<40 {
			return &KeyError{Key: prefix + "sizes", Msg: fmt.Sprintf("%s out of range (1 .. 1TiB)", s)}
		}
	}
	switch {
	case k.Copies < 1 || k.Copies > maxDatasetFiles:
		return &KeyError{Key: prefix + "copies", Msg: fmt.Sprintf("%d out of range (1 .. %d)", k.Copies, maxDatasetFiles)}
	case k.Total < 0 || k.Total > 1<<50:
		return &KeyError{Key: prefix + "total", Msg: fmt.Sprintf("%s out of range (0 .. 1PiB)", k.Total)}
	case k.Subdirs < 0 || k.Subdirs > 1_000_000:
		return &KeyError{Key: prefix + "subdirs", Msg: fmt.Sprintf("%d out of range (0 .. 1000000)", k.Subdirs)}
	}
	if n := len(k.fileSizes()); n > maxDatasetFiles {
		return &KeyError{Key: prefix + "total", Msg: fmt.Sprintf("%d files: more than %d", n, maxDatasetFiles)}
	}
	return nil
}

// fileSizes lists the size of every file of the dataset, by index.
func (k *DatasetKeys) fileSizes() []int64 {
	var out []int64
	if k.Total > 0 {
		left := int64(k.Total)
		for i := 0; left > 0 && len(out) <= maxDatasetFiles; i++ {
			s := min(int64(k.Sizes[i%len(k.Sizes)]), left)
			out = append(out, s)
			left -= s
		}
		return out
	}
	for c := 0; c < k.Copies; c++ {
		for _, s := range k.Sizes {
			out = append(out, int64(s))
		}
	}
	return out
}

// datasetPath is where file i of a dataset in dir lives.
func datasetPath(dir string, subdirs, i int) string {
	if subdirs > 1 {
		return filepath.Join(dir, fmt.Sprintf("d%04d", i%subdirs), fmt.Sprintf("f%07d.bin", i))
	}
	return filepath.Join(dir, fmt.Sprintf("f%07d.bin", i))
}

// dsFile is one file of a dataset manifest.
type dsFile struct {
	Index int    `json:"i"`
	Path  string `json:"p"`
	Size  int64  `json:"s"`
	MD5   string `json:"m"` // hex, computed from the generated bytes
}

// dataset is what create_dataset leaves in Env.State: the whole dataset,
// the same on every rank that ran it.
type dataset struct {
	Phase string   `json:"phase"`
	Stamp int64    `json:"stamp"` // later phases have larger stamps
	Dir   string   `json:"dir"`
	Seed  int64    `json:"seed"`
	Bytes int64    `json:"bytes"`
	Files []dsFile `json:"files"`
}

const stateDataset = "prism.dataset"

// datasetStamp orders datasets by the phase and sweep size that wrote
// them, the same on every rank (sweep sizes run in increasing order).
func datasetStamp(env *Env) int64 { return int64(env.phaseIndex)<<32 | int64(env.Size) }

// agreeDataset makes every rank of a phase use the newest dataset any of
// them knows: a rank that sat out the create_dataset (a smaller sweep size,
// the other side of a group) gets the manifest from one that ran it. It
// returns nil on every rank when none of them knows a dataset.
func agreeDataset(ctx context.Context, env *Env) (*dataset, error) {
	mine, _ := env.State[stateDataset].(*dataset)
	v := []int64{-1}
	if mine != nil {
		v[0] = mine.Stamp
	}
	if err := env.Comm.AllreduceInt64(ctx, spmd.Max, v); err != nil {
		return nil, err
	}
	if v[0] < 0 {
		return nil, nil
	}
	root := []int64{int64(env.Size)}
	if mine != nil && mine.Stamp == v[0] {
		root[0] = int64(env.Rank)
	}
	if err := env.Comm.AllreduceInt64(ctx, spmd.Min, root); err != nil {
		return nil, err
	}
	if env.Size == 1 {
		return mine, nil
	}
	var b []byte
	if int(root[0]) == env.Rank {
		b, _ = json.Marshal(mine)
	}
	b, err := env.Comm.Bcast(ctx, int(root[0]), b)
	if err != nil {
		return nil, err
	}
	if mine != nil && mine.Stamp == v[0] {
		return mine, nil
	}
	ds := &dataset{}
	if err := json.Unmarshal(b, ds); err != nil {
		return nil, env.Errorf("dataset manifest from rank %d: %w", root[0], err)
	}
	env.State[stateDataset] = ds
	return ds, nil
}

// ---------------------------------------------------------------------------
// create_dataset

type createDatasetConfig struct {
	DatasetKeys
	Chunk        Size `toml:"chunk" doc:"bytes per write(2), a multiple of 4KiB"`
	Fsync        bool `toml:"fsync" doc:"fsync every file before closing it (inside the create op)"`
	BufferBudget Size `toml:"buffer_budget" doc:"memory per rank for content generated in setup; a larger share is generated chunk by chunk during the run, between the timed writes (wall time then includes generation)"`
}

func defaultCreateDatasetConfig() createDatasetConfig {
	return createDatasetConfig{DatasetKeys: defaultDatasetKeys(), Chunk: 1 << 20, BufferBudget: 256 << 20}
}

func (c *createDatasetConfig) Validate() error {
	if err := c.DatasetKeys.validate(""); err != nil {
		return err
	}
	if err := validateIOSize("chunk", c.Chunk); err != nil {
		return err
	}
	if c.BufferBudget < 0 || c.BufferBudget > 1<<40 {
		return &KeyError{Key: "buffer_budget", Msg: fmt.Sprintf("%s out of range (0 .. 1TiB)", c.BufferBudget)}
	}
	return nil
}

type createDataset struct {
	cfg   createDatasetConfig
	dir   string
	sizes []int64 // every file of the dataset
	mine  []dsFile
	paths []pio.Path
	gen   *pio.Generator
	arena []byte  // this rank's content generated in setup, or nil
	offs  []int64 // offset of each of mine in arena
	buf   []byte
	h     hash.Hash
	sum   [md5.Size]byte
	made  int
	ok    bool
}

func (p *createDataset) Config() any { return &p.cfg }

// ExpectedOps lets the progress line give an ETA.
func (p *createDataset) ExpectedOps() int64 { return int64(len(p.mine)) }

func (p *createDataset) Footprint(ranks int) Footprint {
	sizes := p.cfg.fileSizes()
	var f, b int64
	for i, s := range sizes {
		if i%ranks == 0 {
			f++
			b += s
		}
	}
	return Footprint{Files: f, Bytes: b}
}

// prepare lays out this rank's share of the dataset under dir and
// generates its content when it fits the buffer budget.
func (p *createDataset) prepare(env *Env, dir string) error {
	c := &p.cfg
	p.dir = dir
	p.sizes = c.fileSizes()
	p.mine, p.paths, p.offs = p.mine[:0], p.paths[:0], p.offs[:0]
	p.made, p.ok = 0, false
	var share int64
	for i := env.Rank; i < len(p.sizes); i += env.Size {
		p.mine = append(p.mine, dsFile{Index: i, Path: datasetPath(dir, c.Subdirs, i), Size: p.sizes[i]})
		p.offs = append(p.offs, share)
		share += p.sizes[i]
	}
	made := map[string]bool{}
	for i := range p.mine {
		d := filepath.Dir(p.mine[i].Path)
		if !made[d] {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return env.Errorf("setup: mkdir %s: %w%s", d, err, pio.Remedy(err))
			}
			made[d] = true
		}
		p.paths = append(p.paths, pio.MustPath(p.mine[i].Path))
	}
	var err error
	if p.gen, err = pio.NewGenerator(pio.GenConfig{Kind: pio.GenDeterministic, Seed: uint64(c.Seed)}); err != nil {
		return env.Errorf("setup: %w", err)
	}
	p.h = md5.New()
	if len(p.buf) != int(c.Chunk) {
		p.buf = make([]byte, c.Chunk)
	}
	p.arena = nil
	if share <= int64(c.BufferBudget) {
		p.arena = make([]byte, share)
		for i := range p.mine {
			f := &p.mine[i]
			b := p.arena[p.offs[i] : p.offs[i]+f.Size]
			p.gen.FillStream(b, uint64(f.Index), 0)
			s := md5.Sum(b)
			f.MD5 = hex.EncodeToString(s[:])
		}
	}
	return nil
}

func (p *createDataset) Setup(ctx context.Context, env *Env) error {
	// A later iteration writes the dataset again: remove the last one's
	// files (untimed) so the creates are creates.
	if err := p.remove(env); err != nil {
		return err
	}
	return p.prepare(env, filepath.Join(env.Dir, "data"))
}

func (p *createDataset) Run(ctx context.Context, env *Env) error {
	return p.write(ctx, env, env.Recorder("create"))
}

// write creates this rank's files. The create op of a file is the sum of
// its open, writes, fsync and close; content generated during the run (a
// share over buffer_budget) and its MD5 happen between those and are not
// part of it.
func (p *createDataset) write(ctx context.Context, env *Env, rec *report.Recorder) error {
	chunk := int64(p.cfg.Chunk)
	done := ctx.Done()
	for i := range p.mine {
		select {
		case <-done:
			return ctx.Err()
		default:
		}
		f := &p.mine[i]
		path := &p.paths[i]
		if p.arena == nil {
			p.h.Reset()
		}
		start := rec.BeginOn(path.Name())
		fd, err := pio.Open(unix.AT_FDCWD, *path, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
		ns := time.Since(start)
		if err != nil {
			rec.ObserveNs(int64(ns), 0, err)
			return env.Errorf("create %s: %w%s", path, err, pio.Remedy(err))
		}
		p.made++
		for off := int64(0); off < f.Size && err == nil; off += chunk {
			n := min(chunk, f.Size-off)
			var b []byte
			if p.arena != nil {
				b = p.arena[p.offs[i]+off : p.offs[i]+off+n]
			} else {
				b = p.buf[:n]
				p.gen.FillStream(b, uint64(f.Index), off/pio.DefaultGenBlock)
				p.h.Write(b)
			}
			t := rec.Begin()
			_, err = pio.PwriteFull(fd, b, off)
			ns += time.Since(t)
		}
		t := rec.Begin()
		if err == nil && p.cfg.Fsync {
			err = pio.Fsync(fd)
		}
		if cerr := pio.Close(fd); err == nil {
			err = cerr
		}
		ns += time.Since(t)
		rec.ObserveNs(int64(ns), f.Size, err)
		if err != nil {
			return env.Errorf("write %s: %w%s", path, err, pio.Remedy(err))
		}
		if p.arena == nil {
			f.MD5 = hex.EncodeToString(p.h.Sum(p.sum[:0]))
		}
	}
	return nil
}

// share gathers every rank's files into the manifest of the whole
// dataset, hands it to every rank and records it in Env.State.
func (p *createDataset) share(ctx context.Context, env *Env) (*dataset, error) {
	b, _ := json.Marshal(p.mine)
	all, err := env.Comm.Gather(ctx, 0, b)
	if err != nil {
		return nil, err
	}
	var out []byte
	if env.Rank == 0 {
		var files []dsFile
		for r, raw := range all {
			var part []dsFile
			if err := json.Unmarshal(raw, &part); err != nil {
				return nil, env.Errorf("verify: bad file list from rank %d: %w", r, err)
			}
			files = append(files, part...)
		}
		sort.Slice(files, func(i, j int) bool { return files[i].Index < files[j].Index })
		ds := &dataset{Phase: env.Name, Stamp: datasetStamp(env), Dir: p.dir, Seed: p.cfg.Seed, Files: files}
		for _, f := range files {
			ds.Bytes += f.Size
		}
		out, _ = json.Marshal(ds)
	}
	if out, err = env.Comm.Bcast(ctx, 0, out); err != nil {
		return nil, err
	}
	ds := &dataset{}
	if err := json.Unmarshal(out, ds); err != nil {
		return nil, env.Errorf("verify: dataset manifest: %w", err)
	}
	if len(ds.Files) != len(p.sizes) {
		return nil, env.Errorf("verify: the ranks wrote %d files, want %d", len(ds.Files), len(p.sizes))
	}
	env.State[stateDataset] = ds
	return ds, nil
}

// Verify checks every file of this rank has its size and shares the
// manifest.
func (p *createDataset) Verify(ctx context.Context, env *Env) error {
	for _, f := range p.mine {
		st, err := os.Stat(f.Path)
		if err != nil {
			return env.Errorf("verify: %w", err)
		}
		if st.Size() != f.Size {
			return env.Errorf("verify: %s holds %d bytes, want %d", f.Path, st.Size(), f.Size)
		}
	}
	ds, err := p.share(ctx, env)
	if err != nil {
		return err
	}
	if env.Rank == 0 {
		env.SetMetric("dataset_files", float64(len(ds.Files)))
		env.SetMetric("dataset_bytes", float64(ds.Bytes))
	}
	p.ok = true
	return nil
}

// Teardown removes a partial dataset; a complete one stays for the phases
// after it (the run directory's cleanup removes it).
func (p *createDataset) Teardown(ctx context.Context, env *Env) error {
	if p.ok {
		return nil
	}
	return p.remove(env)
}

func (p *createDataset) remove(env *Env) error {
	var first error
	for _, path := range p.paths[:p.made] {
		if err := pio.Unlink(unix.AT_FDCWD, path); err != nil && err != unix.ENOENT && first == nil {
			first = env.Errorf("unlink %s: %w", path, err)
		}
	}
	p.made = 0
	return first
}

// ---------------------------------------------------------------------------
// md5_check

type md5Config struct {
	Chunk   Size   `toml:"chunk" doc:"bytes per read(2); a multiple of 4KiB with direct = true"`
	Order   string `toml:"order" doc:"sequential | random (a new seeded permutation every epoch) | strided (0, stride, 2*stride, ... then 1, 1+stride, ...)"`
	OrdSeed int64  `toml:"seed" doc:"seed of the random order: permutation = f(seed, epoch), like a seeded DataLoader"`
	Stride  int    `toml:"stride" doc:"file stride of order = \"strided\""`
	Epochs  int    `toml:"epochs" doc:"passes over the dataset"`
	Shared  bool   `toml:"shared" doc:"every rank reads the whole dataset (contention); default: the files are sharded over the ranks"`
	Fadvise string `toml:"fadvise" doc:"\"dontneed\": drop each file's cached pages after reading it (and before the first epoch); drop_caches = \"fadvise\" does the same"`
	Direct  bool   `toml:"direct" doc:"read with O_DIRECT (page cache bypassed)"`
	// The dataset md5_check writes in setup when no create_dataset ran.
	Sizes    []Size `toml:"sizes" doc:"own dataset (only when no create_dataset ran before): file sizes"`
	Copies   int    `toml:"copies" doc:"own dataset: files of each size"`
	Subdirs  int    `toml:"subdirs" doc:"own dataset: subdirectories"`
	DataSeed int64  `toml:"data_seed" doc:"own dataset: content seed"`
}

func defaultMD5Config() md5Config {
	d := defaultDatasetKeys()
	return md5Config{Chunk: 1 << 20, Order: "sequential", OrdSeed: 1, Stride: 2, Epochs: 1,
		Sizes: d.Sizes, Copies: d.Copies, DataSeed: d.Seed}
}

var md5Orders = []string{"sequential", "random", "strided"}

func (c *md5Config) ownKeys() DatasetKeys {
	return DatasetKeys{Sizes: c.Sizes, Copies: c.Copies, Subdirs: c.Subdirs, Seed: c.DataSeed}
}

func (c *md5Config) Validate() error {
	switch {
	case !contains(md5Orders, c.Order):
		return &KeyError{Key: "order", Msg: fmt.Sprintf("unknown order %q (allowed: %s)", c.Order, strings.Join(md5Orders, ", "))}
	case c.Stride < 1 || c.Stride > 1<<30:
		return &KeyError{Key: "stride", Msg: fmt.Sprintf("%d out of range (1 .. 1073741824)", c.Stride)}
	case c.Epochs < 1 || c.Epochs > 100_000:
		return &KeyError{Key: "epochs", Msg: fmt.Sprintf("%d out of range (1 .. 100000)", c.Epochs)}
	case c.Fadvise != "" && c.Fadvise != "dontneed" && c.Fadvise != "none":
		return &KeyError{Key: "fadvise", Msg: fmt.Sprintf("unknown advice %q (allowed: dontneed, none)", c.Fadvise)}
	case c.Chunk < 1 || c.Chunk > 1<<30:
		return &KeyError{Key: "chunk", Msg: fmt.Sprintf("%s out of range (1 .. 1GiB)", c.Chunk)}
	case c.Direct && c.Chunk%pio.DirectAlign != 0:
		return &KeyError{Key: "chunk", Msg: fmt.Sprintf("%s: direct = true needs a multiple of 4KiB", c.Chunk)}
	}
	k := c.ownKeys()
	return k.validate("")
}

type md5Check struct {
	cfg    md5Config
	ds     *dataset
	paths  []pio.Path
	sums   [][md5.Size]byte
	lists  [][]int // per epoch, the files this rank reads, in order
	buf    []byte
	align  int
	h      hash.Hash
	sum    [md5.Size]byte
	advise bool
	read   int
}

func (p *md5Check) Config() any    { return &p.cfg }
func (p *md5Check) Fadvises() bool { return true }

func (p *md5Check) ExpectedOps() int64 {
	var n int64
	for _, l := range p.lists {
		n += int64(len(l))
	}
	return n
}

// datasetOrder is the order in which a pass reads n files: a pure function
// of (order, seed, stride, epoch), the same on every machine and Go
// version (its own Fisher-Yates over its own PCG, not math/rand's).
func datasetOrder(n int, order string, seed int64, stride, epoch int) []int {
	out := make([]int, 0, n)
	switch order {
	case "random":
		for i := 0; i < n; i++ {
			out = append(out, i)
		}
		s := pcg{hi: uint64(seed) ^ 0x6d64356f72646572, lo: uint64(epoch)*0x9e3779b97f4a7c15 + 1}
		for i := n - 1; i > 0; i-- {
			j := int(s.below(uint64(i + 1)))
			out[i], out[j] = out[j], out[i]
		}
	case "strided":
		for start := 0; start < min(stride, n); start++ {
			for i := start; i < n; i += stride {
				out = append(out, i)
			}
		}
	default:
		for i := 0; i < n; i++ {
			out = append(out, i)
		}
	}
	return out
}

// pcg is PCG-XSL-RR 128/64, written out so orders never change with Go's
// math/rand implementation.
type pcg struct{ hi, lo uint64 }

func (p *pcg) next() uint64 {
	const mulHi, mulLo = 2549297995355413924, 4865540595714422341
	const incHi, incLo = 6364136223846793005, 1442695040888963407
	hi, lo := bits.Mul64(p.lo, mulLo)
	hi += p.hi*mulLo + p.lo*mulHi
	lo, c := bits.Add64(lo, incLo, 0)
	hi, _ = bits.Add64(hi, incHi, c)
	p.lo, p.hi = lo, hi
	x := hi ^ lo
	rot := hi >> 58
	return bits.RotateLeft64(x, -int(rot))
}

// below returns a number in [0, n) (Lemire's multiply, with rejection).
func (p *pcg) below(n uint64) uint64 {
	hi, lo := bits.Mul64(p.next(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(p.next(), n)
		}
	}
	return hi
}

// float returns a number in [0, 1).
func (p *pcg) float() float64 { return float64(p.next()>>11) / (1 << 53) }

func (p *md5Check) Setup(ctx context.Context, env *Env) error {
	c := &p.cfg
	ds, err := agreeDataset(ctx, env)
	if err != nil {
		return err
	}
	if ds == nil {
		// No create_dataset ran: write one (untimed) in this phase's
		// directory, once for all its iterations.
		key := stateDataset + ".own/" + env.Dir
		has := []int64{0}
		if _, ok := env.State[key].(*dataset); ok {
			has[0] = 1
		}
		if err := env.Comm.AllreduceInt64(ctx, spmd.Min, has); err != nil {
			return err
		}
		if has[0] == 1 {
			ds = env.State[key].(*dataset)
		} else {
			own := &createDataset{cfg: createDatasetConfig{DatasetKeys: c.ownKeys(), Chunk: 1 << 20, BufferBudget: 256 << 20}}
			if err := own.prepare(env, filepath.Join(env.Dir, "data")); err != nil {
				return err
			}
			if err := own.write(ctx, env, report.NewRecorder("create")); err != nil {
				return err
			}
			if err := env.Comm.Barrier(ctx); err != nil {
				return err
			}
			if ds, err = own.share(ctx, env); err != nil {
				return err
			}
			// Not a create_dataset's: the phases after this one do not see it.
			delete(env.State, stateDataset)
			ds.Stamp = -1
			env.State[key] = ds
		}
	}
	p.ds = ds
	n := len(ds.Files)
	p.paths = make([]pio.Path, n)
	p.sums = make([][md5.Size]byte, n)
	for i, f := range ds.Files {
		p.paths[i] = pio.MustPath(f.Path)
		if _, err := hex.Decode(p.sums[i][:], []byte(f.MD5)); err != nil {
			return env.Errorf("setup: dataset manifest: bad MD5 %q of %s", f.MD5, f.Path)
		}
	}
	p.lists = p.lists[:0]
	mineSet := map[int]bool{}
	for e := 0; e < c.Epochs; e++ {
		order := datasetOrder(n, c.Order, c.OrdSeed, c.Stride, e)
		var l []int
		for j, idx := range order {
			if c.Shared || j%env.Size == env.Rank {
				l = append(l, idx)
				mineSet[idx] = true
			}
		}
		p.lists = append(p.lists, l)
	}
	p.align = 1
	if c.Direct {
		if _, err := pio.CheckDirect(ds.Dir); err != nil {
			return env.Errorf("setup: %w", err)
		}
		p.align = pio.DirectAlign
		if a, err := pio.AlignmentOf(ds.Dir); err == nil && a.Bytes > p.align {
			p.align = a.Bytes
		}
	}
	bufLen := (int(c.Chunk) + p.align - 1) / p.align * p.align
	if len(p.buf) != bufLen || !pio.IsAligned(p.buf, p.align) {
		p.buf = pio.AlignedBuffer(bufLen, max(p.align, pio.DirectAlign))
	}
	p.h = md5.New()
	p.read = 0
	p.advise = c.Fadvise == "dontneed" || env.Cache == "fadvise"
	if p.advise && !c.Direct {
		// Start cold: write back and drop what this rank will read.
		for idx := range mineSet {
			fd, err := pio.Open(unix.AT_FDCWD, p.paths[idx], unix.O_RDONLY, 0)
			if err != nil {
				return env.Errorf("setup: open %s: %w%s", p.paths[idx], err, pio.Remedy(err))
			}
			err = pio.Evict(fd)
			pio.Close(fd)
			if err != nil {
				return env.Errorf("setup: evict %s: %w", p.paths[idx], err)
			}
		}
	}
	return nil
}

// Run reads every file of this rank's lists. The read op is one pread; the
// file op is the whole file: open, every read, the MD5 of its bytes (which
// is part of what md5_check measures), the fadvise and the close.
func (p *md5Check) Run(ctx context.Context, env *Env) error {
	fileRec, readRec := env.Recorder("file"), env.Recorder("read")
	flags := unix.O_RDONLY
	if p.cfg.Direct {
		flags |= unix.O_DIRECT
	}
	chunk := int64(p.cfg.Chunk)
	align := int64(p.align)
	done := ctx.Done()
	for e, list := range p.lists {
		for _, idx := range list {
			select {
			case <-done:
				return ctx.Err()
			default:
			}
			f := &p.ds.Files[idx]
			path := &p.paths[idx]
			start := fileRec.BeginOn(path.Name())
			fd, err := pio.Open(unix.AT_FDCWD, *path, flags, 0)
			if err != nil {
				fileRec.Observe(start, 0, err)
				return env.Errorf("epoch %d: open %s: %w%s", e, path, err, pio.Remedy(err))
			}
			p.h.Reset()
			for off := int64(0); off < f.Size; off += chunk {
				want := min(chunk, f.Size-off)
				ask := want
				if p.cfg.Direct {
					ask = (want + align - 1) / align * align
				}
				t := readRec.Begin()
				n, rerr := pio.PreadFull(fd, p.buf[:ask], off)
				if rerr == pio.ErrShortIO && int64(n) >= want {
					rerr = nil
				}
				n = int(min(int64(n), want))
				readRec.Observe(t, n, rerr)
				if rerr != nil {
					err = fmt.Errorf("read @%d: %w", off, rerr)
					break
				}
				p.h.Write(p.buf[:n])
			}
			if err == nil && p.advise {
				err = pio.Fadvise(fd, 0, 0, pio.FadvDontNeed)
			}
			if cerr := pio.Close(fd); err == nil {
				err = cerr
			}
			sum := p.h.Sum(p.sum[:0])
			fileRec.Observe(start, 0, err)
			if err != nil {
				return env.Errorf("epoch %d: %s: %w%s", e, path, err, pio.Remedy(err))
			}
			if [md5.Size]byte(sum) != p.sums[idx] {
				return env.Errorf("epoch %d: MD5 mismatch in %s: read %x, %q wrote %x: the storage returned different bytes", e, path, sum, p.ds.Phase, p.sums[idx])
			}
			p.read++
		}
	}
	return nil
}

func (p *md5Check) Verify(ctx context.Context, env *Env) error {
	want := 0
	for _, l := range p.lists {
		want += len(l)
	}
	if p.read != want {
		return env.Errorf("verify: checked %d files, want %d", p.read, want)
	}
	if env.Rank == 0 {
		env.SetMetric("dataset_files", float64(len(p.ds.Files)))
		env.SetMetric("epochs", float64(p.cfg.Epochs))
	}
	return nil
}

func (p *md5Check) Teardown(ctx context.Context, env *Env) error { return nil }
