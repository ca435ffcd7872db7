package dataload

import (
	"bufio"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

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
func TrainWorkloadNames() []string { return slices.Sorted(maps.Keys(trainWorkloads)) }

// LookupTrainPreset returns the preset of workload on accelerator.
func LookupTrainPreset(workload, accelerator string) (TrainPreset, error) {
	w, ok := trainWorkloads[workload]
	if !ok {
		return TrainPreset{}, &PresetError{Key: "workload", Msg: fmt.Sprintf("unknown workload %q (allowed: %s)", workload, strings.Join(TrainWorkloadNames(), ", "))}
	}
	if !slices.Contains(trainAccelerators, accelerator) {
		return TrainPreset{}, &PresetError{Key: "accelerator", Msg: fmt.Sprintf("unknown accelerator %q (allowed: %s)", accelerator, strings.Join(trainAccelerators, ", "))}
	}
	p := TrainPreset{Workload: workload, Accelerator: accelerator, RecordSize: w.record, SamplesPerFile: w.spf, BatchSize: w.batch, ReadThreads: w.threads, AUThreshold: w.au}
	if accelerator == "b200" && w.recordB200 > 0 {
		p.RecordSize, p.BatchSize = w.recordB200, w.batchB200
	}
	ct, ok := w.compute[accelerator]
	if !ok {
		return p, &PresetError{Key: "accelerator", NoComputeTime: true,
			Msg: fmt.Sprintf("MLPerf Storage gives no %s compute time for %s (allowed: %s); set compute_time", accelerator, workload, strings.Join(slices.Sorted(maps.Keys(w.compute)), ", "))}
	}
	p.ComputeTime = ct
	return p, nil
}

// PresetError is a workload or accelerator the training table does not
// have. With NoComputeTime, the pair exists but MLPerf Storage publishes no
// compute time for it: the preset returned beside the error has every
// figure but ComputeTime, enough for sizes (datasize) or for a run that
// sets compute_time itself.
type PresetError struct {
	Key           string // workload | accelerator
	Msg           string
	NoComputeTime bool
}

func (e *PresetError) Error() string { return e.Msg }

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
