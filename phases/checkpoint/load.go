package checkpoint

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/ckpt"
	"github.com/prism-hpc/prism/report"
)

// ckptLoad is ddp_load, fsdp_load and rl_load.
type ckptLoad struct {
	kind     string // ddp | fsdp | rl
	cfg      loadCfg
	model    *ckpt.Model
	rec      *checkpointRecord
	fallback *writer
	rd       *reader
	mmap     bool
	want     int64 // this rank's timed ops per iteration, from Setup's plan
}

func (p *ckptLoad) Config() any    { return p.cfg }
func (p *ckptLoad) Fadvises() bool { return true }

// ExpectedOps is this rank's timed ops per iteration (phases.OpCounter),
// which Setup counts from the reads it planned (reader.expectedOps): they
// depend on the checkpoint found (its format, and for fsdp_load the rank
// count it was saved at), the rank's share, read_size, mmap and
// st_blksize, so it is 0 until Setup has run.
func (p *ckptLoad) ExpectedOps() int64 { return p.want }

// Outputs is the checkpoint Setup wrote when no save came before (it stays
// for the loads after this one, as a save's would).
func (p *ckptLoad) Outputs() []string {
	if p.fallback != nil {
		return []string{p.fallback.dir}
	}
	return nil
}

// Memory: see checkpointMemory.
func (p *ckptLoad) Memory(ranks int) (int64, string) {
	mk, _, _ := p.cfg.keys()
	return checkpointMemory(mk)
}

func (p *ckptLoad) saveKind() string {
	if p.kind == "ddp" {
		return "ddp"
	}
	return "fsdp"
}

// Footprint of a load is what each rank reads (it writes nothing unless no
// save phase left a checkpoint of its model).
func (p *ckptLoad) Footprint(ranks int) phases.Footprint {
	mk, lk, _ := p.cfg.keys()
	m := mk.model()
	if m == nil {
		return phases.Footprint{}
	}
	switch p.kind {
	case "ddp":
		return phases.Footprint{Files: 1, Bytes: m.Bytes()}
	case "rl":
		readers := p.readers(ranks)
		l := newLayout(m, writeSpec{kind: "fsdp", format: lk.Format, version: mk.version}, ranks, 0, "")
		return phases.Footprint{Files: int64(len(l.Files) * readers / ranks), Bytes: m.Bytes() * int64(readers) / int64(ranks)}
	}
	return phases.Footprint{Files: 2, Bytes: (m.Bytes() + int64(ranks) - 1) / int64(ranks)}
}

func (p *ckptLoad) readers(size int) int {
	_, _, n := p.cfg.keys()
	if n == 0 || n > size {
		return size
	}
	return n
}

func (p *ckptLoad) Setup(ctx context.Context, env *phases.Env) error {
	mk, lk, _ := p.cfg.keys()
	p.want = 0
	if p.model == nil {
		m, err := mk.resolve(ctx, env)
		if err != nil {
			return err
		}
		p.model = m
	}
	st := store(env)
	dir := filepath.Join(env.Dir, "checkpoint")
	obj, err := openPlace(ctx, env, &mk.StorageKeys, dir)
	if err != nil {
		return err
	}
	where := ""
	if obj != nil {
		where = obj.where
	}
	// A save at this rank count first (a sweep's loads read their own
	// size's), else the latest at any (a resharding load); only a save to
	// the storage this load reads.
	here := func(r *checkpointRecord) bool { return r.where == where }
	mine := st.latest(p.model, p.saveKind(), func(r *checkpointRecord) bool {
		return here(r) && (r.layout.Ranks == env.Size || p.kind != "fsdp")
	})
	if mine == nil {
		mine = st.latest(p.model, p.saveKind(), here)
	}
	rec, err := agreeRecord(ctx, env, p.model, mine)
	if err != nil {
		return err
	}
	p.rec, p.fallback = rec, nil
	if p.rec == nil {
		// No earlier save of this model to load: write one now, untimed.
		spec := writeSpec{kind: p.saveKind(), format: lk.Format, version: mk.version, fsync: fsyncFor(lk.Format)}
		untimed := newIORecs(report.NewSet().Op) // setup's writes are not measured
		w := &writer{spec: spec, model: p.model, dir: dir, gen: generation(env, "load-setup"), recs: &untimed, obj: obj}
		if err := w.prepare(env, uint64(mk.Seed), int64(mk.BufferBudget)); err != nil {
			return err
		}
		if err := w.write(ctx, env); err != nil {
			w.removeMade()
			return err
		}
		// Barrier before reading back: rank 0's final files must exist.
		if err := env.Comm.Barrier(ctx); err != nil {
			return err
		}
		rec, err := w.finish(ctx, env)
		if err != nil {
			return err
		}
		p.rec, p.fallback = rec, w
		if env.Rank == 0 {
			fmt.Fprintf(env.Log, "prism: %s %q: no earlier %s save of %s in this run; wrote a checkpoint in setup (untimed): %s\n",
				env.Kind, env.Name, p.saveKind(), p.model.Name, rec.dir)
		}
	}
	format := p.rec.spec.format
	mm := mmapFor(lk.Mmap, format) && !(lk.Mmap == "auto" && lk.Direct)
	if mm && format == ckpt.FormatDCP {
		return env.Errorf("setup: mmap = true, but the checkpoint in %s is DCP, which FileSystemReader reads with read(2); mmap applies to torch and safetensors checkpoints", p.rec.dir)
	}
	p.mmap = mm && obj == nil // an object is read, not mapped
	readers := p.readers(env.Size)
	if obj != nil && p.rec.dir != dir {
		// The checkpoint's own directory, which a save of another phase
		// named (a checkpoint written in setup is in dir, and the reader
		// shares the setup writer's part buffers).
		if obj, err = openPlace(ctx, env, &mk.StorageKeys, p.rec.dir); err != nil {
			return err
		}
	}
	rd, err := newReader(env, p.rec, p.kind, env.Rank < readers, loadOpts{readSize: int64(lk.ReadSize), direct: lk.Direct, mmap: mm, budget: int64(mk.BufferBudget)}, obj)
	if err != nil {
		return err
	}
	p.rd = rd
	p.want = rd.expectedOps(p.kind)
	if env.Cache == phases.CacheFadvise {
		if err := rd.evict(env); err != nil {
			return err
		}
	}
	// The rank's recorders of the load, made here: not inside the timed
	// Run (a recorder's creation clears its ~270 KiB histogram).
	rd.makeRecs(env, p.kind)
	return nil
}

func (p *ckptLoad) Run(ctx context.Context, env *phases.Env) error {
	if err := p.rd.run(ctx, env, p.kind); err != nil {
		return err
	}
	if env.Rank == 0 {
		env.SetMetric("checkpoint_bytes", float64(p.model.Bytes()))
		env.SetMetric("model_params", float64(p.model.Params))
		env.SetMetric("fsync", b2f(p.rec.spec.fsync && p.rec.where == ""))
		env.SetMetric("written_in_setup", b2f(p.fallback != nil))
		if p.kind == "rl" {
			env.SetMetric("readers", float64(p.readers(env.Size)))
		}
		env.SetMetric("mmap", b2f(p.mmap))
		if p.kind == "fsdp" {
			// Written at another rank count: each rank read the saved
			// chunks its new rows overlap.
			env.SetMetric("saved_ranks", float64(p.rec.layout.Ranks))
			env.SetMetric("resharded", b2f(p.rec.layout.Ranks != env.Size))
		}
	}
	env.SetMetric("header_bytes", float64(p.rd.headerB))
	if p.rd.splits > 0 {
		env.SetMetric("split_reads", float64(p.rd.splits))
	}
	if p.rd.inline && len(p.rd.ops) > 0 {
		env.SetMetric("verify_inline_ranks", 1)
	}
	if p.rd.obj != nil {
		p.rd.obj.st.Record(env) // the retries of the Run's requests too
	}
	return nil
}

// Verify checks every byte Run read that was not checked inline.
func (p *ckptLoad) Verify(ctx context.Context, env *phases.Env) error { return p.rd.verify(env) }

func (p *ckptLoad) Teardown(ctx context.Context, env *phases.Env) error {
	if p.rd != nil {
		p.rd.closeAll()
	}
	return nil
}
