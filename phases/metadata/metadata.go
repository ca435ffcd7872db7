package metadata

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/report"
)

// Register adds the metadata family's kinds to r.
func Register(r *phases.Registry) {
	r.Register(phases.Kind{Name: "create_files", Family: "metadata", Summary: "create count files per rank (open O_CREAT|O_EXCL, write size bytes, close); op create",
		New:    func() phases.Phase { return &createFiles{cfg: metaConfig{Count: 1000, Size: 4096}} },
		Sample: "count = 200"})
	r.Register(phases.Kind{Name: "list_files", Family: "metadata", Summary: "list a directory of count files per rank and stat every entry; ops readdir, stat",
		New:    func() phases.Phase { return &listFiles{cfg: metaConfig{Count: 1000}} },
		Sample: "count = 200"})
	r.Register(phases.Kind{Name: "move_files", Family: "metadata", Summary: "rename count files per rank from one directory to another; op rename",
		New:    func() phases.Phase { return &moveFiles{cfg: metaConfig{Count: 1000}} },
		Sample: "count = 200"})
	r.Register(phases.Kind{Name: "delete_files", Family: "metadata", Summary: "unlink count files per rank; op unlink",
		New:    func() phases.Phase { return &deleteFiles{cfg: metaConfig{Count: 1000}} },
		Sample: "count = 200"})
	r.Register(phases.Kind{Name: "folder_bench", Family: "metadata", Summary: "build and remove a depth x breadth directory tree with files_per_dir files in each; ops mkdir, create, unlink, rmdir",
		New:    func() phases.Phase { return &folderBench{cfg: folderConfig{Depth: 3, Breadth: 4, FilesPerDir: 8}} },
		Sample: "depth = 2\nbreadth = 3\nfiles_per_dir = 4"})
	r.Register(phases.Kind{Name: "synthetic_workload", Family: "generate",
		Summary: "create files with seeded arrivals (deterministic, poisson, burst) and sizes (fixed, exponential, uniform, lognormal); op create; metric arrival_rate_per_sec",
		New:     func() phases.Phase { return &syntheticWorkload{cfg: defaultSyntheticConfig()} },
		Sample:  "count = 50\nsimulate_arrivals = false\nmax = \"64KiB\""})
}

type metaConfig struct {
	Count     int         `toml:"count" doc:"files per rank"`
	Size      phases.Size `toml:"size" doc:"bytes written into each file"`
	SharedDir bool        `toml:"shared_dir" doc:"all ranks work in one directory instead of one each"`
}

func (c *metaConfig) Validate() error {
	if c.Count < 1 || c.Count > phases.MaxFilesPerRank {
		return &phases.KeyError{Key: "count", Msg: fmt.Sprintf("%d out of range (1 .. %d)", c.Count, phases.MaxFilesPerRank)}
	}
	if c.Size > 1<<30 {
		return &phases.KeyError{Key: "size", Msg: fmt.Sprintf("%s is more than a metadata phase should write per file (max 1GiB)", c.Size)}
	}
	return nil
}

func (c *metaConfig) Footprint(ranks int) phases.Footprint {
	return phases.Footprint{Files: int64(c.Count), Bytes: int64(c.Count) * int64(c.Size)}
}

// fileSet is the per-rank set of files a metadata phase works on: count
// names f<rank>.<i> in one directory (the rank's, or the phase's shared
// one), opened once as a descriptor, every op relative to it.
type fileSet struct {
	dir   *pio.Dir
	names names
	buf   []byte
	made  int // files created so far, for teardown
}

// prepare opens dir/sub below the rank's directory (or the phase's shared
// one, where names carry the rank) and prepares the names and a data
// buffer.
func (fs *fileSet) prepare(env *phases.Env, cfg *metaConfig, sub string) error {
	if fs.dir != nil {
		fs.dir.Close()
	}
	base := env.Own
	if cfg.SharedDir {
		base = env.Shared
	}
	d, err := base.EnsureSub(sub, 0o755)
	if err != nil {
		return env.Errorf("%w", err)
	}
	fs.dir = d
	fs.names.reset(fmt.Sprintf("f%d.", env.Rank), cfg.Count)
	if len(fs.buf) != int(cfg.Size) {
		fs.buf = make([]byte, cfg.Size)
		for i := range fs.buf {
			fs.buf[i] = byte(i*131 + 7) // not zeros: some storage compresses or skips them
		}
	}
	fs.made = 0
	return nil
}

// fail dresses a failed op on name i outside the timed span: an op that
// failed because the directory was replaced says so (pio.Dir.Wrap).
func (fs *fileSet) fail(env *phases.Env, op string, n *pio.Name, err error) error {
	return env.Errorf("%w", fs.dir.Wrap(op, *n, err))
}

// close releases the directory handle.
func (fs *fileSet) close() {
	if fs.dir != nil {
		fs.dir.Close()
		fs.dir = nil
	}
}

// createOne is the create op: open(O_CREAT|O_EXCL) relative to d, write,
// close.
func createOne(d *pio.Dir, n *pio.Name, buf []byte) (int, error) {
	fd, err := d.Open(*n, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	nw := 0
	if len(buf) > 0 {
		nw, err = pio.Write(fd, buf)
	}
	if cerr := pio.Close(fd); err == nil {
		err = cerr
	}
	return nw, err
}

// populate creates every file untimed (Setup of list, move and delete).
func (fs *fileSet) populate(ctx context.Context, env *phases.Env) error {
	rec := env.Untimed("create").Under(fs.dir.Path())
	for i := range fs.names.count {
		if i%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		n := fs.names.at(i)
		start := rec.BeginOn(n.Ref())
		_, err := createOne(fs.dir, n, fs.buf)
		rec.Observe(start, 0, err)
		if err != nil {
			return env.Errorf("setup: %w", fs.dir.Wrap("create", *n, err))
		}
		fs.made++
	}
	return nil
}

// remove unlinks names [lo, hi) of d, ignoring files already gone.
func (fs *fileSet) remove(env *phases.Env, d *pio.Dir, lo, hi int) error {
	var first error
	rec := env.Untimed("unlink").Under(d.Path())
	for i := lo; i < hi; i++ {
		n := fs.names.at(i)
		start := rec.BeginOn(n.Ref())
		err := d.Unlink(*n)
		rec.Observe(start, 0, err)
		if err != nil && err != unix.ENOENT && first == nil {
			first = env.Errorf("teardown: %w", d.Wrap("unlink", *n, err))
		}
	}
	fs.made = 0
	return first
}

// countOwn returns how many entries named f<rank>.* d holds; used to
// verify that a listing, a move or a delete really happened.
func countOwn(d *pio.Dir, rank int) (int, error) {
	_, raw, err := d.ReadDir(make([]byte, 64<<10), nil)
	if err != nil {
		return 0, err
	}
	prefix := []byte(fmt.Sprintf("f%d.", rank))
	n := 0
	_, err = pio.EachName(raw, func(name []byte) error {
		if len(name) > len(prefix) && string(name[:len(prefix)]) == string(prefix) {
			n++
		}
		return nil
	})
	return n, err
}

type createFiles struct {
	cfg metaConfig
	fs  fileSet
}

// ExpectedOps lets the progress line give an ETA.
func (p *createFiles) ExpectedOps() int64 { return int64(p.cfg.Count) }
func (p *moveFiles) ExpectedOps() int64   { return int64(p.cfg.Count) }
func (p *deleteFiles) ExpectedOps() int64 { return int64(p.cfg.Count) }

func (p *createFiles) Config() any                               { return &p.cfg }
func (p *createFiles) Footprint(ranks int) phases.Footprint      { return p.cfg.Footprint(ranks) }
func (p *createFiles) Memory(ranks int) (int64, string)          { return p.cfg.memory() }
func (p *createFiles) Verify(context.Context, *phases.Env) error { return nil }

func (p *createFiles) Setup(ctx context.Context, env *phases.Env) error {
	env.Recorder("create") // its histogram is allocated here, not in the timed Run
	return p.fs.prepare(env, &p.cfg, "files")
}

// The create, rename and unlink loops are written out one per kind rather
// than shared: a shared loop would reach each kind's syscall through a func
// value, an indirect call between the two clock reads of every timed op.
func (p *createFiles) Run(ctx context.Context, env *phases.Env) error {
	rec := env.Recorder("create").Under(p.fs.dir.Path())
	clk := phases.NewOpClock(ctx)
	for i := range p.fs.names.count {
		if clk.Stopped() {
			return ctx.Err()
		}
		n := p.fs.names.next(i, &clk)
		rec.BeginAt(n.Ref(), clk.Last())
		nw, err := createOne(p.fs.dir, n, p.fs.buf)
		rec.ObserveNs(clk.Lap(), int64(nw), err)
		if err != nil {
			return p.fs.fail(env, "create", n, err)
		}
		p.fs.made++
	}
	return nil
}

func (p *createFiles) Teardown(ctx context.Context, env *phases.Env) error {
	defer p.fs.close()
	return p.fs.remove(env, p.fs.dir, 0, p.fs.made)
}

type listFiles struct {
	cfg     metaConfig
	fs      fileSet
	where   string // the directory's path, for the stall watchdog and messages
	scratch []byte
	raw     []byte
	seen    int
}

func (p *listFiles) Config() any                          { return &p.cfg }
func (p *listFiles) Footprint(ranks int) phases.Footprint { return p.cfg.Footprint(ranks) }
func (p *listFiles) Memory(ranks int) (int64, string) {
	b, keys := p.cfg.memory()
	files := int64(p.cfg.Count)
	if p.cfg.SharedDir {
		files *= int64(ranks)
	}
	return b + files*32, keys // the listing: a dirent of ~32 B per file
}

func (p *listFiles) Setup(ctx context.Context, env *phases.Env) error {
	if err := p.fs.prepare(env, &p.cfg, "files"); err != nil {
		return err
	}
	if p.scratch == nil {
		p.scratch = make([]byte, 64<<10)
	}
	p.where = p.fs.dir.Path()
	env.Recorder("readdir") // histograms are allocated here, not in the timed Run
	env.Recorder("stat")
	return p.fs.populate(ctx, env)
}

func (p *listFiles) Run(ctx context.Context, env *phases.Env) error {
	readdir, stat := env.Recorder("readdir"), env.Recorder("stat").Under(p.fs.dir.Path())
	clk := phases.NewOpClock(ctx)
	readdir.BeginAt(&p.where, clk.Last())
	var err error
	p.scratch, p.raw, err = p.fs.dir.ReadDir(p.scratch, p.raw[:0])
	readdir.ObserveNs(clk.Lap(), 0, err)
	if err != nil {
		return env.Errorf("%w", pio.NewOpError("readdir", p.where, err))
	}
	var st unix.Stat_t
	p.seen, err = pio.EachName(p.raw, func(name []byte) error {
		if clk.Stopped() {
			return ctx.Err()
		}
		stat.BeginAt(&p.where, clk.Last())
		err := p.fs.dir.StatName(name, &st)
		stat.ObserveNs(clk.Lap(), 0, err)
		if err != nil {
			return env.Errorf("%w", pio.NewOpError("stat", p.where+"/"+unix.ByteSliceToString(name), err))
		}
		return nil
	})
	return err
}

// Verify checks the listing saw every file that exists, so a filesystem
// that returns a short listing fails instead of looking fast.
func (p *listFiles) Verify(ctx context.Context, env *phases.Env) error {
	want := p.cfg.Count
	if p.cfg.SharedDir {
		want *= env.Size
	}
	if p.seen != want {
		return env.Errorf("verify: listing of %s returned %d entries, want %d", p.where, p.seen, want)
	}
	return nil
}

func (p *listFiles) Teardown(ctx context.Context, env *phases.Env) error {
	defer p.fs.close()
	return p.fs.remove(env, p.fs.dir, 0, p.fs.made)
}

type moveFiles struct {
	cfg   metaConfig
	fs    fileSet
	dst   *pio.Dir
	moved int
}

func (p *moveFiles) Config() any                          { return &p.cfg }
func (p *moveFiles) Footprint(ranks int) phases.Footprint { return p.cfg.Footprint(ranks) }
func (p *moveFiles) Memory(ranks int) (int64, string)     { return p.cfg.memory() }

func (p *moveFiles) Setup(ctx context.Context, env *phases.Env) error {
	if err := p.fs.prepare(env, &p.cfg, "src"); err != nil {
		return err
	}
	base := env.Own
	if p.cfg.SharedDir {
		base = env.Shared
	}
	if p.dst != nil {
		p.dst.Close()
	}
	d, err := base.EnsureSub("dst", 0o755)
	if err != nil {
		return env.Errorf("%w", err)
	}
	p.dst, p.moved = d, 0
	env.Recorder("rename") // its histogram is allocated here, not in the timed Run
	return p.fs.populate(ctx, env)
}

func (p *moveFiles) Run(ctx context.Context, env *phases.Env) error {
	rec := env.Recorder("rename").Under(p.fs.dir.Path())
	clk := phases.NewOpClock(ctx)
	for i := range p.fs.names.count {
		if clk.Stopped() {
			return ctx.Err()
		}
		n := p.fs.names.next(i, &clk)
		rec.BeginAt(n.Ref(), clk.Last())
		err := p.fs.dir.Rename(*n, p.dst, *n)
		rec.ObserveNs(clk.Lap(), 0, err)
		if err != nil {
			return env.Errorf("%w", p.fs.dir.Wrap("rename", *n, err))
		}
		p.moved++
	}
	return nil
}

func (p *moveFiles) Verify(ctx context.Context, env *phases.Env) error {
	n, err := countOwn(p.dst, env.Rank)
	if err != nil {
		return env.Errorf("verify: %w", pio.NewOpError("readdir", p.dst.Path(), err))
	}
	if n != p.cfg.Count {
		return env.Errorf("verify: %d of this rank's files are in %s after the move, want %d", n, p.dst.Path(), p.cfg.Count)
	}
	return nil
}

func (p *moveFiles) Teardown(ctx context.Context, env *phases.Env) error {
	defer p.fs.close()
	err := p.fs.remove(env, p.dst, 0, p.moved)
	if err2 := p.fs.remove(env, p.fs.dir, p.moved, p.fs.names.count); err == nil {
		err = err2
	}
	p.dst.Close()
	p.dst = nil
	return err
}

type deleteFiles struct {
	cfg     metaConfig
	fs      fileSet
	deleted int
}

func (p *deleteFiles) Config() any                          { return &p.cfg }
func (p *deleteFiles) Footprint(ranks int) phases.Footprint { return p.cfg.Footprint(ranks) }
func (p *deleteFiles) Memory(ranks int) (int64, string)     { return p.cfg.memory() }

func (p *deleteFiles) Setup(ctx context.Context, env *phases.Env) error {
	if err := p.fs.prepare(env, &p.cfg, "files"); err != nil {
		return err
	}
	p.deleted = 0
	env.Recorder("unlink") // its histogram is allocated here, not in the timed Run
	return p.fs.populate(ctx, env)
}

func (p *deleteFiles) Run(ctx context.Context, env *phases.Env) error {
	rec := env.Recorder("unlink").Under(p.fs.dir.Path())
	clk := phases.NewOpClock(ctx)
	for i := range p.fs.names.count {
		if clk.Stopped() {
			return ctx.Err()
		}
		n := p.fs.names.next(i, &clk)
		rec.BeginAt(n.Ref(), clk.Last())
		err := p.fs.dir.Unlink(*n)
		rec.ObserveNs(clk.Lap(), 0, err)
		if err != nil {
			return p.fs.fail(env, "unlink", n, err)
		}
		p.deleted++
	}
	return nil
}

func (p *deleteFiles) Verify(ctx context.Context, env *phases.Env) error {
	n, err := countOwn(p.fs.dir, env.Rank)
	if err != nil {
		return env.Errorf("verify: %w", pio.NewOpError("readdir", p.fs.dir.Path(), err))
	}
	if n != 0 {
		return env.Errorf("verify: %d of this rank's files are still listed in %s after unlink", n, p.fs.dir.Path())
	}
	return nil
}

func (p *deleteFiles) Teardown(ctx context.Context, env *phases.Env) error {
	defer p.fs.close()
	return p.fs.remove(env, p.fs.dir, p.deleted, p.fs.names.count)
}

type folderConfig struct {
	Depth       int         `toml:"depth" doc:"levels of directories below the tree root"`
	Breadth     int         `toml:"breadth" doc:"subdirectories per directory"`
	FilesPerDir int         `toml:"files_per_dir" doc:"files created in every directory of the tree"`
	Size        phases.Size `toml:"size" doc:"bytes written into each file"`
	SharedDir   bool        `toml:"shared_dir" doc:"every rank's tree hangs off one shared directory"`
}

const maxTreeDirs = 10_000_000

func (c *folderConfig) dirs() int64 {
	var total, level int64 = 0, 1
	for d := 0; d < c.Depth; d++ {
		level *= int64(c.Breadth)
		total += level
		if total > maxTreeDirs {
			return total
		}
	}
	return total
}

func (c *folderConfig) Validate() error {
	switch {
	case c.Depth < 1 || c.Depth > 32:
		return &phases.KeyError{Key: "depth", Msg: fmt.Sprintf("%d out of range (1 .. 32)", c.Depth)}
	case c.Breadth < 1 || c.Breadth > 100_000:
		return &phases.KeyError{Key: "breadth", Msg: fmt.Sprintf("%d out of range (1 .. 100000)", c.Breadth)}
	case c.FilesPerDir < 0 || c.FilesPerDir > 1_000_000:
		return &phases.KeyError{Key: "files_per_dir", Msg: fmt.Sprintf("%d out of range (0 .. 1000000)", c.FilesPerDir)}
	case c.dirs() > maxTreeDirs:
		return &phases.KeyError{Key: "breadth", Msg: fmt.Sprintf("depth %d x breadth %d makes more than %d directories per rank", c.Depth, c.Breadth, maxTreeDirs)}
	case c.dirs()*int64(c.FilesPerDir) > phases.MaxFilesPerRank:
		return &phases.KeyError{Key: "files_per_dir", Msg: fmt.Sprintf("the tree would hold more than %d files per rank", phases.MaxFilesPerRank)}
	case c.Size > 1<<30:
		return &phases.KeyError{Key: "size", Msg: "more than 1GiB per file"}
	}
	return nil
}

type folderBench struct {
	cfg   folderConfig
	root  *pio.Dir   // the tree's root, opened once
	dirs  []pio.Name // relative to root, parents before children
	files []pio.Name
	buf   []byte
	// progress, so teardown removes exactly what exists
	mkdirs, creates, unlinks, rmdirs int
}

func (p *folderBench) Config() any { return &p.cfg }

func (p *folderBench) Footprint(ranks int) phases.Footprint {
	d := p.cfg.dirs()
	return phases.Footprint{Files: d + d*int64(p.cfg.FilesPerDir), Bytes: d * int64(p.cfg.FilesPerDir) * int64(p.cfg.Size)}
}

// Memory: every directory and file of the tree is a prepared name, with
// the depth's components in it.
func (p *folderBench) Memory(ranks int) (int64, string) {
	d := p.cfg.dirs()
	return (d+d*int64(p.cfg.FilesPerDir))*(nameBytes+int64(4*p.cfg.Depth)) + int64(p.cfg.Size), "depth, breadth or files_per_dir"
}

// Setup opens the tree's root and prepares every name below it. The ops
// then name their directory through the root (openat2 beneath it, no link
// followed): one more lookup per op than a path from the current
// directory, which is what resolving a path costs the kernel anyway.
func (p *folderBench) Setup(ctx context.Context, env *phases.Env) error {
	base, prefix := env.Own, "d"
	if p.cfg.SharedDir {
		base, prefix = env.Shared, fmt.Sprintf("r%d.d", env.Rank)
	}
	if p.root != nil {
		p.root.Close()
	}
	root, err := base.EnsureSub("tree", 0o755)
	if err != nil {
		return env.Errorf("%w", err)
	}
	p.root = root
	p.dirs, p.files = p.dirs[:0], p.files[:0]
	level := []string{""}
	for d := 0; d < p.cfg.Depth; d++ {
		var next []string
		for _, parent := range level {
			for b := 0; b < p.cfg.Breadth; b++ {
				name := fmt.Sprintf("d%d", b)
				if d == 0 {
					name = fmt.Sprintf("%s%d", prefix, b)
				}
				dir := name
				if parent != "" {
					dir = parent + "/" + name
				}
				next = append(next, dir)
				p.dirs = append(p.dirs, pio.MustName(dir))
				for f := 0; f < p.cfg.FilesPerDir; f++ {
					p.files = append(p.files, pio.MustName(fmt.Sprintf("%s/f%d", dir, f)))
				}
			}
		}
		if d%4 == 3 && ctx.Err() != nil {
			return ctx.Err()
		}
		level = next
	}
	if len(p.buf) != int(p.cfg.Size) {
		p.buf = make([]byte, p.cfg.Size)
		for i := range p.buf {
			p.buf[i] = byte(i*131 + 7)
		}
	}
	p.mkdirs, p.creates, p.unlinks, p.rmdirs = 0, 0, 0, 0
	for _, op := range []string{"mkdir", "create", "unlink", "rmdir"} {
		env.Recorder(op) // histograms are allocated here, not in the timed Run
	}
	return nil
}

func (p *folderBench) Run(ctx context.Context, env *phases.Env) error {
	mk, cr, ul, rd := env.Recorder("mkdir"), env.Recorder("create"), env.Recorder("unlink"), env.Recorder("rmdir")
	for _, r := range []*report.Recorder{mk, cr, ul, rd} {
		r.Under(p.root.Path())
	}
	clk := phases.NewOpClock(ctx)
	for i := range p.dirs {
		d := &p.dirs[i]
		if clk.Stopped() {
			return ctx.Err()
		}
		mk.BeginAt(d.Ref(), clk.Last())
		err := p.root.Mkdir(*d, 0o755)
		mk.ObserveNs(clk.Lap(), 0, err)
		if err != nil {
			return env.Errorf("%w", p.root.Wrap("mkdir", *d, err))
		}
		p.mkdirs++
	}
	for i := range p.files {
		f := &p.files[i]
		if clk.Stopped() {
			return ctx.Err()
		}
		cr.BeginAt(f.Ref(), clk.Last())
		n, err := createOne(p.root, f, p.buf)
		cr.ObserveNs(clk.Lap(), int64(n), err)
		if err != nil {
			return env.Errorf("%w", p.root.Wrap("create", *f, err))
		}
		p.creates++
	}
	for i := range p.files {
		f := &p.files[i]
		if clk.Stopped() {
			return ctx.Err()
		}
		ul.BeginAt(f.Ref(), clk.Last())
		err := p.root.Unlink(*f)
		ul.ObserveNs(clk.Lap(), 0, err)
		if err != nil {
			return env.Errorf("%w", p.root.Wrap("unlink", *f, err))
		}
		p.unlinks++
	}
	for i := len(p.dirs) - 1; i >= 0; i-- {
		if clk.Stopped() {
			return ctx.Err()
		}
		rd.BeginAt(p.dirs[i].Ref(), clk.Last())
		err := p.root.Rmdir(p.dirs[i])
		rd.ObserveNs(clk.Lap(), 0, err)
		if err != nil {
			return env.Errorf("%w", p.root.Wrap("rmdir", p.dirs[i], err))
		}
		p.rmdirs++
	}
	return nil
}

func (p *folderBench) Verify(ctx context.Context, env *phases.Env) error {
	if p.rmdirs != len(p.dirs) {
		return nil // Run failed; its error already says why
	}
	var st unix.Stat_t
	for _, d := range p.dirs[:min(len(p.dirs), p.cfg.Breadth)] {
		if err := p.root.Stat(d, &st); err == nil {
			return env.Errorf("verify: %s still exists after rmdir", p.root.Join(d.String()))
		}
	}
	return nil
}

// Teardown undoes a partial Run: files created but not unlinked, then
// directories made but not removed, deepest first.
func (p *folderBench) Teardown(ctx context.Context, env *phases.Env) error {
	var first error
	if p.unlinks < p.creates {
		for _, f := range p.files[p.unlinks:p.creates] {
			if err := p.root.Unlink(f); err != nil && err != unix.ENOENT && first == nil {
				first = env.Errorf("teardown: %w", p.root.Wrap("unlink", f, err))
			}
		}
	}
	if p.rmdirs < p.mkdirs {
		for i := p.mkdirs - 1; i >= 0; i-- {
			if err := p.root.Rmdir(p.dirs[i]); err != nil && err != unix.ENOENT && first == nil {
				first = env.Errorf("teardown: %w", p.root.Wrap("rmdir", p.dirs[i], err))
			}
		}
	}
	p.root.Close()
	p.root = nil
	return first
}
