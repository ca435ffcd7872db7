package phases

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	pio "github.com/prism-hpc/prism/io"
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

func registerMLPerf(r *Registry) {
	r.Register(Kind{Name: "mlperf_checkpoint", Family: "checkpoint",
		Summary: "MLPerf Storage checkpointing: N checkpoint writes (fsync) then N reads of a llama3 model by simulated processes, DLIO's files and sizes (14 bytes/param, ZeRO-3 or ZeRO-1 + pipeline), cache flush between; [METRIC] lines; ops open, write, write_header, fsync, close, save_file, read, read_header, load_file",
		New:     func() Phase { return &mlperfCheckpoint{cfg: defaultMLPerfConfig()} }})
}

type mlperfConfig struct {
	Model        string  `toml:"model" doc:"llama3-8b | llama3-70b | llama3-405b | llama3-1t (MLPerf Storage's LLM table)"`
	Processes    int     `toml:"processes" doc:"simulated accelerators, a multiple of TP x PP (1, 8, 256, 512); 0 = the closed run's 8, 64, 512, 1024; spread over the ranks"`
	NumWrite     int     `toml:"num_checkpoints_write" doc:"checkpoints written, each in its own directory, all kept until the phase ends (MLPerf: 10)"`
	NumRead      int     `toml:"num_checkpoints_read" doc:"checkpoints read after the writes and a cache flush, cycling through those written (MLPerf: 10)"`
	Scale        float64 `toml:"scale" doc:"fraction of the full checkpoint (every tensor scaled, rounded up): 1 = MLPerf's size, e.g. 0.01 on a small machine"`
	Fsync        bool    `toml:"fsync" doc:"fsync every file written (MLPerf requires it)"`
	WriteSize    Size    `toml:"write_size" doc:"bytes per write(2) of tensor data, a multiple of 4KiB"`
	ReadSize     Size    `toml:"read_size" doc:"bytes per read(2) of tensor data, a multiple of 4KiB"`
	Verify       bool    `toml:"verify" doc:"check every tensor read against its CRC-32; outside a checkpoint's duration when a process's checkpoint fits its share of buffer_budget, else as it is read"`
	Seed         int64   `toml:"seed" doc:"seed of the tensor content"`
	BufferBudget Size    `toml:"buffer_budget" doc:"memory per rank for generated write data and for read data checked after each checkpoint, shared by its simulated processes"`
}

func defaultMLPerfConfig() mlperfConfig {
	return mlperfConfig{Model: "llama3-8b", NumWrite: 10, NumRead: 10, Scale: 1, Fsync: true, WriteSize: 4 << 20, ReadSize: 4 << 20,
		Verify: true, Seed: 1, BufferBudget: 256 << 20}
}

// Validate checks the keys against the model's parallelism.
func (c *mlperfConfig) Validate() error {
	m, ok := ckpt.MLPerfModels[c.Model]
	if !ok {
		return &KeyError{Key: "model", Msg: fmt.Sprintf("unknown model %q (allowed: %s)", c.Model, strings.Join(ckpt.MLPerfModelNames(), ", "))}
	}
	mp := m.TP * m.PP
	switch {
	case c.Processes < 0 || c.Processes > 1<<20 || c.Processes > 0 && c.Processes%mp != 0:
		return &KeyError{Key: "processes", Msg: fmt.Sprintf("%d: want a multiple of %s's TP x PP = %d (0 = the closed run's %d)", c.Processes, c.Model, mp, m.Processes())}
	case c.NumWrite < 0 || c.NumWrite > 1000:
		return &KeyError{Key: "num_checkpoints_write", Msg: fmt.Sprintf("%d out of range (0 .. 1000)", c.NumWrite)}
	case c.NumRead < 0 || c.NumRead > 1000:
		return &KeyError{Key: "num_checkpoints_read", Msg: fmt.Sprintf("%d out of range (0 .. 1000)", c.NumRead)}
	case c.NumWrite == 0 && c.NumRead == 0:
		return &KeyError{Key: "num_checkpoints_write", Msg: "nothing to do: num_checkpoints_write and num_checkpoints_read are both 0"}
	case !(c.Scale > 0 && c.Scale <= 1):
		return &KeyError{Key: "scale", Msg: fmt.Sprintf("%v out of range (0 < scale <= 1)", c.Scale)}
	case c.BufferBudget < 1<<20 || c.BufferBudget > 1<<40:
		return &KeyError{Key: "buffer_budget", Msg: fmt.Sprintf("%s out of range (1MiB .. 1TiB)", c.BufferBudget)}
	}
	if err := validateIOSize("write_size", c.WriteSize); err != nil {
		return err
	}
	return validateIOSize("read_size", c.ReadSize)
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
	set     *report.Set
	recs    ioRecs
	writers []*writer // one per checkpoint written
	readers []*reader // one per checkpoint written, reading it
	buf     []byte
	inline  bool
	save    []float64 // this iteration's durations
	load    []float64
	err     error
}

func (p *mlperfCheckpoint) Config() any    { return &p.cfg }
func (p *mlperfCheckpoint) Fadvises() bool { return true }

// Footprint: every checkpoint written stays until the phase ends.
func (p *mlperfCheckpoint) Footprint(ranks int) Footprint {
	m := ckpt.MLPerfModels[p.cfg.Model]
	files, err := m.Files(p.cfg.processes(), p.cfg.Scale)
	if err != nil {
		return Footprint{}
	}
	var b int64
	for _, f := range files {
		b += f.Bytes()
	}
	n := int64(max(p.cfg.NumWrite, 1))
	r := int64(ranks)
	return Footprint{Files: (int64(len(files))*n + r - 1) / r, Bytes: (b*n + r - 1) / r}
}

func (p *mlperfCheckpoint) Setup(ctx context.Context, env *Env) error {
	c := &p.cfg
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
	gens := max(c.NumWrite, 1)
	p.dirs = make([]string, gens)
	for k := range p.dirs {
		p.dirs[k] = filepath.Join(env.Dir, fmt.Sprintf("global_epoch1_step%d", k+1))
		if err := os.MkdirAll(p.dirs[k], 0o755); err != nil {
			return env.Errorf("setup: mkdir %s: %w%s", p.dirs[k], err, pio.Remedy(err))
		}
	}
	var local []int
	for id := env.Rank; id < p.nproc; id += env.Size {
		local = append(local, id)
	}
	share := int64(c.BufferBudget) / int64(max(len(local), 1))
	p.procs = p.procs[:0]
	spec := writeSpec{kind: "mlperf", format: ckpt.FormatTorch, fsync: c.Fsync, writeSize: int64(c.WriteSize)}
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
		pr.pool = ckpt.NewPool(seed, min(share, pr.bytes), int64(c.WriteSize))
		for k := 0; k < gens; k++ {
			l := ckpt.NewTorchFiles(pr.files, seed, 1)
			w := &writer{spec: spec, layout: l, dir: p.dirs[k], gen: generation(env, fmt.Sprintf("mlperf/%d/%d", id, k)), pool: pr.pool, recs: &pr.recs}
			l.Checksum(pr.pool, w.gen, nil)
			for f := range l.Files {
				l.Build(f, true)
				w.files = append(w.files, f)
			}
			w.setPaths()
			pr.writers = append(pr.writers, w)
			r := &reader{l: l, dir: w.dir, align: 1, checks: map[int]*fileCheck{}, recs: &pr.recs}
			for f := range l.Files {
				r.whole(f, int64(c.ReadSize))
			}
			pr.readers = append(pr.readers, r)
		}
		// One buffer per process, shared by its checkpoints' reads: the
		// whole checkpoint when it fits the process's share, else one read.
		var total, maxN int64
		for _, op := range pr.readers[0].ops {
			total += op.n
			maxN = max(maxN, op.n)
		}
		pr.inline = total > share
		if pr.inline {
			pr.buf = pio.AlignedBuffer(int(maxN), pio.DirectAlign)
		} else {
			pr.buf = pio.AlignedBuffer(int(total), pio.DirectAlign)
		}
		for _, r := range pr.readers {
			r.planWith(pr.inline, pr.buf)
		}
		p.procs = append(p.procs, pr)
	}
	if c.NumWrite == 0 {
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
	return nil
}

func (pr *mlpProc) writeCheckpoint(ctx context.Context, env *Env, k int) error {
	w := pr.writers[k]
	for _, f := range w.files {
		if err := w.writeFile(ctx, env, f); err != nil {
			return err
		}
	}
	return nil
}

func (pr *mlpProc) readCheckpoint(ctx context.Context, env *Env, k int, verify bool) (time.Duration, error) {
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
func (p *mlperfCheckpoint) step(ctx context.Context, env *Env, fn func(*mlpProc) (time.Duration, error)) (slowest, fastest float64, err error) {
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
	flag := []int64{0}
	if local != nil {
		flag[0] = 1
	}
	if err := env.Comm.AllreduceInt64(ctx, spmd.Max, flag); err != nil {
		return 0, 0, firstErr(local, err)
	}
	if local != nil {
		return 0, 0, local
	}
	if flag[0] != 0 {
		return 0, 0, errStopped
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

func (p *mlperfCheckpoint) Run(ctx context.Context, env *Env) error {
	c := &p.cfg
	for _, pr := range p.procs {
		pr.save, pr.load = pr.save[:0], pr.load[:0]
		// Each process times into a set of its own, watched by the stall
		// monitor while it runs and merged into the rank's at the end.
		pr.set = env.NewSet()
		pr.recs = newIORecs(pr.set.Op)
	}
	defer func() {
		for _, pr := range p.procs {
			env.Merge(pr.set)
		}
	}()
	var saveMax, saveMin, loadMax, loadMin []float64
	for k := 0; k < c.NumWrite; k++ {
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
	gens := max(c.NumWrite, 1)
	for i := 0; i < c.NumRead; i++ {
		k := i % gens
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
func (p *mlperfCheckpoint) flush(ctx context.Context, env *Env) error {
	if err := env.Comm.Barrier(ctx); err != nil {
		return err
	}
	var local error
	switch env.Cache {
	case "drop_caches":
		if env.Comm.LocalRank() == 0 {
			local = pio.DropCaches()
		}
	case "fadvise":
		for _, pr := range p.procs {
			for _, r := range pr.readers {
				if local = r.evict(env); local != nil {
					break
				}
			}
		}
	}
	flag := []int64{0}
	if local != nil {
		flag[0] = 1
	}
	if err := env.Comm.AllreduceInt64(ctx, spmd.Max, flag); err != nil {
		return firstErr(local, err)
	}
	if local != nil {
		return env.Errorf("cache flush between writes and reads: %w", local)
	}
	if flag[0] != 0 {
		return errStopped
	}
	return nil
}

func (p *mlperfCheckpoint) setMetrics(env *Env) {
	set := env.SetMetric
	set("simulated_accelerators", float64(p.nproc))
	set("checkpoint_bytes", float64(p.ckptBytes))
	full, _ := p.m.CheckpointBytes(p.nproc, 1)
	set("checkpoint_full_gib", float64(full)/(1<<30))
	set("scale", p.cfg.Scale)
	set("fsync", b2f(p.cfg.Fsync))
	set("save_checkpoints", float64(len(p.saveMax)))
	set("load_checkpoints", float64(len(p.loadMax)))
	for i := range p.saveMax {
		set(fmt.Sprintf("save_ckpt_%03d_seconds", i), p.saveMax[i])
		set(fmt.Sprintf("save_ckpt_%03d_min_seconds", i), p.saveMin[i])
	}
	for i := range p.loadMax {
		set(fmt.Sprintf("load_ckpt_%03d_seconds", i), p.loadMax[i])
		set(fmt.Sprintf("load_ckpt_%03d_min_seconds", i), p.loadMin[i])
	}
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
			m := mean(p.perProc[id][idx])
			if len(p.perProc[id][idx]) == 0 {
				continue
			}
			if slow < 0 || m > slowM {
				slow, slowM = id, m
			}
			if fast < 0 || m < fastM {
				fast, fastM = id, m
			}
			if len(ids) <= 64 {
				set(fmt.Sprintf("process_%04d_%s_mean_seconds", id, op), m)
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

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
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
	return mean(durs), stdev(durs), mean(thr), stdev(thr)
}

func stdev(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	m := mean(v)
	var s float64
	for _, x := range v {
		s += (x - m) * (x - m)
	}
	return math.Sqrt(s / float64(len(v)))
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
		n := int(m[op.key+"_checkpoints"])
		if n == 0 {
			continue
		}
		durs := make([]float64, n)
		for i := range durs {
			durs[i] = m[fmt.Sprintf("%s_ckpt_%03d_seconds", op.key, i)]
		}
		dm, ds, tm, ts := mlperfStats(durs, m["checkpoint_bytes"])
		out = append(out,
			fmt.Sprintf("[METRIC] Checkpoint %s duration (seconds): %.4f (%.4f)", op.word, dm, ds),
			fmt.Sprintf("[METRIC] Checkpoint %s I/O Throughput (GiB/second): %.4f (%.4f)", op.word, tm, ts))
	}
	return append(out, rule)
}

// Teardown removes every checkpoint the phase wrote.
func (p *mlperfCheckpoint) Teardown(ctx context.Context, env *Env) error {
	var first error
	for _, pr := range p.procs {
		for _, w := range pr.writers {
			for _, f := range w.files {
				path := w.paths[f]
				if err := pio.Unlink(unix.AT_FDCWD, path); err != nil && err != unix.ENOENT && first == nil {
					first = env.Errorf("teardown: unlink %s: %w", path, err)
				}
			}
		}
		for _, r := range pr.readers {
			r.closeAll()
		}
	}
	return first
}

func (p *mlperfCheckpoint) Verify(ctx context.Context, env *Env) error { return nil }
