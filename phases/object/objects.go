package object

import (
	"context"
	"fmt"
	"sync"

	pio "github.com/prism-hpc/prism/io"
	ps3 "github.com/prism-hpc/prism/io/s3"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/report"
)

// BaseConfig holds the keys every object phase has (exported so the plan
// decoder sees its fields through the embedding).
type BaseConfig struct {
	phases.StorageOptions
	Count int         `toml:"count" doc:"objects per rank"`
	Size  phases.Size `toml:"size" doc:"bytes per object (size_dist = fixed)"`
	phases.Sizes
	Seed             int64 `toml:"seed" doc:"seed of the object sizes (size_dist other than fixed), mixed with the rank"`
	Workers          int   `toml:"workers" doc:"requests in flight per rank: worker goroutines sharing the rank's connection pool, each with its own buffer"`
	ObjectsPerPrefix int   `toml:"objects_per_prefix" doc:"objects under one prefix (<phase>/r<rank>/d<j>/o<i>); 0 = all of a rank's under one"`
}

// maxObjectsPerRank bounds count: each key is prepared (and tracked for
// cleanup) in memory before the timed run.
const maxObjectsPerRank = 10_000_000

// maxObjectSize is S3's limit for one PUT; multipart goes to 5 TiB but a
// body is held in memory per worker, so the same bound applies.
const maxObjectSize = 5 << 30

func (c *BaseConfig) validate() error {
	if err := c.StorageOptions.Validate(); err != nil {
		return err
	}
	switch {
	case c.Count < 1 || c.Count > maxObjectsPerRank:
		return &phases.KeyError{Key: "count", Msg: fmt.Sprintf("%d out of range (1 .. %d)", c.Count, maxObjectsPerRank)}
	case c.Size < 0 || c.Size > maxObjectSize:
		return &phases.KeyError{Key: "size", Msg: fmt.Sprintf("%s out of range (0 .. 5GiB, S3's single-PUT limit)", c.Size)}
	case c.Workers < 1 || c.Workers > 1024:
		return &phases.KeyError{Key: "workers", Msg: fmt.Sprintf("%d out of range (1 .. 1024)", c.Workers)}
	case c.Dist != "fixed":
		// A drawn size needs bounds; a fixed one is bounded above.
		if err := c.Sizes.Validate(c.Size, maxObjectSize); err != nil {
			return err
		}
	}
	switch {
	case c.ObjectsPerPrefix < 0:
		return &phases.KeyError{Key: "objects_per_prefix", Msg: fmt.Sprintf("%d: must not be negative", c.ObjectsPerPrefix)}
	}
	return nil
}

func (c *BaseConfig) base() *BaseConfig { return c }

// bufSize is the largest object: the buffer each worker holds.
func (c *BaseConfig) bufSize() int64 {
	if c.Dist == "fixed" {
		return int64(c.Size)
	}
	return int64(c.MaxSize)
}

// fixedOnly refuses a size distribution for a kind whose work is cut by
// the object size (ranges, parts).
func (c *BaseConfig) fixedOnly(key string) error {
	if c.Dist != "fixed" {
		return &phases.KeyError{Key: "size_dist", Msg: fmt.Sprintf("%s: only size_dist = \"fixed\" goes with %s", c.Dist, key)}
	}
	return nil
}

// prefixes is how many prefixes a rank's objects go under.
func (c *BaseConfig) prefixes() int {
	if c.ObjectsPerPrefix == 0 || c.ObjectsPerPrefix >= c.Count {
		return 1
	}
	return (c.Count + c.ObjectsPerPrefix - 1) / c.ObjectsPerPrefix
}

// memory is what one rank holds: keys (and their record for cleanup),
// one buffer per worker, the recorders of ops op types per worker.
func (c *BaseConfig) memory(buf int64, ops int) int64 {
	return int64(c.Count)*160 + int64(c.Workers)*(buf+int64(ops)*report.RecorderBytes)
}

// objects is what an object phase works on, prepared in Setup: the rank's
// keys under the run prefix (recorded for cleanup before anything is
// written), the prefixes they go under, and one buffer per worker.
type objects struct {
	st       *phases.ObjectStore
	keys     []string
	sizes    []int64  // of each object, drawn in Setup
	prefixes []string // full key prefixes, "…/d<j>/"
	per      int      // objects per prefix
	bufs     [][]byte
	recs     []*report.Recorder // per worker, of the op Run times (each)
}

// prepare opens the store and prepares keys, sizes and buffers, and each
// worker's recorder of op, the op the phase's Run times ("" for a phase
// that makes its own: s3_multipart).
func (o *objects) prepare(ctx context.Context, env *phases.Env, c *BaseConfig, op string) error {
	bufSize := c.bufSize()
	st, err := phases.OpenObjectStore(ctx, env, c.StorageOptions.Over(env.Storage))
	if err != nil {
		return err
	}
	o.st = st
	np := c.prefixes()
	o.per = (c.Count + np - 1) / np
	if len(o.keys) != c.Count {
		o.keys = make([]string, c.Count)
		o.prefixes = make([]string, np)
	}
	// The phase's directory name (01-s3_put, with -n<k> in a sweep) keeps
	// phases and sweep steps apart; an Env outside the engine has none.
	seg := env.Rel
	if seg == "" {
		seg = env.Name
	}
	base := fmt.Sprintf("%s/r%d/", seg, env.Rank)
	for j := range o.prefixes {
		p, err := st.Run.Key(fmt.Sprintf("%sd%d", base, j))
		if err != nil {
			return env.Errorf("%w", err)
		}
		o.prefixes[j] = p + "/"
	}
	o.sizes = make([]int64, c.Count)
	rng := pio.PCG{Hi: uint64(c.Seed) ^ 0x6f626a656374, Lo: uint64(env.WorldRank)*0x9e3779b97f4a7c15 + 7}
	for i := range o.keys {
		o.keys[i] = fmt.Sprintf("%so%d", o.prefixes[i/o.per], i)
		o.sizes[i] = c.Draw(c.Size, &rng)
	}
	// Recorded before any request: a PUT that failed on the client side
	// may still have landed.
	if err := st.Run.Track(o.keys...); err != nil {
		return env.Errorf("%w", err)
	}
	if len(o.bufs) != c.Workers || len(o.bufs[0]) != int(bufSize) {
		o.bufs = make([][]byte, c.Workers)
		for w := range o.bufs {
			b := make([]byte, bufSize)
			for i := range b {
				b[i] = byte(i*131 + 7 + w) // not zeros: some storage compresses or skips them
			}
			o.bufs[w] = b
		}
	}
	// Here in Setup, not in Run: creating a recorder clears its ~270 KiB
	// histogram, ~115 µs each (docs/PERFORMANCE.md), which Run would time.
	// Each worker's is in a set of its own (env.NewSet), fresh each
	// iteration, which the engine merges after the clock has stopped.
	o.recs = nil
	if op != "" {
		o.recs = make([]*report.Recorder, len(o.bufs))
		for w := range o.recs {
			o.recs[w] = env.NewSet().Op(op)
		}
	}
	return nil
}

// work is one item of a phase's loop: issue its request between the
// recorder's Begin and Observe.
type work func(ctx context.Context, w, item int, rec *report.Recorder) error

// each runs n items over the rank's workers, worker w taking items w,
// w+W, …, and calls fn(w, item, rec) with the worker's recorder that
// prepare made in Setup (its own report.Set from env.NewSet, which the
// engine merges into the rank's once the iteration's clock has stopped:
// merging here would create the rank's recorder inside the timed span).
// The first failure cancels the other workers and is returned. fn is
// built once per phase, so the loop around a request adds no allocation
// per item.
func (o *objects) each(ctx context.Context, env *phases.Env, n int, fn work) error {
	recs := o.recs
	o.recs = nil // the next iteration's Setup makes fresh ones
	return spread(ctx, env, n, recs, fn)
}

// eachUntimed is each for Setup and Teardown: the stall watchdog sees the
// ops, no result counts them.
func (o *objects) eachUntimed(ctx context.Context, env *phases.Env, n int, op string, fn work) error {
	recs := make([]*report.Recorder, len(o.bufs))
	for w := range recs {
		recs[w] = env.Untimed(fmt.Sprintf("%s.w%d", op, w))
	}
	return spread(ctx, env, n, recs, fn)
}

// spread runs the items on one goroutine per recorder.
func spread(ctx context.Context, env *phases.Env, n int, recs []*report.Recorder, fn work) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers := len(recs)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				if ctx.Err() != nil {
					return
				}
				if err := fn(ctx, w, i, recs[w]); err != nil {
					mu.Lock()
					if first == nil {
						first = err
						cancel()
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return env.Errorf("%w", first)
	}
	return ctx.Err()
}

// populate writes every object, untimed (the Setup of get, stat, list and
// delete), with the phase's workers.
func (o *objects) populate(ctx context.Context, env *phases.Env) error {
	err := o.eachUntimed(ctx, env, len(o.keys), "put", o.put)
	if err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	return nil
}

// put is the put of object i by worker w, from the worker's buffer.
func (o *objects) put(ctx context.Context, w, i int, rec *report.Recorder) error {
	body := o.bufs[w][:o.sizes[i]]
	start := rec.BeginOn(&o.keys[i])
	err := o.st.Client.Put(ctx, o.keys[i], body)
	rec.Observe(start, len(body), err)
	return err
}

// remove deletes every key of the phase (Teardown), in DeleteObjects
// batches; keys already gone are no error in S3. Once deleted they are
// dropped from the run's record.
func (o *objects) remove(ctx context.Context, env *phases.Env) error {
	if o.st == nil || len(o.keys) == 0 {
		return nil
	}
	// Teardown runs after a cancelled Run too: it gets its own context, so
	// an interrupt still leaves the bucket clean when the store answers.
	ctx = context.WithoutCancel(ctx)
	// Only under a marker that is still the run's: a prefix someone else
	// has claimed since is not provably ours to delete from.
	if err := o.st.Run.Check(ctx); err != nil {
		return env.Errorf("teardown: %w", err)
	}
	rec := env.Untimed("delete")
	for lo := 0; lo < len(o.keys); lo += ps3.MaxBatch {
		batch := o.keys[lo:min(lo+ps3.MaxBatch, len(o.keys))]
		start := rec.BeginOn(&batch[0])
		kerrs, err := o.st.Client.DeleteBatch(ctx, batch)
		rec.Observe(start, 0, err)
		if err != nil {
			return env.Errorf("teardown: %w", err)
		}
		if len(kerrs) > 0 {
			return env.Errorf("teardown: %d of %d keys not deleted, first %v", len(kerrs), len(batch), kerrs[0])
		}
		o.st.Run.Forget(batch...)
	}
	return nil
}
