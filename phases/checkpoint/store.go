package checkpoint

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	pio "github.com/prism-hpc/prism/io"
	ps3 "github.com/prism-hpc/prism/io/s3"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/ckpt"
	"github.com/prism-hpc/prism/report"
	"golang.org/x/sys/unix"
)

// checkpointRecord is what a save leaves in Env.State for the loads after
// it: where the checkpoint is and the CRC of every piece, computed when it
// was written.
type checkpointRecord struct {
	kind   string // ddp | fsdp
	spec   writeSpec
	dir    string
	ranks  int
	gen    uint64
	seed   uint64 // the content pool's seed and period, for CRCs of part of a piece
	poolP  int64
	seq    int
	model  *ckpt.Model
	layout *ckpt.Layout // CRCs of every piece
	own    []string     // names of the files this rank created in pin (removed when a newer save replaces it)
	pin    *pio.Dir     // the checkpoint's directory, on ranks that wrote files
	where  string       // "" (the workdir) or the bucket URI the checkpoint's objects are in
	obj    *objPlace    // over S3: the objects' place, on ranks that wrote some
}

const stateCheckpoints = "prism.checkpoints"

type checkpointStore struct {
	recs []*checkpointRecord
	seq  int
}

func store(env *phases.Env) *checkpointStore {
	s, _ := env.State[stateCheckpoints].(*checkpointStore)
	if s == nil {
		s = &checkpointStore{}
		env.State[stateCheckpoints] = s
	}
	return s
}

// latest returns the newest checkpoint of model m of the given kind that
// ok accepts.
func (s *checkpointStore) latest(m *ckpt.Model, kind string, ok func(*checkpointRecord) bool) *checkpointRecord {
	var best *checkpointRecord
	for _, r := range s.recs {
		if r.model.ID() == m.ID() && r.kind == kind && (ok == nil || ok(r)) && (best == nil || r.seq > best.seq) {
			best = r
		}
	}
	return best
}

// add records r, removing (this rank's files of) any older checkpoint of
// the same model, kind and rank count, which no load can want any more.
func (s *checkpointStore) add(r *checkpointRecord) {
	s.seq++
	r.seq = s.seq
	keep := s.recs[:0]
	for _, o := range s.recs {
		if o.model.ID() == r.model.ID() && o.kind == r.kind && o.ranks == r.ranks && o.dir != r.dir {
			for _, f := range o.own {
				if o.pin != nil {
					unix.Unlinkat(o.pin.Fd(), f, 0)
				}
			}
			if o.obj != nil {
				o.obj.remove(o.own)
			}
			o.release(r)
			continue
		}
		if o.dir == r.dir {
			o.release(r)
			continue // overwritten in place
		}
		keep = append(keep, o)
	}
	s.recs = append(keep, r)
}

// release closes the directory handle of a record replaced by r.
func (o *checkpointRecord) release(r *checkpointRecord) {
	if o.pin != nil && o.pin != r.pin {
		o.pin.Close()
	}
	o.pin = nil
}

// pinDir opens dir, a directory below the run directory given by its path
// (creating it, with create), through the run directory's descriptor.
// Every file operation of the checkpoint is then relative to it (openat,
// renameat, unlinkat with a single name), so no rename or link above it
// can redirect them. The handle stays open for the run, as long as the
// checkpoint's records that remove its files through it (a newer save
// replacing an older one).
func pinDir(env *phases.Env, dir string, create bool) (*pio.Dir, error) {
	rel, err := filepath.Rel(env.Run.Path(), dir)
	if err != nil || !filepath.IsLocal(rel) {
		return nil, env.Errorf("setup: %s is not below the run directory %s", dir, env.Run.Path())
	}
	var d *pio.Dir
	if create {
		d, err = env.Run.EnsureSub(rel, 0o755)
	} else {
		d, err = env.Run.OpenPath(rel)
	}
	if err != nil {
		return nil, env.Errorf("setup: %w", err)
	}
	return d, nil
}

// fileIn is the file name in the directory dir: the system calls take the
// name (relative to the directory's descriptor), messages show the path.
func fileIn(dir, name string) pio.Path {
	return pio.MustPathVia(filepath.Join(dir, name), name)
}

// pool returns the rank's content pool for (seed, size), generating it
// (untimed) on first use and keeping it for later phases and iterations.
func pool(env *phases.Env, seed uint64, size, chunk int64) *ckpt.Pool {
	key := fmt.Sprintf("prism.ckpt.pool/%d/%d", seed, size)
	if p, ok := env.State[key].(*ckpt.Pool); ok {
		if _, w := p.Size(); w >= chunk {
			return p
		}
	}
	for k := range env.State {
		if strings.HasPrefix(k, "prism.ckpt.pool/") {
			delete(env.State, k) // one pool per rank at a time
		}
	}
	p := ckpt.NewPool(seed, size, chunk)
	env.State[key] = p
	return p
}

// poolSize is the pool for a model: the budget, or less when the whole
// checkpoint fits. Every rank computes the same size, so every rank has
// the same pool bytes and can compute any piece's CRC.
func poolSize(m *ckpt.Model, budget int64) int64 {
	return min(budget, (m.Bytes()+ckpt.StampEvery-1)/ckpt.StampEvery*ckpt.StampEvery)
}

func generation(env *phases.Env, salt string) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range []byte(fmt.Sprintf("%s/%s/%d", env.Name, salt, env.Iteration)) {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// ioRecs are the recorders of a checkpoint's ops: the rank's, or a
// simulated process's own (mlperf_checkpoint runs several per rank).
// Each is created before the loop that times it, and only for the ops the
// phase performs, so its manifest lists no empty ops.
type ioRecs struct {
	op                                                        func(string) *report.Recorder
	open, write, header, seek, fsync, close, rename, saveFile *report.Recorder
	read, readHeader, mmap, loadFile, loadState               *report.Recorder
	put, create, part, complete, head, getOp                  *report.Recorder // over S3
}

func newIORecs(op func(string) *report.Recorder) ioRecs { return ioRecs{op: op} }

// under names the checkpoint directory the ops' relative targets are in
// (Recorder.Under), once per file or run, so a stall report names the file
// whole.
func (r *ioRecs) under(dir string) {
	for _, p := range r.all() {
		if p != nil {
			p.Under(dir)
		}
	}
}

// all is every recorder, nil for those not made (an array: under runs
// once per file, and must not allocate).
func (r *ioRecs) all() [19]*report.Recorder {
	return [...]*report.Recorder{r.open, r.write, r.header, r.seek, r.fsync, r.close, r.rename, r.saveFile,
		r.read, r.readHeader, r.mmap, r.loadFile, r.loadState, r.put, r.create, r.part, r.complete, r.head, r.getOp}
}

func (r *ioRecs) get(p **report.Recorder, name string) {
	if *p == nil {
		*p = r.op(name)
	}
}

// forWrite makes the recorders of a save; fsync, rename and lseek only
// when the save does them.
func (r *ioRecs) forWrite(fsync, rename, seek bool) {
	r.get(&r.open, "open")
	r.get(&r.write, "write")
	r.get(&r.header, "write_header")
	if seek {
		r.get(&r.seek, "lseek")
	}
	r.get(&r.close, "close")
	r.get(&r.saveFile, "save_file")
	if fsync {
		r.get(&r.fsync, "fsync")
	}
	if rename {
		r.get(&r.rename, "rename")
	}
}

// forRead makes the recorders of a load; whole is the op timing a whole
// file (load_file) or a whole consolidation (load_state); lseek and mmap
// only when the load makes them.
func (r *ioRecs) forRead(whole string, seek, mmap bool) {
	r.get(&r.open, "open")
	r.get(&r.read, "read")
	r.get(&r.readHeader, "read_header")
	r.get(&r.close, "close")
	if seek {
		r.get(&r.seek, "lseek")
	}
	if mmap {
		r.get(&r.mmap, "mmap")
	}
	if whole == "load_state" {
		r.get(&r.loadState, whole)
	} else {
		r.get(&r.loadFile, whole)
	}
}

// StorageKeys put a checkpoint in an S3 bucket instead of the workdir
// (storage = "s3://bucket/prefix", on the phase or in [plan]), and shape
// its requests: every file is one object of the same name below the
// phase's place in the run's prefix, written by a streaming multipart
// upload and read by ranged GETs.
type StorageKeys struct {
	phases.StorageOptions
	PartSize        phases.Size `toml:"part_size" doc:"over S3: bytes per multipart part of a save (an object of one part or less is one PUT) and per ranged GET of a load (its readahead window); at least 5MiB"`
	PartConcurrency int         `toml:"part_concurrency" doc:"over S3: parts (save) or ranged GETs (load of a large tensor) in flight at once per file; memory is part_size x part_concurrency per writer or reader"`
}

func defaultStorageKeys() StorageKeys { return StorageKeys{PartSize: 16 << 20, PartConcurrency: 4} }

// mlperfStorageKeys are mlperf_checkpoint's defaults: every simulated
// process holds its own part buffers, so fewer and smaller.
func mlperfStorageKeys() StorageKeys { return StorageKeys{PartSize: 8 << 20, PartConcurrency: 2} }

func (k *StorageKeys) validate() error {
	if err := k.StorageOptions.Validate(); err != nil {
		return err
	}
	if k.PartSize < ps3.MinPartSize || k.PartSize > 5<<30 {
		return &phases.KeyError{Key: "part_size", Msg: fmt.Sprintf("%s out of range (5MiB .. 5GiB, S3's part sizes)", k.PartSize)}
	}
	if k.PartConcurrency < 1 || k.PartConcurrency > 256 {
		return &phases.KeyError{Key: "part_concurrency", Msg: fmt.Sprintf("%d out of range (1 .. 256)", k.PartConcurrency)}
	}
	return nil
}

// objMemory is what the S3 path adds to a phase's memory: the part
// buffers of one writer or reader per simulated process.
func (k *StorageKeys) objMemory(procs int) int64 {
	if !k.IsS3() {
		return 0
	}
	return int64(k.PartSize) * int64(k.PartConcurrency) * int64(max(procs, 1))
}

// objPlace is a checkpoint directory in a bucket: the objects of its
// files are <run prefix><dir relative to the run directory>/<file name>.
type objPlace struct {
	st       *phases.ObjectStore
	prefix   string // key prefix, ending in "/"
	where    string // s3://bucket/base: what checkpoint records compare
	parts    [][]byte
	partSize int64
	conc     int
}

// openPlace opens the phase's object store, or returns nil when the
// phase's storage (over the plan's) is the workdir.
func openPlace(ctx context.Context, env *phases.Env, k *StorageKeys, dir string) (*objPlace, error) {
	opts := k.StorageOptions.Over(env.Storage)
	if !opts.IsS3() {
		return nil, nil
	}
	st, err := phases.OpenObjectStore(ctx, env, opts)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(env.Run.Path(), dir)
	if err != nil || !filepath.IsLocal(rel) {
		return nil, env.Errorf("setup: %s is not below the run directory %s", dir, env.Run.Path())
	}
	return &objPlace{st: st, prefix: st.Run.Prefix() + filepath.ToSlash(rel) + "/", where: st.URI.String(),
		partSize: int64(k.PartSize), conc: k.PartConcurrency}, nil
}

// storageOf is what a checkpoint record says about where it is: "" for
// the workdir, else the bucket URI.
func storageOf(ctx context.Context, env *phases.Env, k *StorageKeys) string {
	opts := k.StorageOptions.Over(env.Storage)
	if !opts.IsS3() {
		return ""
	}
	_, u, err := opts.S3Config()
	if err != nil {
		return ""
	}
	return u.String()
}

// share is the same place with the part buffers parts (nil: its own,
// allocated on first use): the checkpoints of one simulated process
// share one set of buffers.
func (o *objPlace) share(parts [][]byte) *objPlace {
	c := *o
	c.parts = parts
	return &c
}

// key is the object of file name in the place.
func (o *objPlace) key(name string) string { return o.prefix + name }

// url names an object in messages.
func (o *objPlace) url(name string) string { return "s3://" + o.st.URI.Bucket + "/" + o.key(name) }

// buffers are the part buffers, allocated once (Setup) and reused by
// every upload and reader of the place's writer or reader.
func (o *objPlace) buffers() [][]byte {
	if o.parts == nil {
		o.parts = make([][]byte, o.conc)
		for i := range o.parts {
			o.parts[i] = make([]byte, o.partSize)
		}
	}
	return o.parts
}

// track records objects about to be written, so the run's cleanup
// deletes them even if the phase fails before its own teardown.
func (o *objPlace) track(env *phases.Env, names ...string) error {
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = o.key(n)
	}
	if err := o.st.Run.Track(keys...); err != nil {
		return env.Errorf("setup: %w", err)
	}
	return nil
}

// remove deletes the named objects, after checking that the run's marker
// is still the run's, and forgets them.
func (o *objPlace) remove(names []string) error {
	if len(names) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a teardown after an interrupt still cleans up
	defer cancel()
	if err := o.st.Run.Check(ctx); err != nil {
		return err
	}
	keys := make([]string, 0, len(names))
	seen := map[string]bool{}
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			keys = append(keys, o.key(n))
		}
	}
	for lo := 0; lo < len(keys); lo += ps3.MaxBatch {
		batch := keys[lo:min(lo+ps3.MaxBatch, len(keys))]
		kerrs, err := o.st.Client.DeleteBatch(ctx, batch)
		if err == nil && len(kerrs) > 0 {
			err = fmt.Errorf("%d of %d objects not deleted, first %v", len(kerrs), len(batch), kerrs[0])
		}
		if err != nil {
			return err
		}
		o.st.Run.Forget(batch...)
	}
	return nil
}

// objRecs are the recorders of the requests of a checkpoint over S3.
func (r *ioRecs) forObjectWrite() {
	r.get(&r.put, "put")
	r.get(&r.create, "create")
	r.get(&r.part, "part")
	r.get(&r.complete, "complete")
	r.get(&r.saveFile, "save_file")
}

func (r *ioRecs) forObjectRead(whole string) {
	r.get(&r.head, "head")
	r.get(&r.getOp, "get")
	r.get(&r.read, "read")
	r.get(&r.readHeader, "read_header")
	if whole == "load_state" {
		r.get(&r.loadState, whole)
	} else {
		r.get(&r.loadFile, whole)
	}
}
