package object

import (
	"context"
	"fmt"
	"time"

	ps3 "github.com/prism-hpc/prism/io/s3"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/report"
)

// Register adds the object family's kinds to r.
func Register(r *phases.Registry) {
	const sample = "count = 24\nsize = \"4KiB\"\nworkers = 2\nobjects_per_prefix = 10"
	r.Register(phases.Kind{Name: "s3_put", Family: "object", Storage: true,
		Summary: "PUT count objects of size per rank, workers at a time; op put",
		New:     func() phases.Phase { return &putPhase{cfg: defaultBase()} }, Sample: sample})
	r.Register(phases.Kind{Name: "s3_get", Family: "object", Storage: true,
		Summary: "GET count objects per rank (written untimed in setup), whole or in range_size ranges; op get",
		New:     func() phases.Phase { return &getPhase{cfg: getConfig{BaseConfig: defaultBase()}} }, Sample: sample + "\nrange_size = \"1KiB\""})
	r.Register(phases.Kind{Name: "s3_stat", Family: "object", Storage: true,
		Summary: "HEAD count objects per rank (written untimed in setup); op head",
		New:     func() phases.Phase { return &statPhase{cfg: defaultBase()} }, Sample: sample})
	r.Register(phases.Kind{Name: "s3_list", Family: "object", Storage: true,
		Summary: "ListObjectsV2 every prefix of a rank's count objects, page_size keys a page; op list (one per page)",
		New:     func() phases.Phase { return &listPhase{cfg: listConfig{BaseConfig: defaultBase(), PageSize: 1000}} }, Sample: sample + "\npage_size = 4"})
	r.Register(phases.Kind{Name: "s3_delete", Family: "object", Storage: true,
		Summary: "DELETE count objects per rank (written untimed in setup), one by one or in DeleteObjects batches of batch keys; op delete (one per request)",
		New:     func() phases.Phase { return &deletePhase{cfg: deleteConfig{BaseConfig: defaultBase(), Batch: 1}} }, Sample: sample + "\nbatch = 5"})
	r.Register(phases.Kind{Name: "s3_multipart", Family: "object", Storage: true,
		Summary: "multipart-upload count objects of size per rank in part_size parts, part_concurrency parts in flight per object; ops create, part, complete",
		New: func() phases.Phase {
			c := defaultBase()
			c.Count, c.Size = 4, 64<<20
			return &multipartPhase{cfg: multipartConfig{BaseConfig: c, PartSize: 8 << 20, PartConcurrency: 4}}
		},
		Sample: "count = 2\nsize = \"11MiB\"\npart_size = \"5MiB\"\npart_concurrency = 2\nworkers = 1"})
}

// Validate checks the keys of s3_put and s3_stat.
func (c *BaseConfig) Validate() error { return c.validate() }

func defaultBase() BaseConfig {
	return BaseConfig{Count: 1000, Size: 64 << 10, Workers: 8, Seed: 1,
		Sizes: phases.Sizes{Dist: "fixed", Mean: 64 << 10, Min: 4 << 10, Max: 1 << 20, Mu: 11, Sigma: 1, MaxSize: 64 << 20}}
}

// looper is what the allocation test drives: the per-item closure Setup
// built and the objects it works on.
type looper interface{ loop() (work, *objects) }

func (p *putPhase) loop() (work, *objects)  { return p.fn, &p.obj }
func (p *getPhase) loop() (work, *objects)  { return p.fn, &p.obj }
func (p *statPhase) loop() (work, *objects) { return p.fn, &p.obj }

// base carries what every object phase does the same way.
type base struct {
	obj objects
}

// Verify records the storage again, with the retries of the Run.
func (b *base) Verify(_ context.Context, env *phases.Env) error {
	if b.obj.st != nil {
		b.obj.st.Record(env)
	}
	return nil
}

func (b *base) Teardown(ctx context.Context, env *phases.Env) error { return b.obj.remove(ctx, env) }

// ---- s3_put

type putPhase struct {
	base
	cfg BaseConfig
	fn  work
}

func (p *putPhase) Config() any        { return &p.cfg }
func (p *putPhase) ExpectedOps() int64 { return int64(p.cfg.Count) }
func (p *putPhase) Memory(int) (int64, string) {
	return p.cfg.memory(int64(p.cfg.Size), 1), "count, size or workers"
}
func (p *putPhase) Setup(ctx context.Context, env *phases.Env) error {
	if err := p.obj.prepare(ctx, env, &p.cfg, "put"); err != nil {
		return err
	}
	p.fn = p.obj.put
	return nil
}

func (p *putPhase) Run(ctx context.Context, env *phases.Env) error {
	return p.obj.each(ctx, env, len(p.obj.keys), p.fn)
}

// ---- s3_get

type getConfig struct {
	BaseConfig
	RangeSize phases.Size `toml:"range_size" doc:"read each object in ranged GETs of this many bytes (the last may be shorter); 0 = one whole-object GET"`
}

func (c *getConfig) Validate() error {
	if err := c.validate(); err != nil {
		return err
	}
	if c.RangeSize > 0 {
		if err := c.fixedOnly("range_size"); err != nil {
			return err
		}
	}
	if c.RangeSize < 0 || c.RangeSize > 0 && c.Size == 0 {
		return &phases.KeyError{Key: "range_size", Msg: fmt.Sprintf("%s: must be 0 or positive with a non-empty size", c.RangeSize)}
	}
	if c.RangeSize > 0 && (int64(c.Size)+int64(c.RangeSize)-1)/int64(c.RangeSize)*int64(c.Count) > maxObjectsPerRank*10 {
		return &phases.KeyError{Key: "range_size", Msg: "too many ranges per rank: raise range_size or lower count"}
	}
	return nil
}

// ranges is the GETs per object.
func (c *getConfig) ranges() int64 {
	if c.RangeSize == 0 || c.RangeSize >= c.Size {
		return 1
	}
	return (int64(c.Size) + int64(c.RangeSize) - 1) / int64(c.RangeSize)
}

type getPhase struct {
	base
	cfg getConfig
	fn  work
}

func (p *getPhase) Config() any        { return &p.cfg }
func (p *getPhase) ExpectedOps() int64 { return int64(p.cfg.Count) * p.cfg.ranges() }
func (p *getPhase) Memory(int) (int64, string) {
	return p.cfg.memory(int64(p.cfg.Size), 1), "count, size or workers"
}
func (p *getPhase) Setup(ctx context.Context, env *phases.Env) error {
	if err := p.obj.prepare(ctx, env, &p.cfg.BaseConfig, "get"); err != nil {
		return err
	}
	if err := p.obj.populate(ctx, env); err != nil {
		return err
	}
	c, keys, sizes, bufs := p.obj.st.Client, p.obj.keys, p.obj.sizes, p.obj.bufs
	per := p.cfg.ranges()
	if per == 1 {
		p.fn = func(ctx context.Context, w, i int, rec *report.Recorder) error {
			start := rec.BeginOn(&keys[i])
			n, err := c.Get(ctx, keys[i], bufs[w])
			rec.Observe(start, n, err)
			if err == nil && int64(n) != sizes[i] {
				err = fmt.Errorf("get %s: %d bytes, want %d", keys[i], n, sizes[i])
			}
			return err
		}
		return nil
	}
	size := int64(p.cfg.Size)
	rs := int64(p.cfg.RangeSize)
	p.fn = func(ctx context.Context, w, item int, rec *report.Recorder) error {
		i, off := int64(item)/per, int64(item)%per*rs
		n := min(rs, size-off)
		start := rec.BeginOn(&keys[i])
		m, err := c.GetRange(ctx, keys[i], off, n, bufs[w])
		rec.Observe(start, m, err)
		return err
	}
	return nil
}

func (p *getPhase) Run(ctx context.Context, env *phases.Env) error {
	return p.obj.each(ctx, env, int(p.ExpectedOps()), p.fn)
}

// ---- s3_stat

type statPhase struct {
	base
	cfg BaseConfig
	fn  work
}

func (p *statPhase) Config() any        { return &p.cfg }
func (p *statPhase) ExpectedOps() int64 { return int64(p.cfg.Count) }
func (p *statPhase) Memory(int) (int64, string) {
	return p.cfg.memory(int64(p.cfg.Size), 1), "count, size or workers"
}
func (p *statPhase) Setup(ctx context.Context, env *phases.Env) error {
	if err := p.obj.prepare(ctx, env, &p.cfg, "head"); err != nil {
		return err
	}
	if err := p.obj.populate(ctx, env); err != nil {
		return err
	}
	c, keys, sizes := p.obj.st.Client, p.obj.keys, p.obj.sizes
	p.fn = func(ctx context.Context, w, i int, rec *report.Recorder) error {
		start := rec.BeginOn(&keys[i])
		info, err := c.Head(ctx, keys[i])
		rec.Observe(start, 0, err)
		if err == nil && info.Size != sizes[i] {
			err = fmt.Errorf("head %s: size %d, want %d", keys[i], info.Size, sizes[i])
		}
		return err
	}
	return nil
}

func (p *statPhase) Run(ctx context.Context, env *phases.Env) error {
	return p.obj.each(ctx, env, len(p.obj.keys), p.fn)
}

// ---- s3_list

type listConfig struct {
	BaseConfig
	PageSize int `toml:"page_size" doc:"keys per ListObjectsV2 page (max-keys, 1 .. 1000); a listing of more keys follows continuation tokens"`
}

func (c *listConfig) Validate() error {
	if err := c.validate(); err != nil {
		return err
	}
	if c.PageSize < 1 || c.PageSize > 1000 {
		return &phases.KeyError{Key: "page_size", Msg: fmt.Sprintf("%d out of range (1 .. 1000)", c.PageSize)}
	}
	return nil
}

type listPhase struct {
	base
	cfg listConfig
	fn  work
}

func (p *listPhase) Config() any { return &p.cfg }
func (p *listPhase) ExpectedOps() int64 {
	per := (p.cfg.Count + p.cfg.prefixes() - 1) / p.cfg.prefixes()
	return int64(p.cfg.prefixes()) * int64(max(1, (per+p.cfg.PageSize-1)/p.cfg.PageSize))
}
func (p *listPhase) Memory(int) (int64, string) {
	return p.cfg.memory(p.cfg.bufSize(), 1) + int64(p.cfg.Workers*p.cfg.PageSize)*256, "count, size (max_size), workers or page_size"
}
func (p *listPhase) Setup(ctx context.Context, env *phases.Env) error {
	if err := p.obj.prepare(ctx, env, &p.cfg.BaseConfig, "list"); err != nil {
		return err
	}
	if err := p.obj.populate(ctx, env); err != nil {
		return err
	}
	c, prefixes, ps := p.obj.st.Client, p.obj.prefixes, p.cfg.PageSize
	count, per := len(p.obj.keys), p.obj.per
	p.fn = func(ctx context.Context, w, j int, rec *report.Recorder) error {
		want := min(per, count-j*per)
		seen, token := 0, ""
		for {
			start := rec.BeginOn(&prefixes[j])
			page, err := c.List(ctx, prefixes[j], ps, token)
			rec.Observe(start, 0, err)
			if err != nil {
				return err
			}
			seen += len(page.Objects)
			if token = page.Next; token == "" {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		if seen != want {
			return fmt.Errorf("list %s: %d keys, want %d", prefixes[j], seen, want)
		}
		return nil
	}
	return nil
}

func (p *listPhase) Run(ctx context.Context, env *phases.Env) error {
	return p.obj.each(ctx, env, len(p.obj.prefixes), p.fn)
}

// ---- s3_delete

type deleteConfig struct {
	BaseConfig
	Batch int `toml:"batch" doc:"keys per request: 1 = DeleteObject each, 2 .. 1000 = one DeleteObjects request per batch"`
}

func (c *deleteConfig) Validate() error {
	if err := c.validate(); err != nil {
		return err
	}
	if c.Batch < 1 || c.Batch > ps3.MaxBatch {
		return &phases.KeyError{Key: "batch", Msg: fmt.Sprintf("%d out of range (1 .. %d)", c.Batch, ps3.MaxBatch)}
	}
	return nil
}

type deletePhase struct {
	base
	cfg deleteConfig
	fn  work
}

func (p *deletePhase) Config() any { return &p.cfg }
func (p *deletePhase) ExpectedOps() int64 {
	return int64((p.cfg.Count + p.cfg.Batch - 1) / p.cfg.Batch)
}
func (p *deletePhase) Memory(int) (int64, string) {
	return p.cfg.memory(int64(p.cfg.Size), 1), "count, size or workers"
}
func (p *deletePhase) Setup(ctx context.Context, env *phases.Env) error {
	if err := p.obj.prepare(ctx, env, &p.cfg.BaseConfig, "delete"); err != nil {
		return err
	}
	if err := p.obj.populate(ctx, env); err != nil {
		return err
	}
	c, keys, batch := p.obj.st.Client, p.obj.keys, p.cfg.Batch
	if batch == 1 {
		p.fn = func(ctx context.Context, w, i int, rec *report.Recorder) error {
			start := rec.BeginOn(&keys[i])
			err := c.Delete(ctx, keys[i])
			rec.Observe(start, 0, err)
			return err
		}
		return nil
	}
	p.fn = func(ctx context.Context, w, b int, rec *report.Recorder) error {
		lo := b * batch
		part := keys[lo:min(lo+batch, len(keys))]
		start := rec.BeginOn(&part[0])
		kerrs, err := c.DeleteBatch(ctx, part)
		if err == nil && len(kerrs) > 0 {
			err = fmt.Errorf("delete_batch: %d of %d keys not deleted, first %v", len(kerrs), len(part), kerrs[0])
		}
		rec.Observe(start, 0, err)
		return err
	}
	return nil
}

func (p *deletePhase) Run(ctx context.Context, env *phases.Env) error {
	return p.obj.each(ctx, env, int(p.ExpectedOps()), p.fn)
}

// Verify records the storage and checks the objects are gone: a delete
// that answered 204 but left the key is a failure of the store.
func (p *deletePhase) Verify(ctx context.Context, env *phases.Env) error {
	p.obj.st.Record(env)
	for _, j := range p.obj.prefixes {
		page, err := p.obj.st.Client.List(ctx, j, 1, "")
		if err != nil {
			return env.Errorf("verify: %w", err)
		}
		if len(page.Objects) > 0 {
			return env.Errorf("verify: %s still exists after its delete", page.Objects[0].Key)
		}
	}
	return nil
}

// ---- s3_multipart

type multipartConfig struct {
	BaseConfig
	PartSize        phases.Size `toml:"part_size" doc:"bytes per part but the last (S3: at least 5MiB, at most 10,000 parts)"`
	PartConcurrency int         `toml:"part_concurrency" doc:"parts of one object in flight at once (each worker uploads one object at a time)"`
}

func (c *multipartConfig) Validate() error {
	if err := c.validate(); err != nil {
		return err
	}
	if err := c.fixedOnly("s3_multipart"); err != nil {
		return err
	}
	switch {
	case c.PartSize < ps3.MinPartSize || c.PartSize > maxObjectSize:
		return &phases.KeyError{Key: "part_size", Msg: fmt.Sprintf("%s out of range (5MiB .. 5GiB)", c.PartSize)}
	case (int64(c.Size)+int64(c.PartSize)-1)/int64(c.PartSize) > 10000:
		return &phases.KeyError{Key: "part_size", Msg: fmt.Sprintf("size %s in %s parts is more than S3's 10,000 parts", c.Size, c.PartSize)}
	case c.PartConcurrency < 1 || c.PartConcurrency > 256:
		return &phases.KeyError{Key: "part_concurrency", Msg: fmt.Sprintf("%d out of range (1 .. 256)", c.PartConcurrency)}
	}
	return nil
}

func (c *multipartConfig) parts() int64 {
	return max(1, (int64(c.Size)+int64(c.PartSize)-1)/int64(c.PartSize))
}

type multipartPhase struct {
	base
	cfg  multipartConfig
	sets [][]*report.Set // [worker][part worker]: the part recorders
	fn   work
}

func (p *multipartPhase) Config() any        { return &p.cfg }
func (p *multipartPhase) ExpectedOps() int64 { return int64(p.cfg.Count) * (p.cfg.parts() + 2) }
func (p *multipartPhase) Memory(int) (int64, string) {
	return p.cfg.memory(p.cfg.bufSize(), 2) + int64(p.cfg.Workers*p.cfg.PartConcurrency)*report.RecorderBytes, "count, size, workers or part_concurrency"
}
func (p *multipartPhase) Setup(ctx context.Context, env *phases.Env) error {
	if err := p.obj.prepare(ctx, env, &p.cfg.BaseConfig, ""); err != nil {
		return err
	}
	c, keys, bufs := p.obj.st.Client, p.obj.keys, p.obj.bufs
	// One Multipart per worker, built here: its callbacks time the
	// requests into that worker's recorders.
	p.sets = make([][]*report.Set, len(bufs))
	mps := make([]ps3.Multipart, len(bufs))
	var created, completed []*report.Recorder
	for w := range bufs {
		s := env.NewSet()
		p.sets[w] = []*report.Set{s}
		parts := make([]*report.Recorder, p.cfg.PartConcurrency)
		for pw := range parts {
			ps := env.NewSet()
			p.sets[w] = append(p.sets[w], ps)
			parts[pw] = ps.Op("part")
		}
		cr, co := s.Op("create"), s.Op("complete")
		created, completed = append(created, cr), append(completed, co)
		mps[w] = ps3.Multipart{PartSize: int64(p.cfg.PartSize), Concurrency: p.cfg.PartConcurrency,
			Observe:   func(pw int, start time.Time, n int, err error) { parts[pw].Observe(start, n, err) },
			Created:   func(start time.Time, err error) { cr.Observe(start, 0, err) },
			Completed: func(start time.Time, err error) { co.Observe(start, 0, err) },
		}
	}
	p.fn = func(ctx context.Context, w, i int, _ *report.Recorder) error {
		created[w].BeginOn(&keys[i])
		_, err := c.UploadMultipart(ctx, keys[i], bufs[w], mps[w])
		return err
	}
	return nil
}

// Run uploads the objects, one per worker at a time. The requests are
// timed by the callbacks Setup built into the per-worker sets (create,
// complete, and part per part worker), made by env.NewSet in this
// iteration's Setup: the engine merges them into the rank's after the
// clock has stopped, not here inside the timed span.
func (p *multipartPhase) Run(ctx context.Context, env *phases.Env) error {
	recs := make([]*report.Recorder, len(p.obj.bufs))
	for w := range recs {
		recs[w] = p.sets[w][0].Op("create")
	}
	err := spread(ctx, env, len(p.obj.keys), recs, p.fn)
	p.sets = nil // the next iteration's Setup makes fresh ones
	return err
}
