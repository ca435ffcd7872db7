package dataload

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strings"

	ps3 "github.com/prism-hpc/prism/io/s3"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/report"
)

// s3Dataset is the object-storage side of create_dataset and md5_check
// (storage = "s3://…"): every file of the dataset is one object, named
// like the file below the phase's place in the run's prefix
// (<prefix>/prism-<run-id>/<phase>/data/d0001/f0000001.bin), written with
// one PUT and read with one GET. Everything else (sizes, content, MD5s,
// orders, the manifest shared by the ranks) is the POSIX path's.
type s3Dataset struct {
	st     *phases.ObjectStore
	prefix string   // the dataset's key prefix, ending in "/"
	keys   []string // of this rank's files (create) or of every file (read)
	body   []byte   // one file's content, when it is not in the arena
	// ctx is train's Run context, for the reader goroutines' GETs.
	ctx context.Context
}

// open opens the store the options name, or clears it for the workdir.
func (s *s3Dataset) open(ctx context.Context, env *phases.Env, opts phases.StorageOptions) error {
	s.st = nil
	opts = opts.Over(env.Storage)
	if !opts.IsS3() {
		return nil
	}
	st, err := phases.OpenObjectStore(ctx, env, opts)
	if err != nil {
		return err
	}
	s.st = st
	return nil
}

// place is the dataset's path for messages and its name relative to the
// run, for a dataset in the phase's sub.
func (s *s3Dataset) place(env *phases.Env, sub string) (string, string) {
	rel := env.RunRel(sub)
	s.prefix = s.st.Run.Prefix() + rel + "/"
	return s.st.URI.String() + strings.TrimPrefix(s.prefix, s.st.URI.Prefix), rel
}

// prepare names this rank's objects and records them for cleanup before
// any is written; body is a buffer of the largest file when the content
// is generated file by file.
func (s *s3Dataset) prepare(env *phases.Env, mine []dsFile, perFile bool) error {
	s.keys = s.keys[:0]
	var largest int64
	for _, f := range mine {
		s.keys = append(s.keys, s.prefix+f.Path)
		largest = max(largest, f.Size)
	}
	if err := s.st.Run.Track(s.keys...); err != nil {
		return env.Errorf("setup: %w", err)
	}
	if perFile && int64(len(s.body)) < largest {
		s.body = make([]byte, largest)
	}
	return nil
}

// writeS3 puts this rank's files. The create op is the PUT; content
// generated during the run (a share over buffer_budget) and its MD5 come
// before it and are not part of it.
func (p *createDataset) writeS3(ctx context.Context, env *phases.Env, rec *report.Recorder) error {
	c := p.s3.st.Client
	for i := range p.mine {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		f := &p.mine[i]
		var b []byte
		if p.arena != nil {
			b = p.arena[p.offs[i] : p.offs[i]+f.Size]
		} else {
			b = p.s3.body[:f.Size]
			p.gen.FillStream(b, uint64(f.Index), 0)
			p.h.Reset()
			p.h.Write(b)
			f.MD5 = hex.EncodeToString(p.h.Sum(p.sum[:0]))
		}
		p.made = i + 1
		start := rec.BeginOn(&p.s3.keys[i])
		err := c.Put(ctx, p.s3.keys[i], b)
		rec.Observe(start, len(b), err)
		if err != nil {
			return env.Errorf("%w", err)
		}
	}
	return nil
}

// verify checks every object of this rank has its file's size.
func (s *s3Dataset) verify(ctx context.Context, env *phases.Env, mine []dsFile) error {
	for i, f := range mine {
		info, err := s.st.Client.Head(ctx, s.keys[i])
		if err != nil {
			return env.Errorf("verify: %w", err)
		}
		if info.Size != f.Size {
			return env.Errorf("verify: s3://%s/%s holds %d bytes, want %d", s.st.URI.Bucket, s.keys[i], info.Size, f.Size)
		}
	}
	return nil
}

// remove deletes the first n objects of this rank, untimed, and drops
// them from the run's record.
func (s *s3Dataset) remove(env *phases.Env, n int) error {
	ctx := context.Background() // a Teardown after an interrupt still cleans up
	if err := s.st.Run.Check(ctx); err != nil {
		return env.Errorf("%w", err)
	}
	rec := env.Untimed("delete")
	keys := s.keys[:n]
	for lo := 0; lo < len(keys); lo += ps3.MaxBatch {
		batch := keys[lo:min(lo+ps3.MaxBatch, len(keys))]
		start := rec.BeginOn(&batch[0])
		kerrs, err := s.st.Client.DeleteBatch(ctx, batch)
		rec.Observe(start, 0, err)
		if err == nil && len(kerrs) > 0 {
			err = fmt.Errorf("%d of %d objects not deleted, first %v", len(kerrs), len(batch), kerrs[0])
		}
		if err != nil {
			return env.Errorf("%w", err)
		}
		s.st.Run.Forget(batch...)
	}
	return nil
}

// noS3Generate refuses train's own generated dataset over S3: train over
// object storage reads a create_dataset's objects.
func (p *train) noS3Generate(env *phases.Env) error {
	if p.cfg.StorageOptions.Over(env.Storage).IsS3() {
		return env.Errorf("setup: train over object storage reads the objects of a create_dataset with the same storage: set dataset = \"latest\" after one")
	}
	return nil
}

// useS3 is useDataset for a dataset in object storage: the objects are
// cut into record_size samples as the files are.
func (p *train) useS3(ctx context.Context, env *phases.Env, ds *dataset) error {
	if err := p.s3.keysOf(ctx, env, p.cfg.StorageOptions, ds); err != nil {
		return err
	}
	p.setRoot(nil)
	p.files = p.files[:0]
	p.samples = 0
	for _, f := range ds.Files {
		n := max(f.Size/p.pre.RecordSize, 1)
		p.files = append(p.files, trainFile{size: f.Size, first: p.samples, n: n})
		p.samples += n
	}
	return nil
}

// readSampleS3 is the read op of train over S3: one ranged GET of the
// sample into the reader's buffer (of a record: a file of one sample
// longer than that is read as far as the POSIX path reads it).
func (p *train) readSampleS3(r *trainReader, fi int, off, n int64) error {
	n = min(n, int64(len(r.buf)))
	key := &p.s3.keys[fi]
	start := r.rec.BeginOn(key)
	got, err := p.s3.st.Client.GetRange(p.s3.ctx, *key, off, n, r.buf)
	r.rec.Observe(start, got, err)
	return err
}

// keysOf opens the phase's store, which must be the dataset's bucket, and
// names every object of the dataset.
func (s *s3Dataset) keysOf(ctx context.Context, env *phases.Env, opts phases.StorageOptions, ds *dataset) error {
	if err := s.open(ctx, env, opts); err != nil {
		return err
	}
	if s.st == nil || s.st.URI.String() != ds.S3 {
		return env.Errorf("setup: the dataset of %q is in %s: give this phase the same storage", ds.Phase, ds.S3)
	}
	s.keys = s.keys[:0]
	for _, f := range ds.Files {
		s.keys = append(s.keys, ds.Prefix+f.Path)
	}
	return nil
}

// openS3 is md5_check's Setup for a dataset in object storage: the
// phase's storage must be the dataset's bucket; every file's key, and a
// buffer of the largest file.
func (p *md5Check) openS3(ctx context.Context, env *phases.Env, ds *dataset) error {
	if err := p.s3.keysOf(ctx, env, p.cfg.StorageOptions, ds); err != nil {
		return err
	}
	var largest int64
	for _, f := range ds.Files {
		largest = max(largest, f.Size)
	}
	if int64(len(p.s3.body)) < largest {
		p.s3.body = make([]byte, largest)
	}
	p.h = md5.New()
	p.read = 0
	return nil
}

// runS3 reads every object of this rank's lists. The read op is the GET
// (request and body, into the phase's buffer); the file op is the GET and
// the MD5 of the bytes.
func (p *md5Check) runS3(ctx context.Context, env *phases.Env) error {
	fileRec, readRec := env.Recorder("file"), env.Recorder("read") // made in Setup
	c := p.s3.st.Client
	for e, list := range p.lists {
		for _, idx := range list {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			key := &p.s3.keys[idx]
			start := fileRec.BeginOn(key)
			t := readRec.Begin()
			n, err := c.Get(ctx, *key, p.s3.body)
			readRec.Observe(t, n, err)
			var sum []byte
			if err == nil {
				p.h.Reset()
				p.h.Write(p.s3.body[:n])
				sum = p.h.Sum(p.sum[:0])
			}
			fileRec.Observe(start, 0, err)
			if err != nil {
				return env.Errorf("epoch %d: %w", e, err)
			}
			if [md5.Size]byte(sum) != p.sums[idx] {
				return env.Errorf("epoch %d: MD5 mismatch in s3://%s/%s: read %x, %q wrote %x: the storage returned different bytes", e, p.s3.st.URI.Bucket, *key, sum, p.ds.Phase, p.sums[idx])
			}
			p.read++
		}
	}
	return nil
}
