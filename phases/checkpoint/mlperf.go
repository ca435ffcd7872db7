package checkpoint

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/ckpt"
	"github.com/prism-hpc/prism/report"
	"github.com/prism-hpc/prism/spmd"
)

// mlperf_checkpoint is MLPerf Storage's checkpointing benchmark (DLIO's
// checkpoint workload as mlpstorage runs it): num_checkpoints_write
// checkpoints of a llama3 model, each into its own directory, every
// simulated process (accelerator) writing its files with fsync, then a
// cache flush, then num_checkpoints_read checkpoint loads. The files and
// their sizes are DLIO's (ckpt.MLPerfModel): 2 bytes of fp16 model state
// plus 12 of fp32 Adam state per parameter, ZeRO-3 (every process its
// model and optimizer shard) for 8B and 70B, ZeRO-1 with pipeline stages
// (data-parallel rank 0 writes the layer files, every process its
// optimizer shard) for 405B and 1T.
//
// Simulated processes are spread over the ranks (process p on rank
// p % ranks); a rank runs its share as goroutines, all of which start each
// checkpoint together after a barrier. A checkpoint's duration is the
// slowest process's, and its throughput the checkpoint's size over that
// duration (MLPerf: "duration: maximum time across all processes;
// throughput: minimum throughput across all processes"); the [METRIC]
// lines give their mean and (population) standard deviation over the
// checkpoints, as DLIO prints them.

func registerMLPerf(r *phases.Registry) {
	r.Register(phases.Kind{Name: "mlperf_checkpoint", Family: "checkpoint",
		Summary: "MLPerf Storage checkpointing: N checkpoint writes (fsync) then N reads of a llama3 model by simulated processes, DLIO's files and sizes (14 bytes/param, ZeRO-3 or ZeRO-1 + pipeline) in torch.save's and torch.load's calls, time_between_checkpoints idle before each, cache flush between; [METRIC] lines; ops open, write, write_header, fsync, close, save_file, read, read_header, lseek, load_file",
		New:     func() phases.Phase { return &mlperfCheckpoint{cfg: defaultMLPerfConfig()} },
		Sample:  "scale = 0.00002\nnum_checkpoints_write = 1\nnum_checkpoints_read = 1\ntime_between_checkpoints = \"0s\""})
}

type mlperfConfig struct {
	Model        string          `toml:"model" doc:"llama3-8b | llama3-70b | llama3-405b | llama3-1t (MLPerf Storage's LLM table)"`
	Processes    int             `toml:"processes" doc:"simulated accelerators, a multiple of TP x PP (1, 8, 256, 512); 0 = the closed run's 8, 64, 512, 1024; spread over the ranks"`
	NumWrite     int             `toml:"num_checkpoints_write" doc:"checkpoints written, each in its own directory global_epoch1_step<N> (MLPerf: 10)"`
	NumRead      int             `toml:"num_checkpoints_read" doc:"checkpoints read after the writes and a cache flush, cycling through those written (MLPerf: 10)"`
	Scale        float64         `toml:"scale" doc:"fraction of the full checkpoint (every tensor scaled, rounded up): 1 = MLPerf's size, e.g. 0.01 on a small machine"`
	Fsync        bool            `toml:"fsync" doc:"fsync every file written (MLPerf requires it)"`
	WriteSize    phases.Size     `toml:"write_size" doc:"0: the write calls torch.save makes (a writev of the buffered headers with each tensor; a tensor larger than the process's share of buffer_budget in several); else bytes per pwrite(2) of tensor data, a multiple of 4KiB"`
	ReadSize     phases.Size     `toml:"read_size" doc:"0: the read calls torch.load makes (st_blksize buffered reads of the zip records, one read per tensor, lseeks); else bytes per pread(2) of tensor data, a multiple of 4KiB"`
	TimeBetween  phases.Duration `toml:"time_between_checkpoints" doc:"idle time before each checkpoint save and each load, as DLIO waits (its llama3 configs: 5s); no op is timed then, and no checkpoint duration or [METRIC] line includes it nor the phase's wall time and rates (metrics.idle_seconds says how much there was)"`
	Keep         bool            `toml:"keep" doc:"leave the checkpoints in place after the phase, as DLIO does: the run directory's cleanup removes them at the end of the run, [plan] keep = true keeps them after it; false: the phase's teardown removes its checkpoint files (the space back for later phases)"`
	Persist      string          `toml:"persist" doc:"a name: a write run's checkpoints go to <workdir>/prism-datasets/<name>-<hash of model, processes, scale, seed>/ and stay after the run, for a later read-only run's checkpoint = \"<name>\" (MLPerf's split write and read phases; prism datasets list | rm)"`
	Checkpoint   string          `toml:"checkpoint" doc:"with num_checkpoints_write = 0: read the checkpoints a write run kept with persist = \"<name>\" (checked: marker, file list, sizes, the same model, processes, scale and seed) instead of writing one first"`
	Verify       bool            `toml:"verify" doc:"check every tensor read against its CRC-32; outside a checkpoint's duration when a process's checkpoint fits its share of buffer_budget, else as it is read"`
	Seed         int64           `toml:"seed" doc:"seed of the tensor content"`
	BufferBudget phases.Size     `toml:"buffer_budget" doc:"memory per rank for generated write data and for read data checked after each checkpoint, shared by its simulated processes"`
	StorageKeys
}

func defaultMLPerfConfig() mlperfConfig {
	return mlperfConfig{Model: "llama3-8b", NumWrite: 10, NumRead: 10, Scale: 1, Fsync: true, TimeBetween: phases.Duration(5 * time.Second),
		Keep: true, Verify: true, Seed: 1, BufferBudget: 256 << 20, StorageKeys: mlperfStorageKeys()}
}

// Validate checks the keys against the model's parallelism.
func (c *mlperfConfig) Validate() error {
	m, ok := ckpt.MLPerfModels[c.Model]
	if !ok {
		return &phases.KeyError{Key: "model", Msg: fmt.Sprintf("unknown model %q (allowed: %s)", c.Model, strings.Join(ckpt.MLPerfModelNames(), ", "))}
	}
	mp := m.TP * m.PP
	switch {
	case c.Processes < 0 || c.Processes > 1<<20 || c.Processes > 0 && c.Processes%mp != 0:
		return &phases.KeyError{Key: "processes", Msg: fmt.Sprintf("%d: want a multiple of %s's TP x PP = %d (0 = the closed run's %d)", c.Processes, c.Model, mp, m.Processes())}
	case c.NumWrite < 0 || c.NumWrite > 1000:
		return &phases.KeyError{Key: "num_checkpoints_write", Msg: fmt.Sprintf("%d out of range (0 .. 1000)", c.NumWrite)}
	case c.NumRead < 0 || c.NumRead > 1000:
		return &phases.KeyError{Key: "num_checkpoints_read", Msg: fmt.Sprintf("%d out of range (0 .. 1000)", c.NumRead)}
	case c.NumWrite == 0 && c.NumRead == 0:
		return &phases.KeyError{Key: "num_checkpoints_write", Msg: "nothing to do: num_checkpoints_write and num_checkpoints_read are both 0"}
	case !(c.Scale > 0 && c.Scale <= 1):
		return &phases.KeyError{Key: "scale", Msg: fmt.Sprintf("%v out of range (0 < scale <= 1)", c.Scale)}
	case c.BufferBudget < 1<<20 || c.BufferBudget > 1<<40:
		return &phases.KeyError{Key: "buffer_budget", Msg: fmt.Sprintf("%s out of range (1MiB .. 1TiB)", c.BufferBudget)}
	}
	if err := c.validatePersist(); err != nil {
		return err
	}
	if c.TimeBetween < 0 || c.TimeBetween > phases.Duration(24*time.Hour) {
		return &phases.KeyError{Key: "time_between_checkpoints", Msg: fmt.Sprintf("%s out of range (0 .. 24h)", c.TimeBetween)}
	}
	if err := checkIOSize("write_size", c.WriteSize); err != nil {
		return err
	}
	if err := c.StorageKeys.validate(); err != nil {
		return err
	}
	return checkIOSize("read_size", c.ReadSize)
}

func (c *mlperfConfig) processes() int {
	if c.Processes > 0 {
		return c.Processes
	}
	return ckpt.MLPerfModels[c.Model].Processes()
}

type mlperfCheckpoint struct {
	cfg       mlperfConfig
	m         ckpt.MLPerfModel
	nproc     int
	ckptBytes int64
	procs     []*mlpProc
	dirs      []string
	ok        bool               // the last Run completed: its checkpoints stay if keep
	pers      *phases.Persistent // persist or checkpoint: the kept checkpoints' directory (persist.go)
	persGens  int                // checkpoint: how many the write run kept
	idle      float64            // seconds waited between checkpoints in the last Run
	want      int64              // this rank's timed ops per iteration, from Setup's plans
	// Per-checkpoint slowest and fastest process, over measured iterations
	// (rank 0).
	saveMax, saveMin, loadMax, loadMin []float64
	perProc                            map[int][2][]float64 // rank 0: process -> save, load durations
}

// mlpProc is one simulated process on this rank.
type mlpProc struct {
	id      int
	files   []ckpt.TorchFile
	bytes   int64
	pool    *ckpt.Pool
	recs    ioRecs
	writers []*writer // one per checkpoint written
	readers []*reader // one per checkpoint written, reading it
	buf     []byte
	inline  bool
	save    []float64 // this iteration's durations
	load    []float64
	err     error
}

func (p *mlperfCheckpoint) Config() any { return &p.cfg }

// Resolve: processes = 0 is the closed run's count for the model.
func (p *mlperfCheckpoint) Resolve([]*phases.Spec) phases.Resolved {
	return phases.Resolved{Set: map[string]any{"processes": p.cfg.processes()}}
}

func (p *mlperfCheckpoint) Fadvises() bool { return true }

// ExpectedOps is this rank's timed ops per iteration (phases.OpCounter):
// every save and load of its simulated processes, counted by Setup from
// their planned calls (writer.expectedOps, reader.expectedOps). 0 until
// Setup has run, and over S3 (see those).
func (p *mlperfCheckpoint) ExpectedOps() int64 { return p.want }

// expectedOps sums what Run records: each process writes checkpoints 0 ..
// num_checkpoints_write-1 and reads num_checkpoints_read of them in turn.
func (p *mlperfCheckpoint) expectedOps() int64 {
	var n int64
	gens := p.gens()
	for _, pr := range p.procs {
		for k := 0; k < p.cfg.NumWrite; k++ {
			w := pr.writers[k]
			if w.obj != nil {
				return 0
			}
			n += w.expectedOps()
		}
		for i := 0; i < p.cfg.NumRead; i++ {
			r := pr.readers[i%gens]
			if r.obj != nil {
				return 0
			}
			n += r.expectedOps("mlperf")
		}
	}
	return n
}

// Footprint: every checkpoint written stays until the run ends.
func (p *mlperfCheckpoint) Footprint(ranks int) phases.Footprint {
	m := ckpt.MLPerfModels[p.cfg.Model]
	files, err := m.Files(p.cfg.processes(), p.cfg.Scale)
	if err != nil {
		return phases.Footprint{}
	}
	var b int64
	for _, f := range files {
		b += f.Bytes()
	}
	n := int64(max(p.cfg.NumWrite, 1))
	r := int64(ranks)
	return phases.Footprint{Files: (int64(len(files))*n + r - 1) / r, Bytes: (b*n + r - 1) / r}
}

func (p *mlperfCheckpoint) Setup(ctx context.Context, env *phases.Env) error {
	c := &p.cfg
	p.want = 0
	p.m = ckpt.MLPerfModels[c.Model]
	p.nproc = c.processes()
	files, err := p.m.Files(p.nproc, c.Scale)
	if err != nil {
		return env.Errorf("setup: %w", err)
	}
	byProc := map[int][]ckpt.MLPerfFile{}
	p.ckptBytes = 0
	for _, f := range files {
		byProc[f.Process] = append(byProc[f.Process], f)
		p.ckptBytes += f.Bytes()
	}
	if err := p.openPersist(ctx, env); err != nil {
		return err
	}
	gens := p.gens()
	p.dirs = make([]string, gens)
	pins := make([]*pio.Dir, gens)
	objs := make([]*objPlace, gens)
	for k := range p.dirs {
		p.dirs[k] = filepath.Join(env.Dir, fmt.Sprintf("global_epoch1_step%d", k+1))
		var err error
		if objs[k], err = openPlace(ctx, env, &c.StorageKeys, p.dirs[k]); err != nil {
			return err
		}
		if objs[k] == nil {
			if pins[k], err = pinDir(env, p.dirs[k], true); err != nil {
				return err
			}
		}
	}
	if err := p.persistPins(env, pins); err != nil {
		return err
	}
	var local []int
	for id := env.Rank; id < p.nproc; id += env.Size {
		local = append(local, id)
	}
	share := int64(c.BufferBudget) / int64(max(len(local), 1))
	p.procs = p.procs[:0]
	spec := writeSpec{kind: "mlperf", format: ckpt.FormatTorch, fsync: c.Fsync, writeSize: int64(c.WriteSize)}
	mode := modeCalls
	if c.ReadSize > 0 {
		mode = modeChunks
	}
	p.ok = false
	for _, id := range local {
		pr := &mlpProc{id: id}
		pr.recs = newIORecs(report.NewSet().Op)
		for _, f := range byProc[id] {
			tf := ckpt.TorchFile{Name: f.Name}
			for i, e := range f.Elems {
				tf.Tensors = append(tf.Tensors, ckpt.Tensor{Name: fmt.Sprintf("state.%d", i), Shape: []int64{e}, DType: f.DType})
			}
			pr.files = append(pr.files, tf)
			pr.bytes += f.Bytes()
		}
		seed := uint64(c.Seed) ^ uint64(id)*0x9e3779b97f4a7c15
		var largest int64
		for _, f := range pr.files {
			for _, t := range f.Tensors {
				largest = max(largest, t.Bytes())
			}
		}
		pw := &writer{spec: spec, poolP: min(share, pr.bytes)}
		pr.pool = ckpt.NewPool(seed, pw.poolP, pw.window(largest))
		var parts [][]byte // the process's part buffers, over S3
		for k := 0; k < gens; k++ {
			l := ckpt.NewTorchFiles(pr.files, seed, 1)
			w := &writer{spec: spec, layout: l, dir: p.dirs[k], pin: pins[k], gen: p.generation(env, fmt.Sprintf("mlperf/%d/%d", id, k)), pool: pr.pool, recs: &pr.recs}
			if objs[k] != nil {
				w.obj = objs[k].share(parts)
				parts = w.obj.buffers()
			}
			l.Checksum(pr.pool, w.gen, nil)
			for f := range l.Files {
				l.Build(f, true)
				w.files = append(w.files, f)
			}
			w.setPaths()
			if err := w.plan(); err != nil {
				return env.Errorf("setup: %w", err)
			}
			pr.writers = append(pr.writers, w)
			r := newPlainReader(l, w.dir, w.pin, mode, int64(c.ReadSize))
			r.recs, r.obj = &pr.recs, w.obj
			for f := range l.Files {
				r.whole(f)
			}
			pr.readers = append(pr.readers, r)
		}
		// One buffer per process, shared by its checkpoints' reads: the
		// whole checkpoint when it fits the process's share, else one
		// read (reads larger than the share split).
		total := pr.readers[0].totalBytes()
		var maxN int64
		for _, op := range pr.readers[0].ops {
			maxN = max(maxN, op.n)
		}
		pr.inline = total > share
		if pr.inline {
			pr.buf = pio.AlignedBuffer(int(max(min(maxN, share), 1)), pio.DirectAlign)
		} else {
			pr.buf = pio.AlignedBuffer(int(total), pio.DirectAlign)
		}
		pio.Prefault(pr.buf) // not by the first timed load
		for _, r := range pr.readers {
			if err := r.planWith(pr.inline, pr.buf); err != nil {
				return env.Errorf("setup: %w", err)
			}
		}
		p.procs = append(p.procs, pr)
	}
	if c.NumWrite == 0 && c.Checkpoint == "" {
		// Only reads are measured: write the checkpoint they read now,
		// untimed.
		var wg sync.WaitGroup
		for _, pr := range p.procs {
			wg.Add(1)
			go func(pr *mlpProc) {
				defer wg.Done()
				pr.err = pr.writeCheckpoint(ctx, env, 0)
			}(pr)
		}
		wg.Wait()
		for _, pr := range p.procs {
			if pr.err != nil {
				return pr.err
			}
		}
	}
	// The recorders Run times into: a set per process, fresh each
	// iteration and watched by the stall monitor; the engine merges them
	// into the rank's once the clock has stopped (Env.NewSet). Made here,
	// for the checkpoints Run saves and loads, not by their first save
	// and load: a recorder's creation clears its ~270 KiB histogram, ~115
	// µs, and a process times ~7 op types, which the first checkpoint's
	// duration (save_duration_mean_seconds, its throughput) would hold.
	for _, pr := range p.procs {
		pr.recs = newIORecs(env.NewSet().Op)
		for k := 0; k < c.NumWrite && k < len(pr.writers); k++ {
			for _, f := range pr.writers[k].files {
				pr.writers[k].makeRecs(env, f)
			}
		}
		for i := 0; i < c.NumRead && i < gens; i++ {
			pr.readers[i].makeRecs(env, "mlperf")
		}
	}
	p.want = p.expectedOps()
	return nil
}

func (pr *mlpProc) writeCheckpoint(ctx context.Context, env *phases.Env, k int) error {
	w := pr.writers[k]
	for _, f := range w.files {
		if err := w.writeFile(ctx, env, f); err != nil {
			return err
		}
	}
	return nil
}

func (pr *mlpProc) readCheckpoint(ctx context.Context, env *phases.Env, k int, verify bool) (time.Duration, error) {
	r := pr.readers[k]
	start := time.Now()
	if err := r.run(ctx, env, "mlperf"); err != nil {
		return 0, err
	}
	d := time.Since(start)
	if verify {
		if err := r.verify(env); err != nil {
			return d, err
		}
	}
	return d, nil
}

// step runs fn on every local simulated process at once, after a barrier,
// and agrees with the other ranks on errors and on the slowest and fastest
// process's duration.
func (p *mlperfCheckpoint) step(ctx context.Context, env *phases.Env, fn func(*mlpProc) (time.Duration, error)) (slowest, fastest float64, err error) {
	if err := env.Comm.Barrier(ctx); err != nil {
		return 0, 0, err
	}
	durs := make([]float64, len(p.procs))
	var wg sync.WaitGroup
	for i, pr := range p.procs {
		wg.Add(1)
		go func(i int, pr *mlpProc) {
			defer wg.Done()
			d, err := fn(pr)
			durs[i], pr.err = d.Seconds(), err
		}(i, pr)
	}
	wg.Wait()
	var local error
	hi, lo := 0.0, math.Inf(1)
	for i, pr := range p.procs {
		if pr.err != nil && local == nil {
			local = pr.err
		}
		hi, lo = max(hi, durs[i]), min(lo, durs[i])
	}
	if err := env.Agree(ctx, local); err != nil {
		return 0, 0, err
	}
	v := []float64{hi}
	if err := env.Comm.AllreduceFloat64(ctx, spmd.Max, v); err != nil {
		return 0, 0, err
	}
	w := []float64{lo}
	if err := env.Comm.AllreduceFloat64(ctx, spmd.Min, w); err != nil {
		return 0, 0, err
	}
	return v[0], w[0], nil
}

func (p *mlperfCheckpoint) Run(ctx context.Context, env *phases.Env) error {
	c := &p.cfg
	for _, pr := range p.procs {
		// Each process times into the set Setup made (no figure of this
		// Run reads the rank's set: the metrics come from the durations
		// timed here).
		pr.save, pr.load = pr.save[:0], pr.load[:0]
	}
	var saveMax, saveMin, loadMax, loadMin []float64
	p.ok, p.idle = false, 0
	for k := 0; k < c.NumWrite; k++ {
		if err := p.pause(ctx, env); err != nil {
			return err
		}
		hi, lo, err := p.step(ctx, env, func(pr *mlpProc) (time.Duration, error) {
			start := time.Now()
			err := pr.writeCheckpoint(ctx, env, k)
			d := time.Since(start)
			pr.save = append(pr.save, d.Seconds())
			return d, err
		})
		if err != nil {
			return err
		}
		saveMax, saveMin = append(saveMax, hi), append(saveMin, lo)
	}
	if c.NumRead > 0 && c.NumWrite > 0 {
		if err := p.flush(ctx, env); err != nil {
			return err
		}
	}
	gens := p.gens()
	for i := 0; i < c.NumRead; i++ {
		k := i % gens
		if err := p.pause(ctx, env); err != nil {
			return err
		}
		hi, lo, err := p.step(ctx, env, func(pr *mlpProc) (time.Duration, error) {
			d, err := pr.readCheckpoint(ctx, env, k, c.Verify)
			pr.load = append(pr.load, d.Seconds())
			return d, err
		})
		if err != nil {
			return err
		}
		loadMax, loadMin = append(loadMax, hi), append(loadMin, lo)
	}
	// Per-process durations to rank 0, for the slowest and fastest process.
	var mine []byte
	for _, pr := range p.procs {
		mine = binary.LittleEndian.AppendUint32(mine, uint32(pr.id))
		mine = binary.LittleEndian.AppendUint32(mine, uint32(len(pr.save)))
		mine = binary.LittleEndian.AppendUint32(mine, uint32(len(pr.load)))
		for _, d := range append(append([]float64(nil), pr.save...), pr.load...) {
			mine = binary.LittleEndian.AppendUint64(mine, math.Float64bits(d))
		}
	}
	all, err := env.Comm.Gather(ctx, 0, mine)
	if err != nil {
		return err
	}
	inline := 0
	for _, pr := range p.procs {
		if pr.inline && c.Verify && c.NumRead > 0 {
			inline++
		}
	}
	if inline > 0 {
		env.SetMetric("verify_inline_processes", float64(inline))
	}
	var splits int64
	for _, pr := range p.procs {
		for _, w := range pr.writers {
			splits += w.splits
		}
		for _, r := range pr.readers {
			splits += r.splits
		}
	}
	if splits > 0 {
		env.SetMetric("split_calls", float64(splits))
	}
	p.ok = true
	if env.Rank != 0 || env.Warmup {
		return nil
	}
	if p.perProc == nil {
		p.perProc = map[int][2][]float64{}
	}
	for _, b := range all {
		for len(b) >= 12 {
			id := int(binary.LittleEndian.Uint32(b))
			ns, nl := int(binary.LittleEndian.Uint32(b[4:])), int(binary.LittleEndian.Uint32(b[8:]))
			b = b[12:]
			if len(b) < 8*(ns+nl) {
				return env.Errorf("a rank sent %d bytes of durations for process %d, want %d", len(b), id, 8*(ns+nl))
			}
			d := p.perProc[id]
			for j := 0; j < ns+nl; j++ {
				x := math.Float64frombits(binary.LittleEndian.Uint64(b[8*j:]))
				k := b2i(j >= ns) // save durations first, then load
				d[k] = append(d[k], x)
			}
			p.perProc[id] = d
			b = b[8*(ns+nl):]
		}
	}
	p.saveMax, p.saveMin = append(p.saveMax, saveMax...), append(p.saveMin, saveMin...)
	p.loadMax, p.loadMin = append(p.loadMax, loadMax...), append(p.loadMin, loadMin...)
	p.setMetrics(env)
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// flush makes the reads cold, as MLPerf requires between its write and
// read phases: drop_caches (root, once per host) or every process's files
// advised out of the page cache (fadvise), per the phase's cache policy.
func (p *mlperfCheckpoint) flush(ctx context.Context, env *phases.Env) error {
	if err := env.Comm.Barrier(ctx); err != nil {
		return err
	}
	var local error
	switch env.Cache {
	case phases.CacheDrop:
		if env.Comm.LocalRank() == 0 {
			local = pio.DropCaches()
		}
	case phases.CacheFadvise:
		for _, pr := range p.procs {
			for _, r := range pr.readers {
				if local = r.evict(env); local != nil {
					break
				}
			}
		}
	}
	if local != nil {
		local = env.Errorf("cache flush between writes and reads: %w", local)
	}
	if err := env.Agree(ctx, local); err != nil {
		return err
	}
	return nil
}

func (p *mlperfCheckpoint) setMetrics(env *phases.Env) {
	set := env.SetMetric
	set("simulated_accelerators", float64(p.nproc))
	set("checkpoint_bytes", float64(p.ckptBytes))
	full, _ := p.m.CheckpointBytes(p.nproc, 1)
	set("checkpoint_full_gib", float64(full)/(1<<30))
	set("scale", p.cfg.Scale)
	set("fsync", b2f(p.cfg.Fsync))
	set("time_between_checkpoints_seconds", time.Duration(p.cfg.TimeBetween).Seconds())
	set("idle_seconds", p.idle)
	set("save_checkpoints", float64(len(p.saveMax)))
	set("load_checkpoints", float64(len(p.loadMax)))
	for _, op := range []string{"save", "load"} {
		durs := p.saveMax
		if op == "load" {
			durs = p.loadMax
		}
		if len(durs) == 0 {
			continue
		}
		dm, ds, tm, ts := mlperfStats(durs, float64(p.ckptBytes))
		set(op+"_duration_mean_seconds", dm)
		set(op+"_duration_stdev_seconds", ds)
		set(op+"_throughput_mean_gib_per_sec", tm)
		set(op+"_throughput_stdev_gib_per_sec", ts)
		// The slowest and fastest simulated process (mean over checkpoints).
		idx := b2i(op == "load")
		ids := make([]int, 0, len(p.perProc))
		for id := range p.perProc {
			ids = append(ids, id)
		}
		sort.Ints(ids)
		slow, fast := -1, -1
		var slowM, fastM float64
		for _, id := range ids {
			m := report.Mean(p.perProc[id][idx])
			if len(p.perProc[id][idx]) == 0 {
				continue
			}
			if slow < 0 || m > slowM {
				slow, slowM = id, m
			}
			if fast < 0 || m < fastM {
				fast, fastM = id, m
			}
		}
		if slow >= 0 {
			set(op+"_slowest_process", float64(slow))
			set(op+"_slowest_process_mean_seconds", slowM)
			set(op+"_fastest_process", float64(fast))
			set(op+"_fastest_process_mean_seconds", fastM)
		}
	}
}

// Headline, on rank 0 once the metrics are merged, records the figures
// that are lists as arrays (metric_arrays): per checkpoint, the slowest
// and the fastest process's duration; per simulated process (index =
// process id), its mean save and load duration over the checkpoints.
func (p *mlperfCheckpoint) Headline(res *report.PhaseResult) {
	a := map[string][]float64{}
	put := func(name string, v []float64) {
		if len(v) > 0 {
			a[name] = append([]float64(nil), v...)
		}
	}
	put("save_ckpt_seconds", p.saveMax)
	put("save_ckpt_min_seconds", p.saveMin)
	put("load_ckpt_seconds", p.loadMax)
	put("load_ckpt_min_seconds", p.loadMin)
	n := 0
	for id := range p.perProc {
		n = max(n, id+1)
	}
	for idx, op := range []string{"save", "load"} {
		means := make([]float64, n)
		any := false
		for id, d := range p.perProc {
			if len(d[idx]) > 0 {
				means[id], any = report.Mean(d[idx]), true
			}
		}
		if any {
			a["process_"+op+"_mean_seconds"] = means
		}
	}
	if len(a) > 0 {
		res.MetricArrays = a
	}
}

// mlperfStats is what DLIO reports: the mean and population standard
// deviation of the per-checkpoint durations, and of the per-checkpoint
// throughputs (the checkpoint's GiB over its duration).
func mlperfStats(durs []float64, bytes float64) (dMean, dStd, tMean, tStd float64) {
	thr := make([]float64, len(durs))
	for i, d := range durs {
		if d > 0 {
			thr[i] = bytes / (1 << 30) / d
		}
	}
	return report.Mean(durs), report.Stdev(durs), report.Mean(thr), report.Stdev(thr)
}

// MetricLines returns the figures of merit as MLPerf Storage prints them,
// computed from the phase's manifest entry (rank 0's metrics).
func (p *mlperfCheckpoint) MetricLines(res *report.PhaseResult) []string {
	return mlperfMetricLines(res)
}

func mlperfMetricLines(res *report.PhaseResult) []string {
	m := res.Metrics
	if m == nil || m["checkpoint_bytes"] == 0 {
		return nil
	}
	const rule = "[METRIC] =========================================================="
	out := []string{rule, fmt.Sprintf("[METRIC] Number of Simulated Accelerators: %d", int(m["simulated_accelerators"]))}
	for _, op := range []struct{ key, word string }{{"save", "save"}, {"load", "load"}} {
		durs := res.MetricArrays[op.key+"_ckpt_seconds"]
		if len(durs) == 0 {
			continue
		}
		dm, ds, tm, ts := mlperfStats(durs, m["checkpoint_bytes"])
		out = append(out,
			fmt.Sprintf("[METRIC] Checkpoint %s duration (seconds): %.4f (%.4f)", op.word, dm, ds),
			fmt.Sprintf("[METRIC] Checkpoint %s I/O Throughput (GiB/second): %.4f (%.4f)", op.word, tm, ts))
	}
	return append(out, rule)
}

// pause waits time_between_checkpoints, as DLIO does before each save
// and each load: no op is timed, the checkpoint's duration starts after
// it, and the phase's wall time leaves it out (Env.Idle);
// metrics.idle_seconds says how much there was.
func (p *mlperfCheckpoint) pause(ctx context.Context, env *phases.Env) error {
	d := time.Duration(p.cfg.TimeBetween)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	start := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	idle := time.Since(start)
	env.Idle(idle)
	p.idle += idle.Seconds()
	return nil
}

// Memory: the processes' content pools share buffer_budget.
func (p *mlperfCheckpoint) Memory(ranks int) (int64, string) {
	procs := (p.cfg.processes() + ranks - 1) / max(ranks, 1)
	return int64(p.cfg.BufferBudget) + 16<<20 + p.cfg.objMemory(procs), "buffer_budget"
}

// Teardown leaves the checkpoints of a completed Run in place with keep =
// true (the default), as DLIO does (the run directory's cleanup removes
// them at the end of the run, unless [plan] keep = true), and removes
// those of a failed one, or of any with keep = false (each rank the files
// of its own processes; the emptied directories go with the run
// directory).
func (p *mlperfCheckpoint) Teardown(ctx context.Context, env *phases.Env) error {
	var first error
	for _, pr := range p.procs {
		for _, r := range pr.readers {
			r.closeAll()
		}
		if p.kept() {
			continue
		}
		for _, w := range pr.writers {
			if w.obj != nil {
				if err := w.removeMade(); err != nil && first == nil {
					first = env.Errorf("teardown: %w", err)
				}
				continue
			}
			for _, f := range w.files {
				path := w.paths[f]
				if err := pio.Unlink(w.pin.Fd(), path); err != nil && err != unix.ENOENT && first == nil {
					first = env.Errorf("teardown: %w", pio.NewOpError("unlink", path, err))
				}
			}
		}
	}
	p.closePins()
	p.closePersist()
	return first
}

// kept tells whether the checkpoints stay after Teardown.
func (p *mlperfCheckpoint) kept() bool { return p.ok && p.cfg.Keep || p.pers != nil }

// Outputs are the checkpoint directories of a completed Run, with keep.
func (p *mlperfCheckpoint) Outputs() []string {
	if !p.kept() || p.pers != nil {
		return nil // persistent ones are outside the run directory
	}
	return p.dirs
}

func (p *mlperfCheckpoint) Verify(ctx context.Context, env *phases.Env) error {
	return p.completePersist(ctx, env)
}

// closePins closes the checkpoint directories' handles (the files stay
// for the run directory's cleanup when the run completed).
func (p *mlperfCheckpoint) closePins() {
	seen := map[*pio.Dir]bool{}
	for _, pr := range p.procs {
		for _, w := range pr.writers {
			if w.pin != nil && !seen[w.pin] {
				seen[w.pin] = true
				w.pin.Close()
			}
			w.pin = nil
		}
		for _, r := range pr.readers {
			r.pin = nil
		}
	}
}
