package phases

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	pio "github.com/prism-hpc/prism/io"
)

// Persistent datasets and checkpoints: the one tree prism keeps outside a
// run directory. A phase with persist = "<name>" writes its output once
// under <workdir>/PersistDir/<name>-<hash of its parameters>/; later runs,
// on any number of ranks and hosts, name it (dataset = or checkpoint =
// "<name>") and read it in place after checking it. No run's cleanup
// removes it; `prism datasets rm` does, and only a directory that carries
// one of prism's markers.
//
// The discipline is the run directory's: every directory is reached
// through a descriptor (pio.Dir's *at calls, no link followed, owned by
// this user), and a directory counts as complete only when its marker is
// there. Creation writes PersistPartial first, the files, then the file
// list and the marker last, each through a temporary name renamed into
// place, so a crash at any point leaves a directory that is prism's but
// never taken for complete; the next creation with the same parameters
// writes it again. PersistPartial is also the creating job's claim, with
// a lease, so that two jobs creating one directory at once never both
// write it (persistclaim.go).
const (
	PersistDir     = "prism-datasets"
	PersistMarker  = ".prism-persistent"         // complete: PersistInfo, JSON
	PersistPartial = ".prism-persistent-partial" // creation under way or crashed
	PersistList    = ".prism-files.json"         // []PersistFile, JSON
)

// PersistFile is one file of a persistent directory's list. Its JSON keys
// are the dataload manifest's, so that list is stored as it is.
type PersistFile struct {
	Path string `json:"p"` // relative to the persistent directory
	Size int64  `json:"s"`
	MD5  string `json:"m,omitempty"` // hex; empty when the writer did not record it
}

// PersistInfo is the content of a persistent directory's marker.
type PersistInfo struct {
	Prism   string          `json:"prism"` // "persistent"
	Kind    string          `json:"kind"`  // "dataset" or "checkpoint"
	Name    string          `json:"name"`
	Hash    string          `json:"hash"`
	Params  json.RawMessage `json:"params"`
	Files   int             `json:"files"`
	Bytes   int64           `json:"bytes"`
	ListSum string          `json:"list_sha256"`
	Created string          `json:"created"`
	RunID   string          `json:"run_id"`
	Phase   string          `json:"phase"`
	Host    string          `json:"host"`
}

var persistNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._]{0,63}$`)

// CheckPersistName checks a persist, dataset or checkpoint name: a
// letter or digit, then letters, digits, '.' and '_' (no '-', which
// separates the name from its hash), at most 64.
func CheckPersistName(key, name string) error {
	if !persistNameRE.MatchString(name) {
		return &KeyError{Key: key, Msg: fmt.Sprintf("%q: a name is a letter or digit, then up to 63 letters, digits, '.' or '_'", name)}
	}
	return nil
}

// PersistDirName is the directory of the persistent output name whose
// parameters are params: <name>-<first 12 hex digits of the SHA-256 of
// kind and params' JSON>, so other parameters give another directory.
func PersistDirName(kind, name string, params any) (dir, hash string, raw json.RawMessage) {
	raw, _ = json.Marshal(params)
	s := sha256.Sum256(append([]byte(kind+"\x00"), raw...))
	hash = hex.EncodeToString(s[:6])
	return name + "-" + hash, hash, raw
}

// Persistent is a persistent directory open on one rank.
type Persistent struct {
	Root *pio.Dir
	Dir  string       // its name below PersistDir
	Info *PersistInfo // the marker; nil while it is being created
	List []byte       // the file list's JSON (complete directories)
	// Waited is how long rank 0 waited for another job's creation
	// (CreatePersistent); 0 elsewhere.
	Waited time.Duration
	claim  *claim // rank 0, while this job creates it
}

// Close releases the directory, and a claim this job did not complete
// (its phase failed: the next job claims it at once).
func (p *Persistent) Close() {
	if p == nil {
		return
	}
	if p.claim != nil {
		p.claim.release()
		p.claim = nil
	}
	if p.Root != nil {
		p.Root.Close()
		p.Root = nil
	}
}

func persistParent(env *Env) (*pio.Dir, error) {
	if env.Workdir == nil {
		return nil, env.Errorf("setup: a persistent dataset or checkpoint needs the run's workdir (run it with prism run)")
	}
	return env.Workdir.EnsureSub(PersistDir, 0o755)
}

// readMarker reads and checks the marker of d, which is the directory
// dir below PersistDir: nil, nil when it has none.
func readMarker(d *pio.Dir, dir string) (*PersistInfo, error) {
	b, err := d.ReadFile(PersistMarker, 1<<20)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	info := &PersistInfo{}
	if err := json.Unmarshal(b, info); err != nil || info.Prism != "persistent" {
		return nil, fmt.Errorf("%s: not prism's marker", d.Join(PersistMarker))
	}
	if info.Name+"-"+info.Hash != dir {
		return nil, fmt.Errorf("%s: the marker names %s-%s, not this directory", d.Join(PersistMarker), info.Name, info.Hash)
	}
	return info, nil
}

// readComplete reads the marker and the list of a complete directory and
// checks the list against the marker's checksum.
func readComplete(d *pio.Dir, dir string) (*PersistInfo, []byte, error) {
	info, err := readMarker(d, dir)
	if err != nil {
		return nil, nil, err
	}
	if info == nil {
		what := "no marker"
		if _, err := d.ReadFile(PersistPartial, 1<<20); err == nil {
			what = "an unfinished creation (no marker; run the creating plan again, or prism datasets rm it)"
		}
		return nil, nil, fmt.Errorf("%s: %s: not a complete persistent directory", d.Path(), what)
	}
	list, err := d.ReadFile(PersistList, 1<<34)
	if err != nil {
		return nil, nil, fmt.Errorf("file list: %w", err)
	}
	if s := sha256.Sum256(list); hex.EncodeToString(s[:]) != info.ListSum {
		return nil, nil, fmt.Errorf("%s: its checksum is not the marker's: the list was changed", d.Join(PersistList))
	}
	return info, list, nil
}

// writeAtomic writes data as name in d through a temporary name renamed
// over it after an fsync, so a reader sees the old content or the new,
// never a part.
func writeAtomic(d *pio.Dir, name, tag string, data []byte) error {
	tmp := name + ".tmp-" + tag
	n, tn := pio.MustName(tmp), pio.MustName(name)
	_ = d.Unlink(n)
	fd, err := d.Open(n, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
	if err != nil {
		return d.Wrap("create", n, err)
	}
	_, err = pio.PwriteFull(fd, data, 0)
	if err == nil {
		err = pio.Fsync(fd)
	}
	if cerr := pio.Close(fd); err == nil {
		err = cerr
	}
	if err == nil {
		err = d.Rename(n, d, tn)
	}
	if err != nil {
		_ = d.Unlink(n)
		return d.Wrap("write", tn, err)
	}
	return nil
}

// openAll opens dir below PersistDir on every rank after rank 0 chose it;
// the result is agreed. On an error it closes what it opened itself, not
// mine, which stays the caller's.
func openAll(ctx context.Context, env *Env, parent *pio.Dir, mine *pio.Dir, dir string) (*pio.Dir, error) {
	var local error
	passed := mine != nil
	if mine == nil {
		if parent == nil {
			if parent, local = persistParent(env); local == nil {
				defer parent.Close()
			}
		}
		if local == nil {
			if mine, local = parent.OpenSub(dir); local != nil {
				local = env.Errorf("setup: persistent directory %s: %w (a persistent dataset needs a workdir every rank shares)", parent.Join(dir), local)
			}
		}
	}
	if err := env.Agree(ctx, local); err != nil {
		if mine != nil && !passed {
			mine.Close()
		}
		return nil, err
	}
	return mine, nil
}

// CreatePersistent is the collective start of a phase with persist =
// name: rank 0 makes <workdir>/PersistDir/<name>-<hash>/ and claims it
// (persistclaim.go), or finds it. A complete one with the same parameters
// comes back with its Info and List on every rank (the phase reuses it and
// writes nothing); otherwise Info is nil, this job holds the claim, and
// the phase writes its files into Root, then calls Complete. Another job's
// claim is waited for, at most wait (0: refused at once), looking again
// every persistRenew (less under a short coordination_timeout), each look
// a collective round so that no rank waits longer than that at a
// collective. A directory of that name without
// prism's markers is refused, never written into.
func CreatePersistent(ctx context.Context, env *Env, kind, name string, params any, wait time.Duration) (*Persistent, error) {
	dir, hash, raw := PersistDirName(kind, name, params)
	var c *creator
	if env.Rank == 0 {
		c = &creator{env: env, kind: kind, name: name, dir: dir, hash: hash, raw: raw, wait: wait, start: time.Now()}
		defer func() {
			if c.parent != nil {
				c.parent.Close()
			}
		}()
	}
	// abandon undoes rank 0's half of a creation no caller gets.
	abandon := func() {
		if c != nil {
			if c.cl != nil {
				c.cl.release()
			}
			if c.root != nil {
				c.root.Close()
			}
		}
	}
	var msg []byte
	for {
		var state []byte
		var local error
		if c != nil {
			var st lookState
			st, msg, local = c.look(ctx)
			state = append([]byte{st}, msg...)
		}
		if err := env.Agree(ctx, local); err != nil {
			abandon()
			return nil, err
		}
		out, err := env.Comm.Bcast(ctx, 0, state)
		if err != nil {
			abandon()
			return nil, err
		}
		if len(out) == 0 {
			abandon()
			return nil, env.Errorf("setup: persistent directory %s: no answer from rank 0", dir)
		}
		if out[0] != lookWait {
			msg = out[1:]
			break
		}
	}
	var mine, parent *pio.Dir
	if c != nil {
		mine, parent = c.root, c.parent
	}
	root, err := openAll(ctx, env, parent, mine, dir)
	if err != nil {
		abandon()
		return nil, err
	}
	p := &Persistent{Root: root, Dir: dir}
	if c != nil {
		p.claim, p.Waited = c.cl, time.Since(c.start)
		if c.rounds == 1 {
			p.Waited = 0
		}
	}
	if len(msg) > 0 {
		var m struct {
			Info *PersistInfo
			List []byte
		}
		if err := json.Unmarshal(msg, &m); err != nil {
			p.Close()
			return nil, env.Errorf("setup: persistent marker from rank 0: %w", err)
		}
		p.Info, p.List = m.Info, m.List
	}
	return p, nil
}

// Complete marks a persistent directory complete, on rank 0, once every
// rank has written its files and agreed: the list (list, files, bytes)
// first, then the marker, then the partial marker goes. Only rank 0
// writes; call it on rank 0 and agree on its error.
func (p *Persistent) Complete(env *Env, kind, name string, params any, list []byte, files int, bytes int64) error {
	_, hash, raw := PersistDirName(kind, name, params)
	if p.claim == nil {
		return env.Errorf("verify: %s: this run holds no claim on it", p.Root.Path())
	}
	// Another job took the claim over (this one stalled past its lease):
	// its files may be the other job's, so no marker of this run's.
	if err := p.claim.check(); err != nil {
		return env.Errorf("verify: %w", err)
	}
	if err := writeAtomic(p.Root, PersistList, env.RunID, list); err != nil {
		return env.Errorf("verify: %w", err)
	}
	s := sha256.Sum256(list)
	info := &PersistInfo{Prism: "persistent", Kind: kind, Name: name, Hash: hash, Params: raw, Files: files, Bytes: bytes,
		ListSum: hex.EncodeToString(s[:]), Created: time.Now().UTC().Format(time.RFC3339), RunID: env.RunID, Phase: env.Name, Host: env.Host}
	b, _ := json.MarshalIndent(info, "", "  ")
	if err := p.Root.Sync(); err != nil {
		return env.Errorf("verify: %w", pio.NewOpError("fsync", p.Root.Path(), err))
	}
	if err := p.claim.check(); err != nil {
		return env.Errorf("verify: %w", err)
	}
	if err := writeAtomic(p.Root, PersistMarker, env.RunID, append(b, '\n')); err != nil {
		return env.Errorf("verify: %w", err)
	}
	p.claim.stopRenewing()
	p.claim = nil
	if err := p.Root.Unlink(pio.MustName(PersistPartial)); err != nil && err != unix.ENOENT {
		return env.Errorf("verify: %w", p.Root.Wrap("unlink", pio.MustName(PersistPartial), err))
	}
	p.Info, p.List = info, list
	return p.Root.Sync()
}

// agreeAndShare has the ranks agree on rank 0's look at a dataset (local:
// its error, nil on the other ranks) and hands every rank rank 0's msg;
// when they do not agree, rank 0's half-opened root is closed here, as no
// caller gets it.
func agreeAndShare(ctx context.Context, env *Env, local error, root *pio.Dir, msg []byte) ([]byte, error) {
	if err := env.Agree(ctx, local); err != nil {
		if root != nil {
			root.Close()
		}
		return nil, err
	}
	return env.Comm.Bcast(ctx, 0, msg)
}

// OpenPersistent finds the complete persistent directory of kind named
// name (<name>-<hash>, or the one directory <name>-* when name has no
// hash) on rank 0, checks its marker and list, and opens it on every rank
// with its Info and List.
func OpenPersistent(ctx context.Context, env *Env, key, kind, name string) (*Persistent, error) {
	var msg []byte
	var local error
	var parent, root *pio.Dir
	dir := ""
	if env.Rank == 0 {
		local = func() error {
			var err error
			if parent, err = persistParent(env); err != nil {
				return env.Errorf("setup: %w", err)
			}
			if dir, err = resolvePersist(parent, kind, name); err != nil {
				return env.Errorf("setup: %s = %q: %w", key, name, err)
			}
			if root, err = parent.OpenSub(dir); err != nil {
				return env.Errorf("setup: %s = %q: %w", key, name, err)
			}
			info, list, err := readComplete(root, dir)
			if err != nil {
				return env.Errorf("setup: %s = %q: %w", key, name, err)
			}
			if info.Kind != kind {
				return env.Errorf("setup: %s = %q: %s holds a %s, not a %s", key, name, root.Path(), info.Kind, kind)
			}
			msg, _ = json.Marshal(struct {
				Dir  string
				Info *PersistInfo
				List []byte
			}{dir, info, list})
			return nil
		}()
	}
	if parent != nil {
		defer parent.Close()
	}
	msg, err := agreeAndShare(ctx, env, local, root, msg)
	if err != nil {
		return nil, err
	}
	var m struct {
		Dir  string
		Info *PersistInfo
		List []byte
	}
	if err := json.Unmarshal(msg, &m); err != nil {
		if root != nil {
			root.Close()
		}
		return nil, env.Errorf("setup: persistent marker from rank 0: %w", err)
	}
	mine := root
	if root, err = openAll(ctx, env, parent, root, m.Dir); err != nil {
		if mine != nil {
			mine.Close()
		}
		return nil, err
	}
	return &Persistent{Root: root, Dir: m.Dir, Info: m.Info, List: m.List}, nil
}

// resolvePersist is the directory below parent that name means.
func resolvePersist(parent *pio.Dir, kind, name string) (string, error) {
	entries, err := os.ReadDir(parent.ProcPath())
	if err != nil {
		return "", fmt.Errorf("list %s: %w", parent.Path(), err)
	}
	var found []string
	for _, e := range entries {
		if e.Name() == name || strings.HasPrefix(e.Name(), name+"-") && !strings.Contains(e.Name()[len(name)+1:], "-") {
			found = append(found, e.Name())
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("no persistent %s of that name in %s (prism datasets list shows them; a phase with persist = %q creates it)", kind, parent.Path(), name)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("%d persistent directories of that name in %s (%s): name one with its hash", len(found), parent.Path(), strings.Join(found, ", "))
}

// CheckFiles is the collective check of a persistent directory's files
// against its list: each rank stats its round-robin share (every file
// there, a regular file of its size) and, with full, reads it and
// compares its MD5. The first bad file is named in the error of the rank
// that found it; the result is agreed.
func (p *Persistent) CheckFiles(ctx context.Context, env *Env, files []PersistFile, full bool) error {
	var local error
	var h hash.Hash
	var buf []byte
	if full {
		h, buf = md5.New(), make([]byte, 1<<20)
	}
	var st unix.Stat_t
	for i := env.Rank; i < len(files) && local == nil; i += env.Size {
		if ctx.Err() != nil {
			local = ctx.Err()
			break
		}
		f := &files[i]
		n, err := pio.NewName(f.Path)
		if err != nil {
			local = env.Errorf("setup: %s: bad path %q in the file list: %w", p.Root.Join(PersistList), f.Path, err)
			break
		}
		if err := p.Root.Stat(n, &st); err != nil {
			local = env.Errorf("setup: persistent %s: %w", p.Dir, p.Root.Wrap("stat", n, err))
			break
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != f.Size {
			local = env.Errorf("setup: persistent %s: %s holds %d bytes, the list says %d: the dataset was changed since it was written", p.Dir, p.Root.Join(f.Path), st.Size, f.Size)
			break
		}
		if full && f.MD5 != "" {
			local = p.checkSum(env, n, f, h, buf)
		}
	}
	return env.Agree(ctx, local)
}

func (p *Persistent) checkSum(env *Env, n pio.Name, f *PersistFile, h hash.Hash, buf []byte) error {
	fd, err := p.Root.Open(n, unix.O_RDONLY, 0)
	if err != nil {
		return env.Errorf("setup: %w", p.Root.Wrap("open", n, err))
	}
	defer pio.Close(fd)
	h.Reset()
	for off := int64(0); off < f.Size; {
		k, err := pio.PreadFull(fd, buf[:min(int64(len(buf)), f.Size-off)], off)
		if err != nil {
			return env.Errorf("setup: %w", p.Root.Wrap("read", n, err))
		}
		h.Write(buf[:k])
		off += int64(k)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.MD5 {
		return env.Errorf("setup: persistent %s: MD5 mismatch in %s: read %s, the list says %s: the dataset was changed since it was written", p.Dir, p.Root.Join(f.Path), got, f.MD5)
	}
	return nil
}

// PersistEntry is one directory below PersistDir, for prism datasets list.
type PersistEntry struct {
	Dir    string       `json:"dir"`
	Status string       `json:"status"` // complete, partial, or foreign (no marker of prism's)
	Info   *PersistInfo `json:"info,omitempty"`
}

// ListPersistent lists <workdir>/PersistDir; an absent one lists nothing.
func ListPersistent(workdir string) ([]PersistEntry, error) {
	wd, err := pio.OpenDir(workdir)
	if err != nil {
		return nil, err
	}
	defer wd.Close()
	parent, err := wd.OpenSub(PersistDir)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer parent.Close()
	entries, err := os.ReadDir(parent.ProcPath())
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", parent.Path(), err)
	}
	var out []PersistEntry
	for _, e := range entries {
		out = append(out, describePersist(parent, e.Name()))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Dir < out[j].Dir })
	return out, nil
}

func describePersist(parent *pio.Dir, dir string) PersistEntry {
	d, err := parent.OpenSub(dir)
	if err != nil {
		return PersistEntry{Dir: dir, Status: "foreign"}
	}
	defer d.Close()
	return statusOf(d, dir)
}

// statusOf is what d (the directory dir below PersistDir) is.
func statusOf(d *pio.Dir, dir string) PersistEntry {
	ent := PersistEntry{Dir: dir, Status: "foreign"}
	if info, err := readMarker(d, dir); err == nil && info != nil {
		ent.Status, ent.Info = "complete", info
		return ent
	}
	if b, err := d.ReadFile(PersistPartial, 1<<20); err == nil {
		info := &PersistInfo{}
		if json.Unmarshal(b, info) == nil && info.Prism == "persistent" {
			ent.Status, ent.Info = "partial", info
		}
		return ent
	}
	// A claim released (its phase failed) or moved aside by a taker that
	// died before it claimed: an unfinished creation of prism's.
	if entries, err := os.ReadDir(d.ProcPath()); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), PersistPartial+".") {
				ent.Status, ent.Info = "partial", &PersistInfo{}
				break
			}
		}
	}
	return ent
}

// RemovePersistent removes the persistent directory name (<name>-<hash>,
// or the one <name>-*) below <workdir>/PersistDir, only if it carries one
// of prism's markers (complete or partial), through its descriptor as the
// run directory's cleanup does. It returns the path it removed.
func RemovePersistent(workdir, name string) (string, error) {
	wd, err := pio.OpenDir(workdir)
	if err != nil {
		return "", err
	}
	defer wd.Close()
	parent, err := wd.OpenSub(PersistDir)
	if err != nil {
		return "", fmt.Errorf("%s: %w", wd.Join(PersistDir), err)
	}
	defer parent.Close()
	dir, err := resolvePersist(parent, "dataset or checkpoint", name)
	if err != nil {
		return "", err
	}
	d, err := parent.OpenSub(dir)
	if err != nil {
		return "", err
	}
	defer d.Close()
	// The marker is checked on the very descriptor that is removed.
	if statusOf(d, dir).Status == "foreign" {
		return "", fmt.Errorf("not removing %s: it carries no marker of prism's (%s or %s), so prism did not create it", d.Path(), PersistMarker, PersistPartial)
	}
	// A creation under way (its lease fresh by this host's clock): its
	// creator would fail on files vanishing under it.
	if c, _ := readClaim(d); c != nil {
		lease, _ := c.lease()
		if age := time.Since(c.mtime()); age < lease {
			return "", fmt.Errorf("not removing %s: it is being created by %s (its lease renewed %s ago); remove it once that run ends, or after its lease (%s) has run out", d.Path(), c.who(), age.Round(time.Millisecond), lease)
		}
	}
	if err := d.Remove(); err != nil {
		return "", err
	}
	return d.Path(), nil
}

// Restart makes a complete persistent directory partial again, on rank 0,
// before a phase writes it anew (a checkpoint write run measures its
// writes every time): this run claims it first (as CreatePersistent does
// a new one; another job's claim fails it, naming that job), then the
// marker goes, so no reader takes the directory for complete while it
// changes.
func (p *Persistent) Restart(env *Env) error {
	if p.Info == nil {
		return nil
	}
	cl, err := takeClaim(env, p.Root, PersistInfo{Prism: "persistent", Kind: p.Info.Kind, Name: p.Info.Name, Hash: p.Info.Hash, Params: p.Info.Params,
		RunID: env.RunID, Phase: env.Name, Host: env.Host, Created: time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		return env.Errorf("setup: %w", err)
	}
	if cl == nil {
		who := "another run"
		if c, _ := readClaim(p.Root); c != nil && c.valid {
			who = c.who()
		}
		return env.Errorf("setup: %s is being written again by %s: two write runs of one persistent checkpoint cannot run at once", p.Root.Path(), who)
	}
	p.claim = cl
	if err := p.Root.Unlink(pio.MustName(PersistMarker)); err != nil && err != unix.ENOENT {
		return env.Errorf("setup: %w", p.Root.Wrap("unlink", pio.MustName(PersistMarker), err))
	}
	p.Info, p.List = nil, nil
	return p.Root.Sync()
}
