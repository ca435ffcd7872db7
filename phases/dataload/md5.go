package dataload

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"hash"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/report"
	"github.com/prism-hpc/prism/spmd"
)

// md5_check

type md5Config struct {
	Chunk   phases.Size `toml:"chunk" doc:"bytes per read(2); a multiple of 4KiB with direct = true"`
	Order   string      `toml:"order" doc:"sequential | random (a new seeded permutation every epoch) | strided (0, stride, 2*stride, ... then 1, 1+stride, ...)"`
	OrdSeed int64       `toml:"seed" doc:"seed of the random order: permutation = f(seed, epoch), like a seeded DataLoader"`
	Stride  int         `toml:"stride" doc:"file stride of order = \"strided\""`
	Epochs  int         `toml:"epochs" doc:"passes over the dataset"`
	Shared  bool        `toml:"shared" doc:"every rank reads the whole dataset (contention); default: the files are sharded over the ranks"`
	Fadvise string      `toml:"fadvise" doc:"\"dontneed\": drop each file's cached pages after reading it (and before the first epoch); drop_caches = \"fadvise\" does the same"`
	Direct  bool        `toml:"direct" doc:"read with O_DIRECT (page cache bypassed)"`
	Dataset string      `toml:"dataset" doc:"\"\" (the latest create_dataset's, else its own) or the name of a persistent dataset (create_dataset persist = \"<name>\"; \"<name>-<hash>\" picks one of several), checked before the run"`
	Verify  string      `toml:"verify" doc:"check of a persistent dataset before the run: stat (every file there with its size) | full (also every file's MD5, reading it all)"`
	// The dataset md5_check writes in setup when no create_dataset ran.
	Sizes    []phases.Size `toml:"sizes" doc:"own dataset (only when no create_dataset ran before): file sizes"`
	Copies   int           `toml:"copies" doc:"own dataset: files of each size"`
	Subdirs  int           `toml:"subdirs" doc:"own dataset: subdirectories"`
	DataSeed int64         `toml:"data_seed" doc:"own dataset: content seed"`
	// With storage = "s3://…", the phase's own dataset goes to object
	// storage; a create_dataset's is read where it was written (s3.go).
	phases.StorageOptions
}

func defaultMD5Config() md5Config {
	d := defaultDatasetKeys()
	return md5Config{Chunk: 1 << 20, Order: "sequential", OrdSeed: 1, Stride: 2, Epochs: 1,
		Sizes: d.Sizes, Copies: d.Copies, DataSeed: d.Seed}
}

var md5Orders = []string{"sequential", "random", "strided"}

// Resolve: the own-dataset keys apply only when no create_dataset ran
// before; seed only to order = "random", stride only to "strided".
func (p *md5Check) Resolve(before []*phases.Spec) phases.Resolved {
	var r phases.Resolved
	if ds := lastOf(before, "create_dataset"); ds != nil {
		r.Unused = append(r.Unused, "sizes", "copies", "subdirs", "data_seed")
		r.Notes = append(r.Notes, fmt.Sprintf("dataset: the files of phase %d (%s)", ds.Index+1, ds.Name))
	}
	if p.cfg.Order != "random" {
		r.Unused = append(r.Unused, "seed")
	}
	if p.cfg.Order != "strided" {
		r.Unused = append(r.Unused, "stride")
	}
	return r
}

func (c *md5Config) ownKeys() DatasetKeys {
	return DatasetKeys{Sizes: c.Sizes, Copies: c.Copies, Subdirs: c.Subdirs, Seed: c.DataSeed}
}

func (c *md5Config) Validate() error {
	if err := c.StorageOptions.Validate(); err != nil {
		return err
	}
	if err := checkVerify(c.Verify); err != nil {
		return err
	}
	if c.Dataset != "" {
		if err := checkDatasetName(c.Dataset); err != nil {
			return err
		}
	}
	switch {
	case !slices.Contains(md5Orders, c.Order):
		return &phases.KeyError{Key: "order", Msg: fmt.Sprintf("unknown order %q (allowed: %s)", c.Order, strings.Join(md5Orders, ", "))}
	case c.Stride < 1 || c.Stride > 1<<30:
		return &phases.KeyError{Key: "stride", Msg: fmt.Sprintf("%d out of range (1 .. 1073741824)", c.Stride)}
	case c.Epochs < 1 || c.Epochs > 100_000:
		return &phases.KeyError{Key: "epochs", Msg: fmt.Sprintf("%d out of range (1 .. 100000)", c.Epochs)}
	case c.Fadvise != "" && c.Fadvise != "dontneed" && c.Fadvise != "none":
		return &phases.KeyError{Key: "fadvise", Msg: fmt.Sprintf("unknown advice %q (allowed: dontneed, none)", c.Fadvise)}
	case c.Chunk < 1 || c.Chunk > 1<<30:
		return &phases.KeyError{Key: "chunk", Msg: fmt.Sprintf("%s out of range (1 .. 1GiB)", c.Chunk)}
	case c.Direct && c.Chunk%pio.DirectAlign != 0:
		return &phases.KeyError{Key: "chunk", Msg: fmt.Sprintf("%s: direct = true needs a multiple of 4KiB", c.Chunk)}
	}
	k := c.ownKeys()
	return k.validate("")
}

type md5Check struct {
	cfg    md5Config
	ds     *dataset
	root   *pio.Dir // the dataset's directory, open from Setup to Teardown
	names  []pio.Name
	sums   [][md5.Size]byte
	lists  [][]int // per epoch, the files this rank reads, in order
	buf    []byte
	align  int
	h      hash.Hash
	sum    [md5.Size]byte
	advise bool
	read   int
	own    string // the dataset Setup wrote when no create_dataset ran
	s3     s3Dataset
}

func (p *md5Check) Config() any { return &p.cfg }

// Memory: the dataset's manifest, a prepared name and a checksum per file
// (~330 bytes), and one read buffer. A dataset of an earlier phase is
// counted there; this estimate counts the phase's own one.
func (p *md5Check) Memory(ranks int) (int64, string) {
	own := p.cfg.ownKeys()
	files := int64(len(own.fileSizes()))
	return files*330*int64(p.cfg.Epochs) + int64(p.cfg.Chunk) + 256<<20, "sizes or copies, or epochs"
}

// Outputs is the dataset Setup wrote when no create_dataset ran before: it
// stays for the md5_check phases after this one.
func (p *md5Check) Outputs() []string {
	if p.own != "" {
		return []string{p.own}
	}
	return nil
}
func (p *md5Check) Fadvises() bool { return true }

// ExpectedOps is what Run records on this rank: per file of its lists a
// file op and its reads, chunk bytes at a time (over S3 one GET).
func (p *md5Check) ExpectedOps() int64 {
	var n int64
	for _, l := range p.lists {
		if p.s3.st != nil {
			n += 2 * int64(len(l))
			continue
		}
		for _, idx := range l {
			n += 1 + (p.ds.Files[idx].Size+int64(p.cfg.Chunk)-1)/int64(p.cfg.Chunk)
		}
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
		s := pio.PCG{Hi: uint64(seed) ^ 0x6d64356f72646572, Lo: uint64(epoch)*0x9e3779b97f4a7c15 + 1}
		for i := n - 1; i > 0; i-- {
			j := int(s.Below(uint64(i + 1)))
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

// float returns a number in [0, 1).

func (p *md5Check) Setup(ctx context.Context, env *phases.Env) error {
	if err := p.setup(ctx, env); err != nil {
		return err
	}
	// What Run times into and reads into, made and faulted in here, not
	// by its first ops: a recorder's creation clears a ~270 KiB histogram
	// (~115 µs), and a fresh buffer's pages are mapped by the first read.
	env.Recorder("file")
	env.Recorder("read")
	if p.s3.st != nil {
		pio.Prefault(p.s3.body)
	} else {
		pio.Prefault(p.buf)
	}
	return nil
}

func (p *md5Check) setup(ctx context.Context, env *phases.Env) error {
	c := &p.cfg
	var ds *dataset
	var err error
	if c.Dataset != "" {
		ds, err = openPersistentDataset(ctx, env, c.Dataset, c.Verify)
	} else {
		ds, err = agreeDataset(ctx, env)
	}
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
			own := &createDataset{cfg: createDatasetConfig{DatasetKeys: c.ownKeys(), Chunk: 1 << 20, BufferBudget: 256 << 20, StorageOptions: c.StorageOptions}}
			if err := own.s3.open(ctx, env, c.StorageOptions); err != nil {
				return err
			}
			if err := own.prepare(env, "data"); err != nil {
				return err
			}
			if own.root != nil {
				p.own = own.path
				defer own.root.Close()
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
	if p.root != nil {
		p.root.Close()
	}
	p.s3.st = nil
	if ds.S3 != "" {
		if err := p.openS3(ctx, env, ds); err != nil {
			return err
		}
	} else if p.root, p.names, err = ds.open(env); err != nil {
		return err
	}
	p.sums = make([][md5.Size]byte, n)
	for i, f := range ds.Files {
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
	if p.s3.st != nil {
		return nil // objects: no alignment, no page cache to evict
	}
	p.align = 1
	if c.Direct {
		if _, err := p.root.CheckDirect(); err != nil {
			return env.Errorf("setup: %w", err)
		}
		p.align = pio.DirectAlign
		if n > 0 {
			if a, err := p.root.AlignmentOf(p.names[0]); err == nil && a.Bytes > p.align {
				p.align = a.Bytes
			}
		}
	}
	bufLen := (int(c.Chunk) + p.align - 1) / p.align * p.align
	if len(p.buf) != bufLen || !pio.IsAligned(p.buf, p.align) {
		p.buf = pio.AlignedBuffer(bufLen, max(p.align, pio.DirectAlign))
	}
	p.h = md5.New()
	p.read = 0
	p.advise = c.Fadvise == "dontneed" || env.Cache == phases.CacheFadvise
	if p.advise && !c.Direct {
		// Start cold: write back and drop what this rank will read.
		for idx := range mineSet {
			fd, err := p.root.Open(p.names[idx], unix.O_RDONLY, 0)
			if err != nil {
				return env.Errorf("setup: %w", p.root.Wrap("open", p.names[idx], err))
			}
			err = pio.Evict(fd)
			pio.Close(fd)
			if err != nil {
				return env.Errorf("setup: %w", p.root.Wrap("evict", p.names[idx], err))
			}
		}
	}
	return nil
}

// Run reads every file of this rank's lists. The read op is one pread; the
// file op is the whole file: open, every read, the MD5 of its bytes (which
// is part of what md5_check measures), the fadvise and the close.
func (p *md5Check) Run(ctx context.Context, env *phases.Env) error {
	if p.s3.st != nil {
		return p.runS3(ctx, env)
	}
	fileRec, readRec := env.Recorder("file"), env.Recorder("read") // made in Setup
	if p.root != nil {
		fileRec.Under(p.root.Path())
	}
	flags := unix.O_RDONLY
	if p.cfg.Direct {
		flags |= pio.ODirect
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
			name := &p.names[idx]
			start := fileRec.BeginOn(name.Ref())
			fd, err := p.root.Open(*name, flags, 0)
			if err != nil {
				fileRec.Observe(start, 0, err)
				return env.Errorf("epoch %d: %w", e, p.root.Wrap("open", *name, err))
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
				return env.Errorf("epoch %d: %w", e, p.root.Wrap("read", *name, err))
			}
			if [md5.Size]byte(sum) != p.sums[idx] {
				return env.Errorf("epoch %d: MD5 mismatch in %s: read %x, %q wrote %x: the storage returned different bytes", e, p.root.Join(f.Path), sum, p.ds.Phase, p.sums[idx])
			}
			p.read++
		}
	}
	return nil
}

func (p *md5Check) Verify(ctx context.Context, env *phases.Env) error {
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

func (p *md5Check) Teardown(ctx context.Context, env *phases.Env) error {
	if p.root != nil {
		p.root.Close()
		p.root = nil
	}
	return nil
}
