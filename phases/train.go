package phases

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/report"
	"github.com/prism-hpc/prism/spmd"
)

// train emulates MLPerf Storage's training benchmark (DLIO): every rank
// runs accelerators_per_rank simulated accelerators; each consumes epochs
// of batches of batch_size samples, "computing" compute_time per batch
// (a sleep) while read_threads reader goroutines prefetch its next samples
// into a bounded queue of prefetch batches. Samples are shuffled every
// epoch (permutation = f(seed, epoch)) and dealt round-robin to all
// accelerators of the job, DistributedSampler style, dropping the last
// incomplete batch.
//
// Accelerator utilisation, per epoch and accelerator, is the compute time
// of its steps over the time they took, the first step of the epoch
// excluded (it waits for a cold pipeline): AU% = Σ compute / Σ elapsed
// over every accelerator of the job. The [METRIC] lines give the mean and
// (population) standard deviation of the per-epoch figures over epochs,
// as DLIO prints them; with one epoch the deviation is 0. Throughput is
// samples per second summed over accelerators; I/O throughput is that
// times the record size.

// TrainPreset is a workload of MLPerf Storage's training table on one
// accelerator type.
type TrainPreset struct {
	Workload       string
	Accelerator    string
	RecordSize     int64   // bytes per sample
	SamplesPerFile int     // samples in each file
	BatchSize      int     // samples per step
	ReadThreads    int     // reader threads per accelerator
	ComputeTime    float64 // seconds per batch
	AUThreshold    float64 // percent
}

type trainWorkload struct {
	record, recordB200 int64
	spf                int
	batch, batchB200   int
	threads            int
	compute            map[string]float64
	au                 float64
}

// trainWorkloads are MLPerf Storage v2.0's closed training workloads.
var trainWorkloads = map[string]trainWorkload{
	"unet3d":    {record: 146_600_628, spf: 1, batch: 7, threads: 4, compute: map[string]float64{"a100": 0.636, "h100": 0.323, "b200": 0.162}, au: 90},
	"resnet50":  {record: 114_660, spf: 1251, batch: 400, threads: 8, compute: map[string]float64{"a100": 0.435, "h100": 0.224}, au: 90},
	"cosmoflow": {record: 2_828_486, spf: 1, batch: 1, threads: 4, compute: map[string]float64{"a100": 0.00551, "h100": 0.00350}, au: 70},
	"retinanet": {record: 153_600, recordB200: 322_957, spf: 1, batch: 16, batchB200: 24, threads: 8, compute: map[string]float64{"a100": 0.210, "h100": 0.180, "b200": 0.04755}, au: 85},
}

var trainAccelerators = []string{"a100", "h100", "b200"}

// TrainWorkloadNames lists the presets.
func TrainWorkloadNames() []string { return sortedKeys(trainWorkloads) }

// LookupTrainPreset returns the preset of workload on accelerator.
func LookupTrainPreset(workload, accelerator string) (TrainPreset, error) {
	w, ok := trainWorkloads[workload]
	if !ok {
		return TrainPreset{}, fmt.Errorf("unknown workload %q (allowed: %s)", workload, strings.Join(TrainWorkloadNames(), ", "))
	}
	if !contains(trainAccelerators, accelerator) {
		return TrainPreset{}, fmt.Errorf("unknown accelerator %q (allowed: %s)", accelerator, strings.Join(trainAccelerators, ", "))
	}
	ct, ok := w.compute[accelerator]
	if !ok {
		return TrainPreset{}, fmt.Errorf("MLPerf Storage gives no %s compute time for %s (allowed: %s); set compute_time", accelerator, workload, strings.Join(sortedKeys(w.compute), ", "))
	}
	p := TrainPreset{Workload: workload, Accelerator: accelerator, RecordSize: w.record, SamplesPerFile: w.spf, BatchSize: w.batch, ReadThreads: w.threads, ComputeTime: ct, AUThreshold: w.au}
	if accelerator == "b200" && w.recordB200 > 0 {
		p.RecordSize, p.BatchSize = w.recordB200, w.batchB200
	}
	return p, nil
}

// Datasize is the dataset MLPerf Storage requires of a training run.
type Datasize struct {
	Samples    int64 // the minimum number of samples
	StepBound  int64 // 500 steps x batch x accelerators
	MemBound   int64 // hosts x memory x 5 / record size
	Files      int64
	Bytes      int64
	RecordSize int64
}

// MLPerfDatasize is MLPerf Storage's dataset rule: at least 500 steps of
// every accelerator, and at least five times the memory of every host, so
// the page cache cannot hold the dataset.
func MLPerfDatasize(p TrainPreset, accelerators, hosts int, memory int64) Datasize {
	d := Datasize{RecordSize: p.RecordSize}
	d.StepBound = 500 * int64(p.BatchSize) * int64(accelerators)
	d.MemBound = int64(math.Ceil(float64(hosts) * float64(memory) * 5 / float64(p.RecordSize)))
	d.Samples = max(d.StepBound, d.MemBound)
	spf := int64(max(p.SamplesPerFile, 1))
	d.Files = (d.Samples + spf - 1) / spf
	d.Bytes = d.Files * spf * p.RecordSize
	return d
}

// HostMemory returns MemTotal of /proc/meminfo in bytes.
func HostMemory() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/meminfo: %v", err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("/proc/meminfo has no MemTotal")
}

type trainConfig struct {
	Workload     string    `toml:"workload" doc:"unet3d | resnet50 | cosmoflow | retinanet: MLPerf Storage's record size, samples per file, batch, threads, compute time and AU threshold"`
	Accelerator  string    `toml:"accelerator" doc:"a100 | h100 | b200: the simulated accelerator's compute time per batch"`
	AccelPerRank int       `toml:"accelerators_per_rank" doc:"simulated accelerators on each rank"`
	NumFiles     int       `toml:"num_files" doc:"files of the generated dataset; 0 = MLPerf's minimum for this job (500 steps of every accelerator, 5x the memory of every host; see prism datasize)"`
	RecordSize   Size      `toml:"record_size" doc:"bytes per sample; 0 = the preset's"`
	SamplesPer   int       `toml:"samples_per_file" doc:"samples in each file; 0 = the preset's"`
	BatchSize    int       `toml:"batch_size" doc:"samples per step; 0 = the preset's"`
	ReadThreads  int       `toml:"read_threads" doc:"reader goroutines per accelerator; 0 = the preset's"`
	Prefetch     int       `toml:"prefetch" doc:"batches each accelerator's readers may run ahead (the bounded queue's depth)"`
	ComputeTime  *Duration `toml:"compute_time" doc:"simulated compute per batch; unset = the preset's for the accelerator"`
	Epochs       int       `toml:"epochs" doc:"passes over the dataset"`
	Steps        int       `toml:"steps" doc:"at most this many steps per epoch (0 = all the dataset gives)"`
	Seed         int64     `toml:"seed" doc:"seed of the sample shuffle (permutation = f(seed, epoch)) and of the generated content"`
	Direct       bool      `toml:"direct" doc:"read samples with O_DIRECT"`
	Dataset      string    `toml:"dataset" doc:"generate (files of the workload written in setup, untimed) | latest (the latest create_dataset's files, cut into record_size samples)"`
	AUThreshold  *float64  `toml:"au_threshold" doc:"percent for train_au_meet_expectation; unset = the preset's (unet3d, resnet50 90, cosmoflow 70, retinanet 85)"`
}

func defaultTrainConfig() trainConfig {
	return trainConfig{Workload: "unet3d", Accelerator: "h100", AccelPerRank: 1, Prefetch: 2, Epochs: 1, Seed: 1, Dataset: "generate"}
}

// resolved returns the preset with the plan's overrides applied.
func (c *trainConfig) resolved() (TrainPreset, error) {
	p, err := LookupTrainPreset(c.Workload, c.Accelerator)
	if err != nil && c.ComputeTime != nil && strings.Contains(err.Error(), "no ") {
		w := trainWorkloads[c.Workload]
		p = TrainPreset{Workload: c.Workload, Accelerator: c.Accelerator, RecordSize: w.record, SamplesPerFile: w.spf, BatchSize: w.batch, ReadThreads: w.threads, AUThreshold: w.au}
		err = nil
	}
	if err != nil {
		return p, err
	}
	if c.RecordSize > 0 {
		p.RecordSize = int64(c.RecordSize)
	}
	if c.SamplesPer > 0 {
		p.SamplesPerFile = c.SamplesPer
	}
	if c.BatchSize > 0 {
		p.BatchSize = c.BatchSize
	}
	if c.ReadThreads > 0 {
		p.ReadThreads = c.ReadThreads
	}
	if c.ComputeTime != nil {
		p.ComputeTime = time.Duration(*c.ComputeTime).Seconds()
	}
	if c.AUThreshold != nil {
		p.AUThreshold = *c.AUThreshold
	}
	return p, nil
}

func (c *trainConfig) Validate() error {
	if _, err := c.resolved(); err != nil {
		key := "workload"
		if strings.Contains(err.Error(), "accelerator") || strings.Contains(err.Error(), "compute time") {
			key = "accelerator"
		}
		return &KeyError{Key: key, Msg: err.Error()}
	}
	switch {
	case c.AccelPerRank < 1 || c.AccelPerRank > 1024:
		return &KeyError{Key: "accelerators_per_rank", Msg: fmt.Sprintf("%d out of range (1 .. 1024)", c.AccelPerRank)}
	case c.NumFiles < 0 || c.NumFiles > maxDatasetFiles:
		return &KeyError{Key: "num_files", Msg: fmt.Sprintf("%d out of range (0 .. %d)", c.NumFiles, maxDatasetFiles)}
	case c.RecordSize < 0 || c.RecordSize > 1<<32:
		return &KeyError{Key: "record_size", Msg: fmt.Sprintf("%s out of range (1 .. 4GiB)", c.RecordSize)}
	case c.SamplesPer < 0 || c.SamplesPer > 1_000_000:
		return &KeyError{Key: "samples_per_file", Msg: fmt.Sprintf("%d out of range (1 .. 1000000)", c.SamplesPer)}
	case c.BatchSize < 0 || c.BatchSize > 1_000_000:
		return &KeyError{Key: "batch_size", Msg: fmt.Sprintf("%d out of range (1 .. 1000000)", c.BatchSize)}
	case c.ReadThreads < 0 || c.ReadThreads > 1024:
		return &KeyError{Key: "read_threads", Msg: fmt.Sprintf("%d out of range (1 .. 1024)", c.ReadThreads)}
	case c.Prefetch < 1 || c.Prefetch > 1024:
		return &KeyError{Key: "prefetch", Msg: fmt.Sprintf("%d out of range (1 .. 1024)", c.Prefetch)}
	case c.ComputeTime != nil && time.Duration(*c.ComputeTime) > time.Hour:
		return &KeyError{Key: "compute_time", Msg: fmt.Sprintf("%s is more than an hour per batch", *c.ComputeTime)}
	case c.Epochs < 1 || c.Epochs > 10_000:
		return &KeyError{Key: "epochs", Msg: fmt.Sprintf("%d out of range (1 .. 10000)", c.Epochs)}
	case c.Steps < 0:
		return &KeyError{Key: "steps", Msg: fmt.Sprintf("%d: negative", c.Steps)}
	case c.Dataset != "generate" && c.Dataset != "latest":
		return &KeyError{Key: "dataset", Msg: fmt.Sprintf("unknown dataset %q (allowed: generate, latest)", c.Dataset)}
	case c.AUThreshold != nil && !(*c.AUThreshold >= 0 && *c.AUThreshold <= 100):
		return &KeyError{Key: "au_threshold", Msg: fmt.Sprintf("%v out of range (0 .. 100)", *c.AUThreshold)}
	}
	return nil
}

// trainFile is one file of the training dataset.
type trainFile struct {
	path  pio.Path
	size  int64
	first int64 // index of its first sample
	n     int64 // samples in it
}

type train struct {
	cfg     trainConfig
	pre     TrainPreset
	files   []trainFile
	samples int64
	steps   int // per epoch and accelerator
	accels  []*trainAccel
	align   int64
	// per epoch, summed over this rank's accelerators
	compute, elapsed, rate []float64
}

// trainAccel is one simulated accelerator of this rank.
type trainAccel struct {
	id      int       // global
	lists   [][]int64 // per epoch, the samples it consumes, in order
	readers []*trainReader
}

type trainReader struct {
	set *report.Set
	rec *report.Recorder
	buf []byte
}

func (p *train) Config() any    { return &p.cfg }
func (p *train) Fadvises() bool { return true }

func (p *train) ExpectedOps() int64 {
	return int64(len(p.accels)) * int64(p.cfg.Epochs) * int64(p.steps) * int64(p.pre.BatchSize)
}

// Footprint is the generated dataset's share of one rank, when num_files
// is given.
func (p *train) Footprint(ranks int) Footprint {
	pre, err := p.cfg.resolved()
	if err != nil || p.cfg.Dataset != "generate" || p.cfg.NumFiles == 0 {
		return Footprint{}
	}
	f := int64((p.cfg.NumFiles + ranks - 1) / ranks)
	return Footprint{Files: f, Bytes: f * int64(pre.SamplesPerFile) * pre.RecordSize}
}

func (p *train) Setup(ctx context.Context, env *Env) error {
	c := &p.cfg
	pre, err := c.resolved()
	if err != nil {
		return env.Errorf("setup: %w", err)
	}
	p.pre = pre
	nacc := env.Size * c.AccelPerRank
	if c.Dataset == "latest" {
		ds, err := agreeDataset(ctx, env)
		if err != nil {
			return err
		}
		if ds == nil {
			return env.Errorf("setup: dataset = \"latest\" but no create_dataset ran before this phase")
		}
		p.useDataset(ds)
	} else if err := p.generate(ctx, env, nacc); err != nil {
		return err
	}
	if env.Cache == "fadvise" && !c.Direct {
		if err := p.evict(env); err != nil {
			return err
		}
	}
	// Deal every epoch's shuffled samples to the accelerators.
	per := p.samples / int64(nacc)
	p.steps = int(per / int64(pre.BatchSize))
	if c.Steps > 0 {
		p.steps = min(p.steps, c.Steps)
	}
	if p.steps < 2 {
		return env.Errorf("setup: %d samples over %d accelerators give %d steps of batch %d per epoch; need at least 2 (the first is excluded): raise num_files or lower batch_size", p.samples, nacc, p.steps, pre.BatchSize)
	}
	take := p.steps * pre.BatchSize
	p.accels = p.accels[:0]
	for a := 0; a < c.AccelPerRank; a++ {
		p.accels = append(p.accels, &trainAccel{id: env.Rank*c.AccelPerRank + a})
	}
	for e := 0; e < c.Epochs; e++ {
		order := datasetOrder(int(p.samples), "random", c.Seed, 1, e)
		for _, acc := range p.accels {
			l := make([]int64, 0, take)
			for j := acc.id; j < len(order) && len(l) < take; j += nacc {
				l = append(l, int64(order[j]))
			}
			acc.lists = append(acc.lists, l)
		}
	}
	p.align = 1
	if c.Direct {
		dir := filepath.Dir(p.files[0].path.String())
		if _, err := pio.CheckDirect(dir); err != nil {
			return env.Errorf("setup: %w", err)
		}
		p.align = pio.DirectAlign
		if a, err := pio.AlignmentOf(dir); err == nil && int64(a.Bytes) > p.align {
			p.align = int64(a.Bytes)
		}
	}
	bufLen := int((pre.RecordSize+p.align-1)/p.align*p.align + p.align)
	for _, acc := range p.accels {
		if len(acc.readers) != pre.ReadThreads || len(acc.readers[0].buf) != bufLen {
			acc.readers = make([]*trainReader, pre.ReadThreads)
			for t := range acc.readers {
				acc.readers[t] = &trainReader{buf: pio.AlignedBuffer(bufLen, max(int(p.align), pio.DirectAlign))}
			}
		}
	}
	return nil
}

// useDataset cuts the files of a create_dataset into record_size samples
// (a file shorter than a record is one sample).
func (p *train) useDataset(ds *dataset) {
	p.files = p.files[:0]
	p.samples = 0
	for _, f := range ds.Files {
		n := max(f.Size/p.pre.RecordSize, 1)
		p.files = append(p.files, trainFile{path: pio.MustPath(f.Path), size: f.Size, first: p.samples, n: n})
		p.samples += n
	}
}

// generate writes (untimed) this rank's share of the workload's files,
// skipping those an earlier iteration left complete.
func (p *train) generate(ctx context.Context, env *Env, nacc int) error {
	c, pre := &p.cfg, &p.pre
	nfiles := int64(c.NumFiles)
	if nfiles == 0 {
		hosts, err := countHosts(ctx, env)
		if err != nil {
			return err
		}
		mem, err := HostMemory()
		if err != nil {
			return env.Errorf("setup: num_files = 0 needs the host memory: %w", err)
		}
		nfiles = MLPerfDatasize(*pre, nacc, hosts, mem).Files
		if env.Rank == 0 {
			fmt.Fprintf(env.Log, "prism: %s %q: num_files = 0: MLPerf's minimum for %d accelerators on %d hosts of %s is %d files (%s)\n",
				env.Kind, env.Name, nacc, hosts, report.FormatBytes(mem), nfiles, report.FormatBytes(nfiles*int64(pre.SamplesPerFile)*pre.RecordSize))
		}
	}
	dir := filepath.Join(env.Dir, "data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return env.Errorf("setup: mkdir %s: %w%s", dir, err, pio.Remedy(err))
	}
	size := int64(pre.SamplesPerFile) * pre.RecordSize
	gen, err := pio.NewGenerator(pio.GenConfig{Kind: pio.GenDeterministic, Seed: uint64(c.Seed)})
	if err != nil {
		return env.Errorf("setup: %w", err)
	}
	p.files = p.files[:0]
	p.samples = 0
	var buf []byte
	for i := int64(0); i < nfiles; i++ {
		path := filepath.Join(dir, fmt.Sprintf("img_%07d.bin", i))
		p.files = append(p.files, trainFile{path: pio.MustPath(path), size: size, first: p.samples, n: int64(pre.SamplesPerFile)})
		p.samples += int64(pre.SamplesPerFile)
		if i%int64(env.Size) != int64(env.Rank) {
			continue
		}
		if st, err := os.Stat(path); err == nil && st.Size() == size {
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if buf == nil {
			buf = make([]byte, 1<<20)
		}
		if err := writeGenerated(path, size, gen, uint64(i), buf); err != nil {
			return env.Errorf("setup: %w%s", err, pio.Remedy(err))
		}
	}
	return nil
}

// evict writes back and drops from the page cache this rank's share of the
// files (drop_caches = "fadvise"), so the run starts cold.
func (p *train) evict(env *Env) error {
	for i := env.Rank; i < len(p.files); i += env.Size {
		path := p.files[i].path
		fd, err := pio.Open(unix.AT_FDCWD, path, unix.O_RDONLY, 0)
		if err != nil {
			return env.Errorf("setup: open %s: %w%s", path, err, pio.Remedy(err))
		}
		err = pio.Evict(fd)
		pio.Close(fd)
		if err != nil {
			return env.Errorf("setup: evict %s: %w", path, err)
		}
	}
	return nil
}

// writeGenerated writes stream of gen as the file path of size bytes.
func writeGenerated(path string, size int64, gen *pio.Generator, stream uint64, buf []byte) error {
	fd, err := pio.Open(unix.AT_FDCWD, pio.MustPath(path), unix.O_CREAT|unix.O_TRUNC|unix.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	for off := int64(0); off < size && err == nil; off += int64(len(buf)) {
		b := buf[:min(int64(len(buf)), size-off)]
		gen.FillStream(b, stream, off/pio.DefaultGenBlock)
		_, err = pio.PwriteFull(fd, b, off)
	}
	if cerr := pio.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// countHosts is the number of distinct hosts of the phase's ranks.
func countHosts(ctx context.Context, env *Env) (int, error) {
	all, err := env.Comm.Gather(ctx, 0, []byte(env.Host))
	if err != nil {
		return 0, err
	}
	n := []int64{0}
	if env.Rank == 0 {
		seen := map[string]bool{}
		for _, h := range all {
			seen[string(h)] = true
		}
		n[0] = int64(len(seen))
	}
	if err := env.Comm.AllreduceInt64(ctx, spmd.Max, n); err != nil {
		return 0, err
	}
	return int(n[0]), nil
}

func (p *train) Run(ctx context.Context, env *Env) error {
	E := p.cfg.Epochs
	p.compute, p.elapsed, p.rate = make([]float64, E), make([]float64, E), make([]float64, E)
	for _, acc := range p.accels {
		for _, r := range acc.readers {
			r.set = env.NewSet()
			r.rec = r.set.Op("read")
		}
	}
	defer func() {
		for _, acc := range p.accels {
			for _, r := range acc.readers {
				env.Merge(r.set)
			}
		}
	}()
	for e := 0; e < E; e++ {
		var wg sync.WaitGroup
		errs := make([]error, len(p.accels))
		type res struct{ compute, elapsed, samples float64 }
		out := make([]res, len(p.accels))
		for i, acc := range p.accels {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var r res
				r.compute, r.elapsed, r.samples, errs[i] = p.epoch(ctx, env, acc, e)
				out[i] = r
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		for _, r := range out {
			p.compute[e] += r.compute
			p.elapsed[e] += r.elapsed
			if r.elapsed > 0 {
				p.rate[e] += r.samples / r.elapsed
			}
		}
	}
	return nil
}

// epoch runs one accelerator through one epoch and returns its compute
// seconds, elapsed seconds and samples, the first step excluded.
func (p *train) epoch(ctx context.Context, env *Env, acc *trainAccel, e int) (compute, elapsed, samples float64, err error) {
	list := acc.lists[e]
	batch := p.pre.BatchSize
	ectx, cancel := context.WithCancel(ctx)
	defer cancel()
	queue := make(chan struct{}, p.cfg.Prefetch*batch)
	var next atomic.Int64
	var wg sync.WaitGroup
	rerrs := make([]error, len(acc.readers))
	for t, r := range acc.readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := ectx.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(list)) {
					return
				}
				if err := p.readSample(r, list[i]); err != nil {
					rerrs[t] = env.Errorf("epoch %d: accelerator %d: %w", e, acc.id, err)
					cancel()
					return
				}
				select {
				case queue <- struct{}{}:
				case <-done:
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); close(queue) }()
	defer func() {
		cancel()
		for range queue {
		}
		if rerr := errors.Join(rerrs...); rerr != nil {
			err = rerr
		}
	}()
	ct := time.Duration(p.pre.ComputeTime * float64(time.Second))
	var first time.Time
	done := ectx.Done()
	for step := 0; step < p.steps; step++ {
		for k := 0; k < batch; k++ {
			select {
			case _, ok := <-queue:
				if !ok {
					return 0, 0, 0, env.Errorf("epoch %d: accelerator %d: readers stopped", e, acc.id)
				}
			case <-done:
				return 0, 0, 0, ectx.Err()
			}
		}
		if ct > 0 {
			t := time.NewTimer(ct)
			select {
			case <-t.C:
			case <-done:
				t.Stop()
				return 0, 0, 0, ectx.Err()
			}
		}
		if step == 0 {
			first = time.Now()
			continue
		}
		compute += ct.Seconds()
		samples += float64(batch)
	}
	return compute, time.Since(first).Seconds(), samples, nil
}

// readSample is the read op: open, pread of the sample (the aligned range
// around it with direct = true), close.
func (p *train) readSample(r *trainReader, s int64) error {
	fi := sort.Search(len(p.files), func(i int) bool { return p.files[i].first+p.files[i].n > s })
	f := &p.files[fi]
	off := (s - f.first) * p.pre.RecordSize
	n := min(p.pre.RecordSize, f.size-off)
	if f.n == 1 {
		off, n = 0, f.size
	}
	aoff, need := off, n
	flags := unix.O_RDONLY
	if p.cfg.Direct {
		flags |= unix.O_DIRECT
		aoff = off / p.align * p.align
		need = (off + n + p.align - 1) / p.align * p.align
		need -= aoff
	}
	if need > int64(len(r.buf)) {
		need = int64(len(r.buf)) / p.align * p.align
	}
	start := r.rec.BeginOn(f.path.Name())
	fd, err := pio.Open(unix.AT_FDCWD, f.path, flags, 0)
	got := 0
	if err == nil {
		got, err = pio.PreadFull(fd, r.buf[:need], aoff)
		if err == pio.ErrShortIO && int64(got) >= off-aoff+n {
			err = nil
		}
		if cerr := pio.Close(fd); err == nil {
			err = cerr
		}
	}
	r.rec.Observe(start, int(n), err)
	if err != nil {
		return fmt.Errorf("read %s@%d: %w%s", f.path, off, err, pio.Remedy(err))
	}
	_ = got
	return nil
}

// Verify reduces the per-epoch figures over the ranks; rank 0 records the
// job's (metrics of other ranks would be summed into the result).
func (p *train) Verify(ctx context.Context, env *Env) error {
	E := p.cfg.Epochs
	v := make([]float64, 0, 3*E)
	v = append(append(append(v, p.compute...), p.elapsed...), p.rate...)
	if err := env.Comm.AllreduceFloat64(ctx, spmd.Sum, v); err != nil {
		return err
	}
	if env.Rank != 0 {
		return nil
	}
	au, thr, mib := make([]float64, E), make([]float64, E), make([]float64, E)
	for e := 0; e < E; e++ {
		if v[E+e] > 0 {
			au[e] = 100 * v[e] / v[E+e]
		}
		thr[e] = v[2*E+e]
		mib[e] = thr[e] * float64(p.pre.RecordSize) / (1 << 20)
	}
	set := env.SetMetric
	set("simulated_accelerators", float64(env.Size*p.cfg.AccelPerRank))
	set("au_percent", mean(au))
	set("au_stddev_percent", stdev(au))
	set("samples_per_sec", mean(thr))
	set("samples_per_sec_stddev", stdev(thr))
	set("io_mib_per_sec", mean(mib))
	set("io_mib_per_sec_stddev", stdev(mib))
	set("au_threshold_percent", p.pre.AUThreshold)
	set("epochs", float64(E))
	set("steps_per_epoch", float64(p.steps))
	set("batch_size", float64(p.pre.BatchSize))
	set("record_size_bytes", float64(p.pre.RecordSize))
	set("compute_time_seconds", p.pre.ComputeTime)
	set("dataset_files", float64(len(p.files)))
	set("dataset_samples", float64(p.samples))
	return nil
}

func (p *train) Teardown(ctx context.Context, env *Env) error { return nil }

// MetricLines prints the training figures of merit exactly as MLPerf
// Storage does: mean (standard deviation over epochs).
func (p *train) MetricLines(res *report.PhaseResult) []string {
	m := res.Metrics
	if m == nil || m["simulated_accelerators"] == 0 {
		return nil
	}
	verdict := "fail"
	if m["au_percent"] >= m["au_threshold_percent"] {
		verdict = "success"
	}
	return []string{
		fmt.Sprintf("[METRIC] Number of Simulated Accelerators: %d", int(m["simulated_accelerators"])),
		fmt.Sprintf("[METRIC] Training Accelerator Utilization [AU] (%%): %.4f (%.4f)", m["au_percent"], m["au_stddev_percent"]),
		fmt.Sprintf("[METRIC] Training Throughput (samples/second): %.4f (%.4f)", m["samples_per_sec"], m["samples_per_sec_stddev"]),
		fmt.Sprintf("[METRIC] Training I/O Throughput (MiB/second): %.4f (%.4f)", m["io_mib_per_sec"], m["io_mib_per_sec_stddev"]),
		"[METRIC] train_au_meet_expectation: " + verdict,
	}
}
