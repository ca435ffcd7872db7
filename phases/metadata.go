package phases

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/report"
)

// The metadata family (PRISM §3.1.2): storms of create, readdir+stat,
// rename and unlink, and directory trees. Every path is prepared in Setup;
// a timed op is exactly the syscalls the op name says.

func registerMetadata(r *Registry) {
	r.Register(Kind{Name: "create_files", Family: "metadata", Summary: "create count files per rank (open O_CREAT|O_EXCL, write size bytes, close); op create",
		New: func() Phase { return &createFiles{cfg: metaConfig{Count: 1000, Size: 4096}} }})
	r.Register(Kind{Name: "list_files", Family: "metadata", Summary: "list a directory of count files per rank and stat every entry; ops readdir, stat",
		New: func() Phase { return &listFiles{cfg: metaConfig{Count: 1000}} }})
	r.Register(Kind{Name: "move_files", Family: "metadata", Summary: "rename count files per rank from one directory to another; op rename",
		New: func() Phase { return &moveFiles{cfg: metaConfig{Count: 1000}} }})
	r.Register(Kind{Name: "delete_files", Family: "metadata", Summary: "unlink count files per rank; op unlink",
		New: func() Phase { return &deleteFiles{cfg: metaConfig{Count: 1000}} }})
	r.Register(Kind{Name: "folder_bench", Family: "metadata", Summary: "build and remove a depth x breadth directory tree with files_per_dir files in each; ops mkdir, create, unlink, rmdir",
		New: func() Phase { return &folderBench{cfg: folderConfig{Depth: 3, Breadth: 4, FilesPerDir: 8}} }})
}

type metaConfig struct {
	Count     int  `toml:"count" doc:"files per rank"`
	Size      Size `toml:"size" doc:"bytes written into each file"`
	SharedDir bool `toml:"shared_dir" doc:"all ranks work in one directory instead of one each"`
}

const maxMetaCount = 100_000_000

func (c *metaConfig) Validate() error {
	if c.Count < 1 || c.Count > maxMetaCount {
		return &KeyError{Key: "count", Msg: fmt.Sprintf("%d out of range (1 .. %d)", c.Count, maxMetaCount)}
	}
	if c.Size > 1<<30 {
		return &KeyError{Key: "size", Msg: fmt.Sprintf("%s is more than a metadata phase should write per file (max 1GiB)", c.Size)}
	}
	return nil
}

func (c *metaConfig) Footprint(ranks int) Footprint {
	return Footprint{Files: int64(c.Count), Bytes: int64(c.Count) * int64(c.Size)}
}

// fileSet is the per-rank list of files a metadata phase works on.
type fileSet struct {
	dir   string
	paths []pio.Path
	buf   []byte
	made  int // files created so far, for teardown
}

// prepare builds count paths under dir/sub (the rank's directory, or the
// phase's shared directory with rank-unique names) and a data buffer.
func (fs *fileSet) prepare(env *Env, cfg *metaConfig, sub string) error {
	base := env.RankDir
	if cfg.SharedDir {
		base = env.Dir
	}
	fs.dir = filepath.Join(base, sub)
	if err := os.MkdirAll(fs.dir, 0o755); err != nil {
		return env.Errorf("mkdir %s: %w%s", fs.dir, err, pio.Remedy(err))
	}
	fs.paths = make([]pio.Path, cfg.Count)
	for i := range fs.paths {
		fs.paths[i] = pio.MustPath(filepath.Join(fs.dir, fmt.Sprintf("f%d.%d", env.Rank, i)))
	}
	if len(fs.buf) != int(cfg.Size) {
		fs.buf = make([]byte, cfg.Size)
		for i := range fs.buf {
			fs.buf[i] = byte(i*131 + 7) // not zeros: some storage compresses or skips them
		}
	}
	fs.made = 0
	return nil
}

// createOne is the create op: open(O_CREAT|O_EXCL), write, close.
func createOne(p pio.Path, buf []byte) (int, error) {
	fd, err := pio.Open(unix.AT_FDCWD, p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	n := 0
	if len(buf) > 0 {
		n, err = pio.Write(fd, buf)
	}
	if cerr := pio.Close(fd); err == nil {
		err = cerr
	}
	return n, err
}

// opClock times a loop of ops with one clock read per op: an op's end is
// the next op's start (report.Recorder.BeginAt), so an op's latency also
// carries the few tens of ns of bookkeeping between two syscalls, and the
// latencies of a loop add up to its wall time, but for the yields (see
// yielder), which are charged to no op. It reads the op clock
// (report.Ticks): the TSC where it can be trusted, because a Go read of
// the OS clock costs a loop of 10 µs unlinks ~4% on a kernel that flushes
// the TLB at every syscall (see report/clock.go).
//
// The loop's context is polled at the yields too, not before every op: a
// cancelled loop still stops within yieldEvery plus one op, and the op
// itself touches no channel. On a kernel that flushes the TLB on every
// syscall (page-table isolation without PCID, as on many VMs), every cache
// line and page the loop touches between two syscalls costs a refill, so
// the fewer it touches, the closer it runs to a bare C loop.
type opClock struct {
	base, last int64 // report.Ticks readings: the loop's start, the last op's end
	y          yielder
	done       <-chan struct{}
	stop       bool // the context was found done at a yield
}

func newOpClock(ctx context.Context) opClock {
	t := report.Ticks()
	c := opClock{base: t, last: t, done: ctx.Done(), stop: ctx.Err() != nil}
	c.y.due(0)
	return c
}

// lap reads the op clock once and returns the ns since the last lap (or
// since newOpClock); last becomes the next op's start.
func (c *opClock) lap() int64 {
	t := report.Ticks()
	d := report.TickNs(t - c.last)
	c.last = t
	if c.y.due(report.TickNs(t - c.base)) {
		yield()
		select {
		case <-c.done:
			c.stop = true
		default:
		}
		c.last = report.Ticks()
	}
	return d
}

// populate creates every file untimed (Setup of list, move and delete).
func (fs *fileSet) populate(ctx context.Context, env *Env) error {
	for i, p := range fs.paths {
		if i%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if _, err := createOne(p, fs.buf); err != nil {
			return env.Errorf("setup: create %s: %w%s", p, err, pio.Remedy(err))
		}
		fs.made++
	}
	return nil
}

// remove unlinks what this rank created, ignoring files already gone.
func (fs *fileSet) remove(env *Env, paths []pio.Path) error {
	var first error
	for _, p := range paths {
		if err := pio.Unlink(unix.AT_FDCWD, p); err != nil && err != unix.ENOENT && first == nil {
			first = env.Errorf("teardown: unlink %s: %w", p, err)
		}
	}
	fs.made = 0
	return first
}

// countIn returns how many entries named f<rank>.* dir holds; used to
// verify that a listing, a move or a delete really happened.
func countOwn(dir string, rank int) (int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	prefix := fmt.Sprintf("f%d.", rank)
	n := 0
	for _, e := range ents {
		if len(e.Name()) > len(prefix) && e.Name()[:len(prefix)] == prefix {
			n++
		}
	}
	return n, nil
}

type createFiles struct {
	cfg metaConfig
	fs  fileSet
}

// ExpectedOps lets the progress line give an ETA.
func (p *createFiles) ExpectedOps() int64 { return int64(p.cfg.Count) }
func (p *moveFiles) ExpectedOps() int64   { return int64(p.cfg.Count) }
func (p *deleteFiles) ExpectedOps() int64 { return int64(p.cfg.Count) }

func (p *createFiles) Config() any                        { return &p.cfg }
func (p *createFiles) Footprint(ranks int) Footprint      { return p.cfg.Footprint(ranks) }
func (p *createFiles) Verify(context.Context, *Env) error { return nil }

func (p *createFiles) Setup(ctx context.Context, env *Env) error {
	env.Recorder("create") // its histogram is allocated here, not in the timed Run
	return p.fs.prepare(env, &p.cfg, "files")
}

func (p *createFiles) Run(ctx context.Context, env *Env) error {
	rec := env.Recorder("create")
	clk := newOpClock(ctx)
	for i := range p.fs.paths {
		path := &p.fs.paths[i]
		if clk.stop {
			return ctx.Err()
		}
		rec.BeginAt(path.Name(), clk.last)
		n, err := createOne(*path, p.fs.buf)
		rec.ObserveNs(clk.lap(), int64(n), err)
		if err != nil {
			return env.Errorf("create %s: %w%s", path, err, pio.Remedy(err))
		}
		p.fs.made++
	}
	return nil
}

func (p *createFiles) Teardown(ctx context.Context, env *Env) error {
	return p.fs.remove(env, p.fs.paths[:p.fs.made])
}

type listFiles struct {
	cfg     metaConfig
	fs      fileSet
	dir     pio.Path // fs.dir, prepared
	scratch []byte
	raw     []byte
	seen    int
}

func (p *listFiles) Config() any                   { return &p.cfg }
func (p *listFiles) Footprint(ranks int) Footprint { return p.cfg.Footprint(ranks) }

func (p *listFiles) Setup(ctx context.Context, env *Env) error {
	if err := p.fs.prepare(env, &p.cfg, "files"); err != nil {
		return err
	}
	if p.scratch == nil {
		p.scratch = make([]byte, 64<<10)
	}
	p.dir = pio.MustPath(p.fs.dir)
	env.Recorder("readdir") // histograms are allocated here, not in the timed Run
	env.Recorder("stat")
	return p.fs.populate(ctx, env)
}

func (p *listFiles) Run(ctx context.Context, env *Env) error {
	readdir, stat := env.Recorder("readdir"), env.Recorder("stat")
	clk := newOpClock(ctx)
	readdir.BeginAt(&p.fs.dir, clk.last)
	dfd, err := pio.Open(unix.AT_FDCWD, p.dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err == nil {
		p.scratch, p.raw, err = pio.ReadDir(dfd, p.scratch, p.raw[:0])
		if err != nil {
			pio.Close(dfd)
		}
	}
	readdir.ObserveNs(clk.lap(), 0, err)
	if err != nil {
		return env.Errorf("readdir %s: %w%s", p.fs.dir, err, pio.Remedy(err))
	}
	defer pio.Close(dfd)
	var st unix.Stat_t
	p.seen, err = pio.EachName(p.raw, func(name []byte) error {
		if clk.stop {
			return ctx.Err()
		}
		stat.BeginAt(&p.fs.dir, clk.last)
		err := pio.StatName(dfd, name, &st)
		stat.ObserveNs(clk.lap(), 0, err)
		if err != nil {
			return env.Errorf("stat %s/%s: %w%s", p.fs.dir, unix.ByteSliceToString(name), err, pio.Remedy(err))
		}
		return nil
	})
	return err
}

// Verify checks the listing saw every file that exists, so a filesystem
// that returns a short listing fails instead of looking fast.
func (p *listFiles) Verify(ctx context.Context, env *Env) error {
	want := p.cfg.Count
	if p.cfg.SharedDir {
		want *= env.Size
	}
	if p.seen != want {
		return env.Errorf("verify: listing of %s returned %d entries, want %d", p.fs.dir, p.seen, want)
	}
	return nil
}

func (p *listFiles) Teardown(ctx context.Context, env *Env) error {
	return p.fs.remove(env, p.fs.paths[:p.fs.made])
}

type moveFiles struct {
	cfg   metaConfig
	fs    fileSet
	dst   []pio.Path
	moved int
}

func (p *moveFiles) Config() any                   { return &p.cfg }
func (p *moveFiles) Footprint(ranks int) Footprint { return p.cfg.Footprint(ranks) }

func (p *moveFiles) Setup(ctx context.Context, env *Env) error {
	if err := p.fs.prepare(env, &p.cfg, "src"); err != nil {
		return err
	}
	dstDir := filepath.Join(filepath.Dir(p.fs.dir), "dst")
	if err := os.MkdirAll(dstDir, 0o755); err != nil {
		return env.Errorf("mkdir %s: %w%s", dstDir, err, pio.Remedy(err))
	}
	p.dst = make([]pio.Path, len(p.fs.paths))
	for i, src := range p.fs.paths {
		p.dst[i] = pio.MustPath(filepath.Join(dstDir, filepath.Base(src.String())))
	}
	p.moved = 0
	env.Recorder("rename") // its histogram is allocated here, not in the timed Run
	return p.fs.populate(ctx, env)
}

func (p *moveFiles) Run(ctx context.Context, env *Env) error {
	rec := env.Recorder("rename")
	clk := newOpClock(ctx)
	for i := range p.fs.paths {
		src := &p.fs.paths[i]
		if clk.stop {
			return ctx.Err()
		}
		rec.BeginAt(src.Name(), clk.last)
		err := pio.Rename(*src, p.dst[i])
		rec.ObserveNs(clk.lap(), 0, err)
		if err != nil {
			return env.Errorf("rename %s -> %s: %w%s", src, p.dst[i], err, pio.Remedy(err))
		}
		p.moved++
	}
	return nil
}

func (p *moveFiles) Verify(ctx context.Context, env *Env) error {
	n, err := countOwn(filepath.Dir(p.dst[0].String()), env.Rank)
	if err != nil {
		return env.Errorf("verify: %w", err)
	}
	if n != p.cfg.Count {
		return env.Errorf("verify: %d of this rank's files are in %s after the move, want %d", n, filepath.Dir(p.dst[0].String()), p.cfg.Count)
	}
	return nil
}

func (p *moveFiles) Teardown(ctx context.Context, env *Env) error {
	err := p.fs.remove(env, p.dst[:p.moved])
	if err2 := p.fs.remove(env, p.fs.paths[p.moved:]); err == nil {
		err = err2
	}
	return err
}

type deleteFiles struct {
	cfg     metaConfig
	fs      fileSet
	deleted int
}

func (p *deleteFiles) Config() any                   { return &p.cfg }
func (p *deleteFiles) Footprint(ranks int) Footprint { return p.cfg.Footprint(ranks) }

func (p *deleteFiles) Setup(ctx context.Context, env *Env) error {
	if err := p.fs.prepare(env, &p.cfg, "files"); err != nil {
		return err
	}
	p.deleted = 0
	env.Recorder("unlink") // its histogram is allocated here, not in the timed Run
	return p.fs.populate(ctx, env)
}

func (p *deleteFiles) Run(ctx context.Context, env *Env) error {
	rec := env.Recorder("unlink")
	clk := newOpClock(ctx)
	for i := range p.fs.paths {
		path := &p.fs.paths[i]
		if clk.stop {
			return ctx.Err()
		}
		rec.BeginAt(path.Name(), clk.last)
		err := pio.Unlink(unix.AT_FDCWD, *path)
		rec.ObserveNs(clk.lap(), 0, err)
		if err != nil {
			return env.Errorf("unlink %s: %w%s", path, err, pio.Remedy(err))
		}
		p.deleted++
	}
	return nil
}

func (p *deleteFiles) Verify(ctx context.Context, env *Env) error {
	n, err := countOwn(p.fs.dir, env.Rank)
	if err != nil {
		return env.Errorf("verify: %w", err)
	}
	if n != 0 {
		return env.Errorf("verify: %d of this rank's files are still listed in %s after unlink", n, p.fs.dir)
	}
	return nil
}

func (p *deleteFiles) Teardown(ctx context.Context, env *Env) error {
	return p.fs.remove(env, p.fs.paths[p.deleted:])
}

type folderConfig struct {
	Depth       int  `toml:"depth" doc:"levels of directories below the tree root"`
	Breadth     int  `toml:"breadth" doc:"subdirectories per directory"`
	FilesPerDir int  `toml:"files_per_dir" doc:"files created in every directory of the tree"`
	Size        Size `toml:"size" doc:"bytes written into each file"`
	SharedDir   bool `toml:"shared_dir" doc:"every rank's tree hangs off one shared directory"`
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
		return &KeyError{Key: "depth", Msg: fmt.Sprintf("%d out of range (1 .. 32)", c.Depth)}
	case c.Breadth < 1 || c.Breadth > 100_000:
		return &KeyError{Key: "breadth", Msg: fmt.Sprintf("%d out of range (1 .. 100000)", c.Breadth)}
	case c.FilesPerDir < 0 || c.FilesPerDir > 1_000_000:
		return &KeyError{Key: "files_per_dir", Msg: fmt.Sprintf("%d out of range (0 .. 1000000)", c.FilesPerDir)}
	case c.dirs() > maxTreeDirs:
		return &KeyError{Key: "breadth", Msg: fmt.Sprintf("depth %d x breadth %d makes more than %d directories per rank", c.Depth, c.Breadth, maxTreeDirs)}
	case c.dirs()*int64(c.FilesPerDir) > maxMetaCount:
		return &KeyError{Key: "files_per_dir", Msg: fmt.Sprintf("the tree would hold more than %d files per rank", maxMetaCount)}
	case c.Size > 1<<30:
		return &KeyError{Key: "size", Msg: "more than 1GiB per file"}
	}
	return nil
}

type folderBench struct {
	cfg   folderConfig
	root  string
	dirs  []pio.Path // parents before children
	files []pio.Path
	buf   []byte
	// progress, so teardown removes exactly what exists
	mkdirs, creates, unlinks, rmdirs int
}

func (p *folderBench) Config() any { return &p.cfg }

func (p *folderBench) Footprint(ranks int) Footprint {
	d := p.cfg.dirs()
	return Footprint{Files: d + d*int64(p.cfg.FilesPerDir), Bytes: d * int64(p.cfg.FilesPerDir) * int64(p.cfg.Size)}
}

func (p *folderBench) Setup(ctx context.Context, env *Env) error {
	p.root = filepath.Join(env.RankDir, "tree")
	prefix := "d"
	if p.cfg.SharedDir {
		p.root = filepath.Join(env.Dir, "tree")
		prefix = fmt.Sprintf("r%d.d", env.Rank)
	}
	if err := os.MkdirAll(p.root, 0o755); err != nil {
		return env.Errorf("mkdir %s: %w%s", p.root, err, pio.Remedy(err))
	}
	p.dirs, p.files = p.dirs[:0], p.files[:0]
	level := []string{p.root}
	for d := 0; d < p.cfg.Depth; d++ {
		var next []string
		for _, parent := range level {
			for b := 0; b < p.cfg.Breadth; b++ {
				name := fmt.Sprintf("d%d", b)
				if d == 0 {
					name = fmt.Sprintf("%s%d", prefix, b)
				}
				dir := filepath.Join(parent, name)
				next = append(next, dir)
				p.dirs = append(p.dirs, pio.MustPath(dir))
				for f := 0; f < p.cfg.FilesPerDir; f++ {
					p.files = append(p.files, pio.MustPath(filepath.Join(dir, fmt.Sprintf("f%d", f))))
				}
			}
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

func (p *folderBench) Run(ctx context.Context, env *Env) error {
	mk, cr, ul, rd := env.Recorder("mkdir"), env.Recorder("create"), env.Recorder("unlink"), env.Recorder("rmdir")
	clk := newOpClock(ctx)
	for i := range p.dirs {
		d := &p.dirs[i]
		if clk.stop {
			return ctx.Err()
		}
		mk.BeginAt(d.Name(), clk.last)
		err := pio.Mkdir(unix.AT_FDCWD, *d, 0o755)
		mk.ObserveNs(clk.lap(), 0, err)
		if err != nil {
			return env.Errorf("mkdir %s: %w%s", d, err, pio.Remedy(err))
		}
		p.mkdirs++
	}
	for i := range p.files {
		f := &p.files[i]
		if clk.stop {
			return ctx.Err()
		}
		cr.BeginAt(f.Name(), clk.last)
		n, err := createOne(*f, p.buf)
		cr.ObserveNs(clk.lap(), int64(n), err)
		if err != nil {
			return env.Errorf("create %s: %w%s", f, err, pio.Remedy(err))
		}
		p.creates++
	}
	for i := range p.files {
		f := &p.files[i]
		if clk.stop {
			return ctx.Err()
		}
		ul.BeginAt(f.Name(), clk.last)
		err := pio.Unlink(unix.AT_FDCWD, *f)
		ul.ObserveNs(clk.lap(), 0, err)
		if err != nil {
			return env.Errorf("unlink %s: %w%s", f, err, pio.Remedy(err))
		}
		p.unlinks++
	}
	for i := len(p.dirs) - 1; i >= 0; i-- {
		if clk.stop {
			return ctx.Err()
		}
		rd.BeginAt(p.dirs[i].Name(), clk.last)
		err := pio.Rmdir(unix.AT_FDCWD, p.dirs[i])
		rd.ObserveNs(clk.lap(), 0, err)
		if err != nil {
			return env.Errorf("rmdir %s: %w%s", p.dirs[i], err, pio.Remedy(err))
		}
		p.rmdirs++
	}
	return nil
}

func (p *folderBench) Verify(ctx context.Context, env *Env) error {
	if p.rmdirs != len(p.dirs) {
		return nil // Run failed; its error already says why
	}
	for _, d := range p.dirs[:min(len(p.dirs), p.cfg.Breadth)] {
		if _, err := os.Lstat(d.String()); err == nil {
			return env.Errorf("verify: %s still exists after rmdir", d)
		}
	}
	return nil
}

// Teardown undoes a partial Run: files created but not unlinked, then
// directories made but not removed, deepest first.
func (p *folderBench) Teardown(ctx context.Context, env *Env) error {
	var first error
	if p.unlinks < p.creates {
		for _, f := range p.files[p.unlinks:p.creates] {
			if err := pio.Unlink(unix.AT_FDCWD, f); err != nil && err != unix.ENOENT && first == nil {
				first = env.Errorf("teardown: unlink %s: %w", f, err)
			}
		}
	}
	if p.rmdirs < p.mkdirs {
		for i := p.mkdirs - 1; i >= 0; i-- {
			if err := pio.Rmdir(unix.AT_FDCWD, p.dirs[i]); err != nil && err != unix.ENOENT && first == nil {
				first = env.Errorf("teardown: rmdir %s: %w", p.dirs[i], err)
			}
		}
	}
	return first
}
