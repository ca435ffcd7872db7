package workflow

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	osuser "os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/report"
)

// Register adds the workflow family's kinds to r.
func Register(r *phases.Registry) {
	r.Register(phases.Kind{Name: "git_clone", Family: "workflow", Summary: "clone a repository count times per rank with the system git (default: a repository prism generates of files, dirs and commits; or url / path); op clone",
		New: func() phases.Phase { return &gitClone{cfg: defaultGitClone()} }, Sample: "count = 2\nfiles = 20\ndirs = 3\ncommits = 3"})
	r.Register(phases.Kind{Name: "tar", Family: "workflow", Summary: "archive a generated tree (files, dirs, file_size) or a source directory per rank, compression none/gzip/zstd; op archive",
		New: func() phases.Phase { return &tarPhase{cfg: defaultTarConfig()} }, Sample: "files = 40\ndirs = 4\nfile_size = \"8KiB\"\ncompression = \"gzip\""})
	r.Register(phases.Kind{Name: "untar", Family: "workflow", Summary: "extract the archive of the latest tar phase (or one made in setup, or a given file) per rank, refusing entries that leave the target; ops extract, extract_file",
		New: func() phases.Phase { return &untarPhase{cfg: defaultUntarConfig()} }, Sample: "files = 40\ndirs = 4\nfile_size = \"8KiB\""})
}

// ---- git_clone ----

type gitCloneConfig struct {
	Count    int         `toml:"count" doc:"clones per rank, one after another"`
	URL      string      `toml:"url" doc:"repository to clone (any git URL); default: a repository prism generates per rank"`
	Path     string      `toml:"path" doc:"local repository to clone instead (copied, --no-hardlinks)"`
	Files    int         `toml:"files" doc:"files of the generated repository (a small Python project)"`
	Dirs     int         `toml:"dirs" doc:"directories of the generated repository"`
	FileSize phases.Size `toml:"file_size" doc:"mean file size of the generated repository (data files are 2-4x)"`
	Commits  int         `toml:"commits" doc:"commits of the generated repository; each after the first rewrites one file in 20"`
	Seed     uint64      `toml:"seed" doc:"seed of the generated content"`
}

func defaultGitClone() gitCloneConfig {
	return gitCloneConfig{Count: 4, Files: 200, Dirs: 12, FileSize: 4096, Commits: 20, Seed: 1}
}

func (c *gitCloneConfig) tree() wfTree {
	return wfTree{Files: c.Files, Dirs: c.Dirs, FileSize: c.FileSize, Seed: c.Seed}
}

func (c *gitCloneConfig) generated() bool { return c.URL == "" && c.Path == "" }

func (c *gitCloneConfig) Validate() error {
	if _, err := exec.LookPath("git"); err != nil {
		return fmt.Errorf("git_clone runs the system git, which is not on PATH (%v): install it (apt-get install git)", err)
	}
	switch {
	case c.Count < 1 || c.Count > 10_000:
		return &phases.KeyError{Key: "count", Msg: fmt.Sprintf("%d out of range (1 .. 10000)", c.Count)}
	case c.URL != "" && c.Path != "":
		return &phases.KeyError{Key: "path", Msg: "give url or path, not both"}
	case c.Commits < 1 || c.Commits > 10_000:
		return &phases.KeyError{Key: "commits", Msg: fmt.Sprintf("%d out of range (1 .. 10000)", c.Commits)}
	case strings.HasPrefix(c.URL, "-"):
		return &phases.KeyError{Key: "url", Msg: "a repository cannot start with '-'"}
	}
	if c.generated() {
		if err := c.tree().validate(); err != nil {
			return err
		}
		if int64(c.Count)*int64(c.Files) > phases.MaxFilesPerRank {
			return &phases.KeyError{Key: "count", Msg: fmt.Sprintf("count x files is more than %d files per rank", phases.MaxFilesPerRank)}
		}
	}
	return nil
}

// historyBytes bounds what the generated history adds to the tree.
func (c *gitCloneConfig) historyBytes() int64 {
	return int64(c.Commits-1) * int64(max(1, c.Files/20)) * 4 * int64(c.FileSize)
}

type gitClone struct {
	cfg       gitCloneConfig
	root      string   // <rank dir>/git, made in Setup, removed in Teardown
	src       string   // what git clone is given
	srcHead   string   // HEAD of a local path source, for Verify
	pin       pinned   // <rank dir>/git, the clones' working directory
	clones    []string // destination of each clone, relative to pin
	shown     []string // the same, as messages name them
	treeBytes int64    // bytes of a generated tree, recorded per clone
	env       []string
	made      int
}

func (p *gitClone) Config() any        { return &p.cfg }
func (p *gitClone) Fadvises() bool     { return true }
func (p *gitClone) ExpectedOps() int64 { return int64(p.cfg.Count) }
func (p *gitClone) Footprint(ranks int) phases.Footprint {
	if !p.cfg.generated() {
		return phases.Footprint{} // unknown before cloning
	}
	tb := p.cfg.tree().bytes()
	repo := tb + p.cfg.historyBytes()
	perClone := int64(p.cfg.Files+p.cfg.Dirs) + 30 // checkout, .git metadata, pack
	return phases.Footprint{Files: 30 + int64(p.cfg.Count)*perClone, Bytes: repo + int64(p.cfg.Count)*(tb+repo)}
}

// Memory: the generated tree's layout and fast-import's buffers.
func (p *gitClone) Memory(ranks int) (int64, string) {
	return int64(p.cfg.Files+p.cfg.Dirs)*200 + 4<<20, "files or dirs"
}

func (p *gitClone) Setup(ctx context.Context, env *phases.Env) error {
	var err error
	if p.pin, err = pin(env, "git"); err != nil {
		return err
	}
	p.root = p.pin.proc
	p.env = wfGitEnv(p.cfg.URL == "")
	p.made, p.srcHead, p.treeBytes = 0, "", 0
	switch {
	case p.cfg.URL != "":
		p.src = p.cfg.URL
	case p.cfg.Path != "":
		abs, err := filepath.Abs(p.cfg.Path)
		if err != nil {
			return env.Errorf("setup: path %s: %w", p.cfg.Path, err)
		}
		p.src = abs
		head, err := wfGit(ctx, p.env, p.root, "-C", abs, "rev-parse", "HEAD")
		if err != nil {
			return env.Errorf("setup: path = %q is not a git repository with a commit: %w", p.cfg.Path, err)
		}
		p.srcHead = strings.TrimSpace(head)
	default:
		// Relative to the working directory git runs in: the pinned one.
		p.src = "source.git"
		if p.treeBytes, err = wfMakeRepo(ctx, p.env, p.root, p.src, p.cfg.tree(), p.cfg.Commits, env.Rank); err != nil {
			return env.Errorf("setup: generate repository %s: %w", p.pin.shown(p.src), p.pin.clean(err))
		}
	}
	if env.Cache == phases.CacheFadvise && p.cfg.URL == "" {
		src := p.src
		if !filepath.IsAbs(src) {
			src = filepath.Join(p.root, src)
		}
		if err := wfEvictTree(src); err != nil {
			return env.Errorf("setup: evict %s from the page cache: %w", p.pin.shown(p.src), p.pin.clean(err))
		}
	}
	p.clones = make([]string, p.cfg.Count)
	p.shown = make([]string, p.cfg.Count)
	for i := range p.clones {
		p.clones[i] = fmt.Sprintf("clone%d", i)
		p.shown[i] = p.pin.shown(p.clones[i])
	}
	env.Recorder("clone") // its histogram is allocated here, not in the timed Run
	return nil
}

// Run times each `git clone` as a whole: process start, object copy,
// checkout. --no-hardlinks makes a local clone copy the object files onto
// the storage under test (hard links would turn it into a metadata-only
// operation, and fail across filesystems); --no-local would instead run
// the pack protocol, whose compression puts git's CPU time on the
// measured path.
func (p *gitClone) Run(ctx context.Context, env *phases.Env) error {
	rec := env.Recorder("clone")
	for i := range p.clones {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var stderr wfTail
		cmd := phases.Command(ctx, p.root, "git", append(wfGitOpts(), "clone", "--quiet", "--no-hardlinks", "--", p.src, p.clones[i])...)
		cmd.Env, cmd.Stderr = p.env, &stderr
		start := rec.BeginOn(&p.shown[i])
		err := cmd.Run()
		rec.Observe(start, int(p.treeBytes), err)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			return env.Errorf("git clone %s %s: %w%s", p.pin.shown(p.src), p.shown[i], err, p.pin.clean(errors.New(stderr.suffix())))
		}
		p.made++
	}
	return nil
}

// Verify checks every clone is complete: the generated history has all
// its commits and the checkout every file; a path source's HEAD arrived.
func (p *gitClone) Verify(ctx context.Context, env *phases.Env) error {
	for i, c := range p.clones[:p.made] {
		shown := p.shown[i]
		switch {
		case p.cfg.generated():
			n, err := wfGit(ctx, p.env, p.root, "-C", c, "rev-list", "--count", "HEAD")
			if err != nil {
				return env.Errorf("verify: %s: %w", shown, p.pin.clean(err))
			}
			if strings.TrimSpace(n) != strconv.Itoa(p.cfg.Commits) {
				return env.Errorf("verify: clone %s has %s commits, want %d", shown, strings.TrimSpace(n), p.cfg.Commits)
			}
			files, err := wfCountFiles(filepath.Join(p.root, c), ".git")
			if err != nil {
				return env.Errorf("verify: %w", p.pin.clean(err))
			}
			if files != p.cfg.Files {
				return env.Errorf("verify: clone %s checked out %d files, want %d", shown, files, p.cfg.Files)
			}
		default:
			head, err := wfGit(ctx, p.env, p.root, "-C", c, "rev-parse", "--verify", "HEAD")
			if err != nil {
				return env.Errorf("verify: clone %s has no HEAD: %w", shown, p.pin.clean(err))
			}
			if p.srcHead != "" && strings.TrimSpace(head) != p.srcHead {
				return env.Errorf("verify: clone %s is at %s, the source at %s", shown, strings.TrimSpace(head), p.srcHead)
			}
		}
	}
	return nil
}

// Teardown removes the clones and the generated repository; a path
// source lies outside p.root and is never touched.
func (p *gitClone) Teardown(ctx context.Context, env *phases.Env) error {
	if p.root == "" {
		return nil
	}
	err := p.pin.remove()
	p.root = ""
	if err != nil {
		return env.Errorf("teardown: %w", err)
	}
	return nil
}

// wfGitEnv is the environment of every git prism runs: no variable that
// points git at another repository, no prompt for credentials. With
// isolate (generated and local sources) the user's global and system
// configuration are ignored too, so a setting such as core.autocrlf or
// transfer.fsckObjects cannot change what is measured; a url source keeps
// them, since reaching a remote may need the user's credential helper or
// proxy.
func wfGitEnv(isolate bool) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "GIT_") && (isolate || k != "GIT_SSH" && k != "GIT_SSH_COMMAND" && k != "GIT_ASKPASS" && !strings.HasPrefix(k, "GIT_PROXY")) {
			continue
		}
		if k == "LC_ALL" || k == "LANG" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "GIT_TERMINAL_PROMPT=0", "LC_ALL=C")
	if isolate {
		env = append(env, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	}
	return env
}

// wfGitOpts pins the settings that change a clone's work whatever the
// user's configuration says (url sources still read it).
func wfGitOpts() []string {
	return []string{"-c", "core.autocrlf=false", "-c", "core.fsmonitor=false", "-c", "transfer.fsckObjects=false",
		"-c", "checkout.workers=1", "-c", "advice.detachedHead=false", "-c", "init.defaultBranch=main"}
}

// wfGit runs git untimed in dir and returns its stdout.
func wfGit(ctx context.Context, env []string, dir string, args ...string) (string, error) {
	var out bytes.Buffer
	var stderr wfTail
	cmd := phases.Command(ctx, dir, "git", append(wfGitOpts(), args...)...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %w%s", strings.Join(args, " "), err, stderr.suffix())
	}
	return out.String(), nil
}

// wfMakeRepo creates a bare repository at dir holding commits commits of
// the tree for rank, through one `git fast-import` (no working tree, no
// process per commit), and returns the bytes of the final tree. The first
// commit adds every file; each later one rewrites one file in 20.
// Author, committer and dates are fixed, so the history is the same on
// every run.
func wfMakeRepo(ctx context.Context, env []string, cwd, dir string, t wfTree, commits, rank int) (int64, error) {
	if _, err := wfGit(ctx, env, cwd, "init", "--quiet", "--bare", "--initial-branch=main", dir); err != nil {
		return 0, err
	}
	var stderr wfTail
	cmd := phases.Command(ctx, cwd, "git", append(wfGitOpts(), "-C", dir, "fast-import", "--quiet", "--done")...)
	cmd.Env, cmd.Stderr = env, &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	_, files := t.layout()
	sizes := make([]int64, len(files))
	w := bufio.NewWriterSize(in, 1<<20)
	var buf []byte
	blob := func(i, version int) {
		buf = t.content(buf, i, files[i], rank, version)
		sizes[i] = int64(len(buf))
		fmt.Fprintf(w, "M 100644 inline %s\ndata %d\n", files[i].Rel, len(buf))
		w.Write(buf)
		w.WriteByte('\n')
	}
	changed := max(1, len(files)/20)
	for c := 0; c < commits && ctx.Err() == nil; c++ {
		msg := fmt.Sprintf("commit %d of %d", c+1, commits)
		fmt.Fprintf(w, "commit refs/heads/main\ncommitter prism <prism@example.invalid> %d +0000\ndata %d\n%s\n", 1_700_000_000+3600*c, len(msg), msg)
		if c == 0 {
			for i := range files {
				blob(i, 0)
			}
			continue
		}
		for k := 0; k < changed; k++ {
			blob((c*7919+k*104729)%len(files), c)
		}
	}
	w.WriteString("done\n")
	werr := w.Flush()
	in.Close()
	if err := cmd.Wait(); err != nil {
		return 0, fmt.Errorf("git fast-import: %w%s", err, stderr.suffix())
	}
	if werr != nil {
		return 0, werr
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	var total int64
	for _, s := range sizes {
		total += s
	}
	return total, nil
}

// wfCountFiles counts the regular files under root, skipping the
// directory named skip at the top (".git").
func wfCountFiles(root, skip string) (int, error) {
	n := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == skip && filepath.Dir(path) == root {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			n++
		}
		return nil
	})
	return n, err
}

// wfTail keeps the last 2 KiB written to it: a failing command's stderr.
type wfTail struct{ b []byte }

func (t *wfTail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 2048 {
		t.b = append(t.b[:0], t.b[len(t.b)-2048:]...)
	}
	return len(p), nil
}

func (t *wfTail) suffix() string {
	s := strings.TrimSpace(string(t.b))
	if s == "" {
		return ""
	}
	return ": " + s
}

// ---- tar ----

// Compressions a tar or untar phase accepts.
var wfCompressions = []string{"none", "gzip", "zstd"}

type tarConfig struct {
	Files       int         `toml:"files" doc:"files of the generated tree (a small Python project)"`
	Dirs        int         `toml:"dirs" doc:"directories of the generated tree"`
	FileSize    phases.Size `toml:"file_size" doc:"mean file size of the generated tree (data files are 2-4x)"`
	Seed        uint64      `toml:"seed" doc:"seed of the generated content"`
	Source      string      `toml:"source" doc:"archive this directory (on every rank) instead of a generated tree: an absolute path is an input prism only reads; a relative one is below the run directory (a tree an earlier phase made)"`
	Compression string      `toml:"compression" doc:"none | gzip | zstd"`
	Fsync       bool        `toml:"fsync" doc:"fsync the archive before the archive op ends"`
	KeepArchive bool        `toml:"keep_archive" doc:"keep the last iteration's archive for a following untar phase (it goes with the run directory)"`
}

func defaultTarConfig() tarConfig {
	return tarConfig{Files: 1000, Dirs: 40, FileSize: 4096, Seed: 1, Compression: "none", KeepArchive: true}
}

// Resolve: a source directory replaces the generated tree's keys.
func (p *tarPhase) Resolve([]*phases.Spec) phases.Resolved {
	if p.cfg.Source == "" {
		return phases.Resolved{Unused: []string{"source"}}
	}
	return phases.Resolved{Unused: []string{"files", "dirs", "file_size", "seed"}}
}

func (c *tarConfig) tree() wfTree {
	return wfTree{Files: c.Files, Dirs: c.Dirs, FileSize: c.FileSize, Seed: c.Seed}
}

func (c *tarConfig) Validate() error {
	if !slices.Contains(wfCompressions, c.Compression) {
		return &phases.KeyError{Key: "compression", Msg: fmt.Sprintf("unknown %q (allowed: %s)", c.Compression, strings.Join(wfCompressions, ", "))}
	}
	if c.Source == "" {
		return c.tree().validate()
	}
	return nil
}

// wfTarBytes bounds the size of an uncompressed tar of a tree.
func wfTarBytes(t wfTree) int64 {
	return t.bytes() + int64(t.Files+t.Dirs)*(512+511) + 2048
}

// wfArchiveInfo is what a tar phase leaves in Env.State for untar.
type wfArchiveInfo struct {
	Path  string // for messages
	Rel   string // its directory, relative to the run directory
	Name  string // its name in that directory
	Phase string
	Files int // regular files in the archive
	Bytes int64
}

// wfStateArchive is the Env.State key of the latest tar phase's archive.
const wfStateArchive = "workflow.archive"

type tarPhase struct {
	cfg      tarConfig
	pin      pinned
	dir      string // <rank dir>/tar, as its proc path (pinned)
	src      string
	srcDir   *pio.Dir // a relative source, below the run directory
	ownTree  bool
	archive  string
	a        wfArchiver
	files    int
	bytes    int64
	verified bool
}

func (p *tarPhase) Config() any    { return &p.cfg }
func (p *tarPhase) Fadvises() bool { return true }
func (p *tarPhase) Footprint(ranks int) phases.Footprint {
	if p.cfg.Source != "" {
		return phases.Footprint{Files: 1}
	}
	t := p.cfg.tree()
	return phases.Footprint{Files: int64(t.Files+t.Dirs) + 1, Bytes: t.bytes() + wfTarBytes(t)}
}

// Memory: the generated tree's layout and the archiver's buffers.
func (p *tarPhase) Memory(ranks int) (int64, string) {
	return int64(p.cfg.Files+p.cfg.Dirs)*200 + 8<<20, "files or dirs"
}

func (p *tarPhase) Setup(ctx context.Context, env *phases.Env) error {
	p.pin.close()
	var err error
	if p.pin, err = pin(env, "tar"); err != nil {
		return err
	}
	p.dir = p.pin.proc
	// The previous iteration's archive was kept for untar; this one replaces it.
	p.archive = p.pin.join("archive" + wfExt(p.cfg.Compression))
	if err := os.Remove(p.archive); err != nil && !errors.Is(err, os.ErrNotExist) {
		return env.Errorf("setup: %w", p.pin.clean(err))
	}
	delete(env.State, wfStateArchive)
	p.files, p.bytes, p.verified, p.ownTree = 0, 0, false, false
	evict := env.Cache == phases.CacheFadvise
	if p.cfg.Source != "" {
		// An absolute source is an explicit input outside the run (read,
		// never written: the walk opens everything O_RDONLY); a relative
		// one is a directory an earlier phase made below the run
		// directory, opened component by component without following a
		// link, and read through its descriptor.
		abs := p.cfg.Source
		var err error
		if filepath.IsAbs(abs) {
			var st os.FileInfo
			if st, err = os.Stat(abs); err == nil && !st.IsDir() {
				err = errors.New("not a directory")
			}
		} else if p.srcDir, err = env.Run.OpenPath(abs); err == nil {
			abs = p.srcDir.ProcPath()
		}
		if err != nil {
			return env.Errorf("setup: source = %q: %w", p.cfg.Source, err)
		}
		p.src = abs
		if evict {
			if err := wfEvictTree(abs); err != nil {
				return env.Errorf("setup: evict %s from the page cache: %w", abs, err)
			}
		}
	} else {
		p.src = p.pin.join("src")
		p.ownTree = true
		if _, err := p.cfg.tree().write(ctx, p.src, env.Rank, evict); err != nil {
			return env.Errorf("setup: %w", p.pin.clean(pio.NewOpError("generate tree", p.src, err)))
		}
	}
	env.Recorder("archive") // its histogram is allocated here, not in the timed Run
	return p.a.prepare(p.cfg.Compression)
}

// Run times the creation of the whole archive: walking the tree, reading
// every file, compressing, writing the archive (and fsync with fsync).
func (p *tarPhase) Run(ctx context.Context, env *phases.Env) error {
	rec := env.Recorder("archive")
	shown := p.pin.shown(p.archive)
	start := rec.BeginOn(&shown)
	files, n, err := p.a.write(ctx, p.src, p.archive, p.cfg.Fsync)
	rec.Observe(start, int(n), err)
	if err != nil {
		return env.Errorf("%w", p.pin.clean(pio.NewOpError("archive", p.src+" -> "+p.archive, err)))
	}
	p.files, p.bytes = files, n
	if st, err := os.Stat(p.archive); err == nil {
		env.SetMetric("archive_bytes", float64(st.Size()))
	}
	return nil
}

// Verify reads the archive back and checks it holds every file and byte.
func (p *tarPhase) Verify(ctx context.Context, env *phases.Env) error {
	files, n, err := wfScanArchive(p.archive)
	if err != nil {
		return env.Errorf("verify: %w", p.pin.clean(err))
	}
	if files != p.files || n != p.bytes {
		return env.Errorf("verify: %s holds %d files of %d bytes, %d files of %d bytes were archived", p.pin.shown(p.archive), files, n, p.files, p.bytes)
	}
	if p.ownTree && files != p.cfg.Files {
		return env.Errorf("verify: %s holds %d files, the tree has %d", p.pin.shown(p.archive), files, p.cfg.Files)
	}
	p.verified = true
	return nil
}

// Teardown removes the generated tree; the archive stays (in the run
// directory) for a following untar phase when keep_archive is set and the
// iteration succeeded.
// Outputs is the archive kept (keep_archive) for the untar phases after
// this one.
func (p *tarPhase) Outputs() []string {
	if p.verified && p.cfg.KeepArchive && p.archive != "" {
		return []string{p.pin.shown(p.archive)}
	}
	return nil
}

func (p *tarPhase) Teardown(ctx context.Context, env *phases.Env) error {
	var first error
	if p.ownTree {
		first = os.RemoveAll(p.src)
		p.ownTree = false
	}
	if p.verified && p.cfg.KeepArchive {
		env.State[wfStateArchive] = &wfArchiveInfo{Path: p.pin.shown(p.archive), Rel: env.RunRel(fmt.Sprintf("r%d/tar", env.Rank)),
			Name: filepath.Base(p.archive), Phase: env.Name, Files: p.files, Bytes: p.bytes}
	} else if p.archive != "" {
		if err := os.Remove(p.archive); err != nil && !errors.Is(err, os.ErrNotExist) && first == nil {
			first = err
		}
	}
	p.pin.close()
	if p.srcDir != nil {
		p.srcDir.Close()
		p.srcDir = nil
	}
	if first != nil {
		return env.Errorf("teardown: %w", p.pin.clean(first))
	}
	return nil
}

func wfExt(compression string) string {
	switch compression {
	case "gzip":
		return ".tar.gz"
	case "zstd":
		return ".tar.zst"
	}
	return ".tar"
}

// wfArchiver writes archives; its buffers and compressors are made in
// Setup and reset for each archive, so no timed op pays for them.
type wfArchiver struct {
	compression string
	bw          *bufio.Writer
	gz          *gzip.Writer
	zw          *zstd.Encoder
	buf         []byte
	// The walk's state, reused from archive to archive: the getdents
	// scratch buffer, one listing per depth, the entry's name in the
	// archive, its stat, the header, and the owner names seen.
	scratch []byte
	lists   [][]byte
	path    []byte
	st      unix.Stat_t
	hdr     tar.Header
	names   map[uint64]string
	files   int
	n       int64
}

// walk archives the entries of the directory open as dirfd, whose archive
// name is a.path, and the directories below it. Every operation is
// relative to a directory descriptor — getdents, fstatat and openat on the
// name in the listing, O_NOFOLLOW — so no path is resolved again per file
// and nothing is allocated per file but the header's name. File data is
// copied with read(2) into a.buf and written to the tar writer: an
// *os.File would be an io.WriterTo, which io.CopyBuffer prefers to its
// buffer, copying through a fresh 32 KiB one per file. Entries come in
// directory order, as GNU tar's default (--no-sort). Symlinks are archived
// as links; devices, fifos and sockets are skipped.
func (a *wfArchiver) walk(ctx context.Context, tw *tar.Writer, dirfd, depth int) error {
	if depth >= len(a.lists) {
		a.lists = append(a.lists, nil)
	}
	if a.scratch == nil {
		a.scratch = make([]byte, 64<<10)
	}
	var err error
	a.scratch, a.lists[depth], err = pio.ReadDir(dirfd, a.scratch, a.lists[depth][:0])
	if err != nil {
		return err
	}
	list := a.lists[depth]
	base := len(a.path)
	_, err = pio.EachName(list, func(raw []byte) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		name := raw[:bytes.IndexByte(raw, 0)]
		a.path = append(a.path[:base], name...)
		if err := pio.LstatName(dirfd, raw, &a.st); err != nil {
			return err
		}
		h := &a.hdr
		*h = tar.Header{Mode: int64(a.st.Mode & 0o7777), Uid: int(a.st.Uid), Gid: int(a.st.Gid),
			ModTime: time.Unix(a.st.Mtim.Sec, a.st.Mtim.Nsec), Uname: a.owner(a.st.Uid, true), Gname: a.owner(a.st.Gid, false)}
		switch a.st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			h.Typeflag = tar.TypeDir
			a.path = append(a.path, '/')
		case unix.S_IFREG:
			h.Typeflag, h.Size = tar.TypeReg, a.st.Size
		case unix.S_IFLNK:
			h.Typeflag = tar.TypeSymlink
			n, err := unix.Readlinkat(dirfd, string(name), a.buf)
			if err != nil {
				return err
			}
			h.Linkname = string(a.buf[:n])
		default:
			return nil
		}
		h.Name = string(a.path)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			fd, err := pio.OpenName(dirfd, raw, unix.O_RDONLY|unix.O_DIRECTORY)
			if err != nil {
				return err
			}
			err = a.walk(ctx, tw, fd, depth+1)
			unix.Close(fd)
			return err
		case tar.TypeReg:
			fd, err := pio.OpenName(dirfd, raw, unix.O_RDONLY)
			if err != nil {
				return err
			}
			m, err := a.copyFile(tw, fd)
			unix.Close(fd)
			if err != nil {
				return err
			}
			a.files++
			a.n += m
		}
		return nil
	})
	if err == nil {
		a.path = a.path[:base]
	}
	return err
}

// copyFile copies the open file fd into tw through a.buf.
func (a *wfArchiver) copyFile(tw *tar.Writer, fd int) (int64, error) {
	var n int64
	for {
		m, err := unix.Read(fd, a.buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, nil
		}
		if _, err := tw.Write(a.buf[:m]); err != nil {
			return n, err
		}
		n += int64(m)
	}
}

// owner is the user (or group) name of id, as GNU tar records it, looked
// up once per id.
func (a *wfArchiver) owner(id uint32, user bool) string {
	key := uint64(id)<<1 | 1
	if !user {
		key = uint64(id) << 1
	}
	if s, ok := a.names[key]; ok {
		return s
	}
	if a.names == nil {
		a.names = map[uint64]string{}
	}
	s := ""
	if user {
		if u, err := osuser.LookupId(strconv.Itoa(int(id))); err == nil {
			s = u.Username
		}
	} else if g, err := osuser.LookupGroupId(strconv.Itoa(int(id))); err == nil {
		s = g.Name
	}
	a.names[key] = s
	return s
}

func (a *wfArchiver) prepare(compression string) error {
	a.compression = compression
	if a.bw == nil {
		a.bw = bufio.NewWriterSize(nil, 1<<20)
		a.buf = make([]byte, 1<<20)
	}
	switch {
	case compression == "gzip" && a.gz == nil:
		a.gz = gzip.NewWriter(nil)
	case compression == "zstd" && a.zw == nil:
		// One goroutine per rank: ranks already fill the node's cores.
		zw, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
		if err != nil {
			return err
		}
		a.zw = zw
	}
	return nil
}

// write archives the tree at src into a new file dst and returns the
// regular files and their bytes. Symlinks are archived as links; devices,
// fifos and sockets are skipped.
func (a *wfArchiver) write(ctx context.Context, src, dst string, fsync bool) (files int, n int64, err error) {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	a.bw.Reset(f)
	var out io.Writer = a.bw
	var comp io.WriteCloser
	switch a.compression {
	case "gzip":
		a.gz.Reset(a.bw)
		out, comp = a.gz, a.gz
	case "zstd":
		a.zw.Reset(a.bw)
		out, comp = a.zw, a.zw
	}
	tw := tar.NewWriter(out)
	root, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0, &os.PathError{Op: "open", Path: src, Err: err}
	}
	a.files, a.n, a.path = 0, 0, a.path[:0]
	err = a.walk(ctx, tw, root, 0)
	unix.Close(root)
	files, n = a.files, a.n
	if err != nil {
		// Name the entry: a.path holds it where the walk stopped.
		err = fmt.Errorf("%s: %w", filepath.Join(src, string(a.path)), err)
	}
	if err == nil {
		err = tw.Close()
	}
	if err == nil && comp != nil {
		err = comp.Close()
	}
	if err == nil {
		err = a.bw.Flush()
	}
	if err == nil && fsync {
		err = f.Sync()
	}
	return files, n, err
}

// wfOpenArchive opens an archive, detecting its compression from its
// first bytes, and returns a tar reader over it.
func wfOpenArchive(f io.Reader, br *bufio.Reader, gz *gzip.Reader, zd *zstd.Decoder) (*tar.Reader, string, error) {
	br.Reset(f)
	magic, _ := br.Peek(4)
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		if err := gz.Reset(br); err != nil {
			return nil, "gzip", err
		}
		gz.Multistream(true)
		return tar.NewReader(gz), "gzip", nil
	case bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		if err := zd.Reset(br); err != nil {
			return nil, "zstd", err
		}
		return tar.NewReader(zd), "zstd", nil
	}
	return tar.NewReader(br), "none", nil
}

func wfNewDecoder() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
}

// wfScanArchive counts an archive's regular files and their bytes.
func wfScanArchive(path string) (files int, n int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	zd, err := wfNewDecoder()
	if err != nil {
		return 0, 0, err
	}
	defer zd.Close()
	tr, _, err := wfOpenArchive(f, bufio.NewReaderSize(nil, 1<<16), new(gzip.Reader), zd)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files, n, nil
		}
		if err != nil {
			return files, n, fmt.Errorf("%s: %w", path, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			files++
			n += hdr.Size
		}
	}
}

// ---- untar ----

type untarConfig struct {
	Archive     string      `toml:"archive" doc:"\"\": the archive of the latest tar phase on this rank, else one made in setup; \"generate\": always one made in setup; or the path of an archive file (.tar, .tar.gz, .tar.zst)"`
	Files       int         `toml:"files" doc:"files of the tree a generated archive holds"`
	Dirs        int         `toml:"dirs" doc:"directories of that tree"`
	FileSize    phases.Size `toml:"file_size" doc:"mean file size of that tree (data files are 2-4x)"`
	Seed        uint64      `toml:"seed" doc:"seed of the generated content"`
	Compression string      `toml:"compression" doc:"compression of a generated archive: none | gzip | zstd (an existing archive's is detected)"`
	MaxBytes    phases.Size `toml:"max_bytes" doc:"most bytes the extraction may write, summed over the entries' declared sizes and checked before each is written; 0 = 64 x the archive's size, at least 64MiB (a gzip or sparse bomb stops here, not at ENOSPC)"`
	MaxEntries  int         `toml:"max_entries" doc:"most entries the extraction takes"`
	MaxDepth    int         `toml:"max_depth" doc:"most path components of an entry's name"`
}

func defaultUntarConfig() untarConfig {
	return untarConfig{Files: 1000, Dirs: 40, FileSize: 4096, Seed: 1, Compression: "none", MaxEntries: 10_000_000, MaxDepth: 256}
}

func (c *untarConfig) tree() wfTree {
	return wfTree{Files: c.Files, Dirs: c.Dirs, FileSize: c.FileSize, Seed: c.Seed}
}

func (c *untarConfig) Validate() error {
	switch {
	case c.MaxBytes < 0:
		return &phases.KeyError{Key: "max_bytes", Msg: "negative"}
	case c.MaxEntries < 1 || c.MaxEntries > 1_000_000_000:
		return &phases.KeyError{Key: "max_entries", Msg: fmt.Sprintf("%d out of range (1 .. 1000000000)", c.MaxEntries)}
	case c.MaxDepth < 1 || c.MaxDepth > 4096:
		return &phases.KeyError{Key: "max_depth", Msg: fmt.Sprintf("%d out of range (1 .. 4096)", c.MaxDepth)}
	}
	if !slices.Contains(wfCompressions, c.Compression) {
		return &phases.KeyError{Key: "compression", Msg: fmt.Sprintf("unknown %q (allowed: %s)", c.Compression, strings.Join(wfCompressions, ", "))}
	}
	if c.Archive == "" || c.Archive == "generate" {
		return c.tree().validate()
	}
	return nil
}

type untarPhase struct {
	cfg     untarConfig
	pin     pinned // <rank dir>/untar: the target and a generated archive
	from    pinned // the tar phase's directory whose archive it extracts
	dir     string // pin's proc path
	target  string
	archive string
	own     bool // the archive was made by this phase
	want    int  // regular files the archive holds (-1: unknown)
	x       wfExtractor
}

func (p *untarPhase) Config() any    { return &p.cfg }
func (p *untarPhase) Fadvises() bool { return true }
func (p *untarPhase) Footprint(ranks int) phases.Footprint {
	if p.cfg.Archive != "" && p.cfg.Archive != "generate" {
		return phases.Footprint{}
	}
	t := p.cfg.tree()
	return phases.Footprint{Files: int64(t.Files+t.Dirs) + 1, Bytes: t.bytes() + wfTarBytes(t)}
}

// Resolve: with archive = "" and a tar phase before that keeps its
// archive, untar extracts that archive (on the ranks the tar phase ran
// on), so its own tree and compression keys do not apply and its footprint
// is the tar phase's tree; an archive file's compression is detected.
func (p *untarPhase) Resolve(before []*phases.Spec) phases.Resolved {
	tree := []string{"files", "dirs", "file_size", "seed", "compression"}
	switch p.cfg.Archive {
	case "generate":
		return phases.Resolved{}
	case "":
	default:
		return phases.Resolved{Unused: tree, Notes: []string{"archive: the file " + p.cfg.Archive}, Footprint: func(int) phases.Footprint { return phases.Footprint{} }}
	}
	for i := len(before) - 1; i >= 0; i-- {
		tp, ok := before[i].Phase.(*tarPhase)
		if !ok || !tp.cfg.KeepArchive {
			continue
		}
		s := before[i]
		r := phases.Resolved{Unused: tree}
		if tp.cfg.Source != "" {
			r.Notes = []string{fmt.Sprintf("archive: phase %d (%s)'s of %s, %s", s.Index+1, s.Name, tp.cfg.Source, tp.cfg.Compression)}
			r.Footprint = func(int) phases.Footprint { return phases.Footprint{} }
			return r
		}
		t := tp.cfg.tree()
		r.Notes = []string{fmt.Sprintf("archive: phase %d (%s)'s, %d files in %d dirs of %s, %s (ranks it did not run on make their own)",
			s.Index+1, s.Name, t.Files, t.Dirs, t.FileSize, tp.cfg.Compression)}
		r.Footprint = func(int) phases.Footprint { return phases.Footprint{Files: int64(t.Files + t.Dirs), Bytes: t.bytes()} }
		return r
	}
	return phases.Resolved{Notes: []string{"archive: no tar phase before keeps one: setup makes it from files, dirs, file_size, compression"}}
}

// Memory: what the extractor records of every entry it made (~250
// bytes), for as many entries as max_entries lets through, at most.
func (p *untarPhase) Memory(ranks int) (int64, string) {
	n := int64(p.cfg.Files + p.cfg.Dirs)
	if p.cfg.Archive != "" && p.cfg.Archive != "generate" {
		n = min(int64(p.cfg.MaxEntries), 1_000_000)
	}
	return n*250 + 8<<20, "max_entries"
}

func (p *untarPhase) Setup(ctx context.Context, env *phases.Env) error {
	p.pin.close()
	p.from.close()
	var err error
	if p.pin, err = pin(env, "untar"); err != nil {
		return err
	}
	p.dir = p.pin.proc
	p.target = p.pin.join("out")
	if err := os.Mkdir(p.target, 0o755); err != nil {
		return env.Errorf("setup: %w", p.pin.clean(pio.NewOpError("mkdir", p.target, err)))
	}
	p.own, p.want = false, -1
	latest, _ := env.State[wfStateArchive].(*wfArchiveInfo)
	switch {
	case p.cfg.Archive == "" && latest != nil:
		if p.from, err = pinRun(env, latest.Rel); err != nil {
			return err
		}
		p.archive, p.want = p.from.join(latest.Name), latest.Files
	case p.cfg.Archive == "" || p.cfg.Archive == "generate":
		src := p.pin.join("src")
		p.archive = p.pin.join("archive" + wfExt(p.cfg.Compression))
		p.own = true
		if _, err := p.cfg.tree().write(ctx, src, env.Rank, false); err != nil {
			return env.Errorf("setup: %w", p.pin.clean(pio.NewOpError("generate tree", src, err)))
		}
		var a wfArchiver
		if err := a.prepare(p.cfg.Compression); err != nil {
			return env.Errorf("setup: %w", err)
		}
		files, _, err := a.write(ctx, src, p.archive, false)
		if err != nil {
			return env.Errorf("setup: %w", p.pin.clean(pio.NewOpError("archive", p.archive, err)))
		}
		p.want = files
		if err := os.RemoveAll(src); err != nil {
			return env.Errorf("setup: %w", p.pin.clean(err))
		}
	default:
		abs, err := filepath.Abs(p.cfg.Archive)
		if err == nil {
			var st os.FileInfo
			if st, err = os.Stat(abs); err == nil && !st.Mode().IsRegular() {
				err = errors.New("not a regular file")
			}
		}
		if err != nil {
			return env.Errorf("setup: archive = %q: %w", p.cfg.Archive, err)
		}
		p.archive = abs
	}
	if env.Cache == phases.CacheFadvise {
		if err := wfEvictTree(p.archive); err != nil {
			return env.Errorf("setup: evict %s from the page cache: %w", p.archive, err)
		}
	}
	limit := int64(p.cfg.MaxBytes)
	if limit == 0 {
		limit = 64 << 20
		if st, err := os.Stat(p.archive); err == nil {
			limit = max(limit, 64*st.Size())
		}
	}
	p.x.limits = wfLimits{bytes: limit, entries: p.cfg.MaxEntries, depth: p.cfg.MaxDepth}
	env.Recorder("extract") // its histogram is allocated here, not in the timed Run
	return p.x.prepare(env.Recorder("extract_file"))
}

// Run times the whole extraction (op extract) and, inside it, the creation
// of every regular file (op extract_file).
func (p *untarPhase) Run(ctx context.Context, env *phases.Env) error {
	rec := env.Recorder("extract")
	shown := p.showArchive()
	start := rec.BeginOn(&shown)
	err := p.x.extract(ctx, p.archive, p.target)
	rec.Observe(start, int(p.x.bytes), err)
	if err != nil {
		return env.Errorf("%w", p.from.clean(p.pin.clean(pio.NewOpError("extract", p.archive+" -> "+p.target, err))))
	}
	return nil
}

// Verify walks the extracted tree: every file and byte the extraction
// reports is there, and as many files as the archive holds.
func (p *untarPhase) Verify(ctx context.Context, env *phases.Env) error {
	var files, links int
	var n int64
	err := filepath.WalkDir(p.target, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			files++
			n += info.Size()
		case d.Type()&os.ModeSymlink != 0:
			links++
		}
		return nil
	})
	if err != nil {
		return env.Errorf("verify: %w", p.pin.clean(err))
	}
	if files != p.x.files || n != p.x.bytes || links != p.x.links {
		return env.Errorf("verify: %s holds %d files of %d bytes and %d symlinks after extracting %d files of %d bytes and %d symlinks", p.pin.shown(p.target), files, n, links, p.x.files, p.x.bytes, p.x.links)
	}
	if p.want >= 0 && p.x.files-p.x.hardlinks != p.want {
		return env.Errorf("verify: extracted %d files, the archive holds %d", p.x.files-p.x.hardlinks, p.want)
	}
	return nil
}

// Teardown removes the extracted tree and an archive this phase made; an
// archive of a tar phase or of the user stays.
func (p *untarPhase) Teardown(ctx context.Context, env *phases.Env) error {
	if p.dir == "" {
		return nil
	}
	p.from.close()
	err := p.pin.remove()
	p.dir = ""
	if err != nil {
		return env.Errorf("teardown: %w", err)
	}
	return nil
}

// showArchive names the archive in messages and progress.
func (p *untarPhase) showArchive() string {
	if p.from.dir != nil {
		return p.from.shown(p.archive)
	}
	if p.own {
		return p.pin.shown(p.archive)
	}
	return p.archive
}

// UnsafeEntryError is an archive entry extraction refuses.
type UnsafeEntryError struct {
	Entry string
	Msg   string
}

func (e *UnsafeEntryError) Error() string {
	return fmt.Sprintf("archive entry %q refused: %s", e.Entry, e.Msg)
}

// wfExtractor extracts archives into a directory that it creates the
// content of alone, refusing every entry that would put or point anything
// outside it: absolute names, names with ".." that climb out, symlinks
// whose target leaves the directory (also through other symlinks of the
// archive), hard links to anything but a file of the archive, and any
// entry below a symlink (it never writes through a link).
type wfExtractor struct {
	limits  wfLimits
	fileRec *report.Recorder
	br      *bufio.Reader
	gz      *gzip.Reader
	zd      *zstd.Decoder
	buf     []byte
	cur     string // the file being created, for the stall watchdog

	// what this extraction made, by path relative to the target
	kinds map[string]byte  // 'd' directory, 'f' file, 'l' symlink
	sizes map[string]int64 // regular files (and hard links)
	// linkRaw holds each symlink's target as written, joined to the
	// symlink's directory; deps maps a path to the symlinks whose
	// resolution went through it, so a later symlink there can be checked
	// against every link it would redirect.
	linkRaw map[string]string
	deps    map[string]map[string]bool

	files, hardlinks, links, dirs int
	bytes                         int64
	entries                       int
	declared                      int64 // sum of the regular entries' sizes
}

// wfLimits bound an extraction, checked on each entry's header before
// anything of it is written: a gzip or sparse bomb, a million-entry
// archive or a 100,000-level path is refused at once instead of filling
// the filesystem or the CPU for minutes.
type wfLimits struct {
	bytes   int64
	entries int
	depth   int
}

// LimitError is an archive refused by an extraction limit.
type LimitError struct {
	Entry string
	Msg   string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("archive entry %q refused: %s", e.Entry, e.Msg)
}

func (x *wfExtractor) prepare(rec *report.Recorder) error {
	x.fileRec = rec
	if x.br == nil {
		x.br = bufio.NewReaderSize(nil, 1<<20)
		x.buf = make([]byte, 1<<20)
		x.gz = new(gzip.Reader)
		zd, err := wfNewDecoder()
		if err != nil {
			return err
		}
		x.zd = zd
	}
	return nil
}

func (x *wfExtractor) extract(ctx context.Context, archive, target string) error {
	x.kinds = map[string]byte{".": 'd'}
	x.sizes = map[string]int64{}
	x.linkRaw = map[string]string{}
	x.deps = map[string]map[string]bool{}
	x.files, x.hardlinks, x.links, x.dirs, x.bytes = 0, 0, 0, 0, 0
	// Setup found a regular file, but the archive is the user's and may
	// have been swapped since: O_NONBLOCK so that a FIFO does not block
	// the open, and what was opened is judged again.
	f, err := os.OpenFile(archive, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return err
	} else if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is no longer a regular file (%s)", archive, st.Mode().Type())
	}
	tr, _, err := wfOpenArchive(f, x.br, x.gz, x.zd)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(target)
	if err != nil {
		return err
	}
	defer root.Close()
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return pio.NewOpError("read", archive, err)
		}
		if err := x.entry(ctx, tr, hdr, root, target); err != nil {
			return err
		}
	}
}

// entry extracts one archive entry.
func (x *wfExtractor) entry(ctx context.Context, tr *tar.Reader, hdr *tar.Header, root *os.Root, target string) error {
	if err := x.limit(hdr); err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader:
		return nil
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return &UnsafeEntryError{Entry: hdr.Name, Msg: "devices and fifos are not extracted"}
	}
	rel, err := wfEntryPath(hdr.Name)
	if err != nil {
		return err
	}
	if rel == "." {
		if hdr.Typeflag == tar.TypeDir {
			return nil
		}
		return &UnsafeEntryError{Entry: hdr.Name, Msg: "names the target directory itself"}
	}
	if err := x.parents(root, hdr.Name, filepath.Dir(rel)); err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.mkdir(root, hdr.Name, rel)
	case tar.TypeReg, tar.TypeGNUSparse:
		return x.file(tr, hdr, filepath.Join(target, rel), rel)
	case tar.TypeSymlink:
		if filepath.IsAbs(hdr.Linkname) {
			return &UnsafeEntryError{Entry: hdr.Name, Msg: fmt.Sprintf("symlink to the absolute path %q points out of the target directory", hdr.Linkname)}
		}
		if err := x.checkLink(hdr, rel); err != nil {
			return err
		}
		if err := root.Symlink(hdr.Linkname, rel); err != nil {
			delete(x.linkRaw, rel)
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
		x.kinds[rel] = 'l'
		x.links++
		return nil
	case tar.TypeLink:
		old, err := wfEntryPath(hdr.Linkname)
		if err != nil {
			return &UnsafeEntryError{Entry: hdr.Name, Msg: fmt.Sprintf("hard link to %q points out of the target directory", hdr.Linkname)}
		}
		if x.kinds[old] != 'f' {
			return &UnsafeEntryError{Entry: hdr.Name, Msg: fmt.Sprintf("hard link to %q, which is not a file extracted from this archive", hdr.Linkname)}
		}
		if err := root.Link(old, rel); err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
		x.kinds[rel], x.sizes[rel] = 'f', x.sizes[old]
		x.files++
		x.hardlinks++
		x.bytes += x.sizes[old]
		return nil
	}
	return &UnsafeEntryError{Entry: hdr.Name, Msg: fmt.Sprintf("entry type %q is not extracted", hdr.Typeflag)}
}

// limit checks an entry against the extraction's limits, before anything
// of it is read or written.
func (x *wfExtractor) limit(hdr *tar.Header) error {
	x.entries++
	l := x.limits
	switch {
	case l.entries > 0 && x.entries > l.entries:
		return &LimitError{Entry: hdr.Name, Msg: fmt.Sprintf("more than max_entries = %d entries", l.entries)}
	case l.depth > 0 && strings.Count(strings.Trim(hdr.Name, "/"), "/")+1 > l.depth:
		return &LimitError{Entry: hdr.Name, Msg: fmt.Sprintf("its name has more than max_depth = %d components", l.depth)}
	}
	if hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeGNUSparse {
		if hdr.Size < 0 {
			return &LimitError{Entry: hdr.Name, Msg: "negative size"}
		}
		x.declared += hdr.Size
		if l.bytes > 0 && x.declared > l.bytes {
			return &LimitError{Entry: hdr.Name, Msg: fmt.Sprintf("the entries so far declare %d bytes, more than max_bytes = %d: an archive bomb? (raise max_bytes if it is not)", x.declared, l.bytes)}
		}
	}
	return nil
}

// wfSparse reports whether an entry is a GNU sparse file (old or PAX
// format): its holes are written as holes, not as zeros.
func wfSparse(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// wfEntryPath turns an entry name into a clean path relative to the
// target, refusing absolute names and names that climb out of it.
func wfEntryPath(name string) (string, error) {
	switch {
	case name == "":
		return "", &UnsafeEntryError{Entry: name, Msg: "empty name"}
	case strings.HasPrefix(name, "/"):
		return "", &UnsafeEntryError{Entry: name, Msg: "absolute path"}
	case strings.IndexByte(name, 0) >= 0:
		return "", &UnsafeEntryError{Entry: name, Msg: "NUL in name"}
	}
	rel := filepath.Clean(strings.TrimSuffix(name, "/"))
	if !filepath.IsLocal(rel) && rel != "." {
		return "", &UnsafeEntryError{Entry: name, Msg: "leaves the target directory (..)"}
	}
	return rel, nil
}

// parents makes sure every directory above an entry is one this
// extraction created (making missing ones), so nothing is ever written
// through a symlink or into a file.
func (x *wfExtractor) parents(root *os.Root, entry, dir string) error {
	if dir == "." {
		return nil
	}
	switch x.kinds[dir] {
	case 'd':
		return nil
	case 'l':
		return &UnsafeEntryError{Entry: entry, Msg: fmt.Sprintf("lies below the symlink %q; prism does not extract through links", dir)}
	case 'f':
		return &UnsafeEntryError{Entry: entry, Msg: fmt.Sprintf("lies below the file %q", dir)}
	}
	if err := x.parents(root, entry, filepath.Dir(dir)); err != nil {
		return err
	}
	return x.mkdir(root, entry, dir)
}

func (x *wfExtractor) mkdir(root *os.Root, entry, rel string) error {
	switch x.kinds[rel] {
	case 'd':
		return nil
	case 0:
	default:
		return &UnsafeEntryError{Entry: entry, Msg: fmt.Sprintf("directory %q exists as another kind of entry", rel)}
	}
	if err := root.Mkdir(rel, 0o755); err != nil {
		return fmt.Errorf("entry %q: %w", entry, err)
	}
	x.kinds[rel] = 'd'
	x.dirs++
	return nil
}

// file creates one regular file; its open+write+close is the
// extract_file op (its bytes are counted once, in extract). A file that fits the buffer is read from the archive
// first, so only the filesystem is timed; for a larger one the syscall
// times are summed and the decompression between its writes is left out.
func (x *wfExtractor) file(tr *tar.Reader, hdr *tar.Header, full, rel string) error {
	path, err := pio.NewPath(full)
	if err != nil {
		return err
	}
	x.cur = full
	mode := uint32(hdr.Mode)&0o777 | 0o600
	flags := unix.O_CREAT | unix.O_EXCL | unix.O_WRONLY | unix.O_NOFOLLOW
	size := hdr.Size
	if size <= int64(len(x.buf)) {
		if _, err := io.ReadFull(tr, x.buf[:size]); err != nil {
			return fmt.Errorf("entry %q: read: %w", hdr.Name, err)
		}
		start := x.fileRec.BeginOn(&x.cur)
		fd, err := pio.Open(unix.AT_FDCWD, path, flags, mode)
		if err == nil {
			if size > 0 {
				_, err = pio.Write(fd, x.buf[:size])
			}
			if cerr := pio.Close(fd); err == nil {
				err = cerr
			}
		}
		x.fileRec.Observe(start, 0, err) // the bytes count once, in extract
		if err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, pio.NewOpError("create", full, err))
		}
	} else {
		var ns int64
		t := time.Now()
		fd, err := pio.Open(unix.AT_FDCWD, path, flags, mode)
		ns += int64(time.Since(t))
		if err != nil {
			x.fileRec.ObserveNs(ns, 0, err)
			return fmt.Errorf("entry %q: %w", hdr.Name, pio.NewOpError("create", full, err))
		}
		var written int64
		sparse := wfSparse(hdr)
		for written < size && err == nil {
			chunk := x.buf[:min(int64(len(x.buf)), size-written)]
			if _, err = io.ReadFull(tr, chunk); err != nil {
				err = fmt.Errorf("read: %w", err)
				break
			}
			t = time.Now()
			var m int
			if sparse {
				m, err = writeHoles(fd, chunk, written)
			} else {
				m, err = pio.Write(fd, chunk)
			}
			ns += int64(time.Since(t))
			written += int64(m)
		}
		if err == nil && sparse {
			// A trailing hole: the file's size without writing it.
			t = time.Now()
			err = unix.Ftruncate(fd, size)
			ns += int64(time.Since(t))
		}
		t = time.Now()
		if cerr := pio.Close(fd); err == nil {
			err = cerr
		}
		ns += int64(time.Since(t))
		x.fileRec.ObserveNs(ns, 0, err)
		if err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, pio.NewOpError("write", full, err))
		}
	}
	x.kinds[rel], x.sizes[rel] = 'f', size
	x.files++
	x.bytes += size
	return nil
}

// holeBlock is the unit writeHoles skips when it is all zeros.
const holeBlock = 4096

// writeHoles writes chunk at off, leaving every all-zero 4 KiB block as a
// hole (a sparse entry's holes read back as zeros).
func writeHoles(fd int, chunk []byte, off int64) (int, error) {
	for i := 0; i < len(chunk); i += holeBlock {
		b := chunk[i:min(i+holeBlock, len(chunk))]
		if allZero(b) {
			continue
		}
		if _, err := pio.PwriteFull(fd, b, off+int64(i)); err != nil {
			return i, err
		}
	}
	return len(chunk), nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// checkLink admits a symlink at rel only if its target, followed through
// the symlinks extracted so far, stays inside the target directory, and if
// every earlier symlink whose resolution passes through rel still does
// with the new link in place (a link to a path that later becomes a link
// is common: lib.so -> lib.so.1 -> lib.so.1.2). On success the link is
// recorded in linkRaw.
func (x *wfExtractor) checkLink(hdr *tar.Header, rel string) error {
	x.linkRaw[rel] = filepath.ToSlash(filepath.Dir(rel)) + "/" + hdr.Linkname
	if !x.resolveLink(rel) {
		delete(x.linkRaw, rel)
		return &UnsafeEntryError{Entry: hdr.Name, Msg: fmt.Sprintf("symlink to %q points out of the target directory (or loops)", hdr.Linkname)}
	}
	for dep := range x.deps[rel] {
		if dep != rel && !x.resolveLink(dep) {
			delete(x.linkRaw, rel)
			return &UnsafeEntryError{Entry: hdr.Name, Msg: fmt.Sprintf("a symlink here to %q would make symlink %q point out of the target directory", hdr.Linkname, dep)}
		}
	}
	return nil
}

// resolveLink reports whether symlink link resolves inside the target,
// recording every path its resolution passes through in deps.
func (x *wfExtractor) resolveLink(link string) bool {
	_, ok := x.resolve(x.linkRaw[link], 0, func(p string) {
		d := x.deps[p]
		if d == nil {
			d = map[string]bool{}
			x.deps[p] = d
		}
		d[link] = true
	})
	return ok
}

// resolve follows path (relative to the target, possibly holding "..")
// through the symlinks extracted so far, as the kernel would, and returns
// where it lands; ok is false when it climbs out of the target or nests
// links deeper than 40 (a loop). visit sees every path it passes through.
func (x *wfExtractor) resolve(path string, depth int, visit func(string)) (string, bool) {
	var stack []string
	for _, c := range strings.Split(path, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			if len(stack) == 0 {
				return "", false
			}
			stack = stack[:len(stack)-1]
			continue
		}
		stack = append(stack, c)
		cur := strings.Join(stack, "/")
		visit(cur)
		raw, isLink := x.linkRaw[cur]
		if !isLink {
			continue
		}
		if depth >= 40 {
			return "", false
		}
		to, ok := x.resolve(raw, depth+1, visit)
		if !ok {
			return "", false
		}
		stack = stack[:0]
		if to != "." {
			stack = append(stack, strings.Split(to, "/")...)
		}
	}
	if len(stack) == 0 {
		return ".", true
	}
	return strings.Join(stack, "/"), true
}
