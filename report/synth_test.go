package report

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./report -run %s -update to create it)", err, t.Name())
	}
	if string(want) != string(got) {
		t.Errorf("%s differs from the golden file (go test ./report -update rewrites it)\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// The injected clock and host of every synthetic manifest.
var (
	synthStart = time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC)
	synthHost  = HostInfo{
		Hostname: "node001", CPUModel: "Test CPU 9000", CPUVendor: "Test", LogicalCores: 64, PhysicalCores: 32,
		MemoryBytes: 512 << 30, Kernel: "Linux 6.1.0-test", GoVersion: "go1.26", GOMAXPROCS: 64,
		Workdir: "/lustre/scratch/prism", FSType: "lustre", MountPoint: "/lustre/scratch",
		MountSource: "10.0.0.1@o2ib:/scratch", MountOptions: "rw,flock,lazystatfs",
		MPILibrary: "Open MPI v4.1.4", SlurmJobID: "424242",
	}
)

// opSpec describes one op type of a synthetic phase: n ops per rank per
// iteration with log-normal latencies around medianNs.
type opSpec struct {
	name     string
	n        int
	medianNs float64
	sigma    float64
	bytes    int64 // per op
}

// phaseSpec describes a synthetic phase at one rank count.
type phaseSpec struct {
	name, kind string
	ranks      int
	ops        []opSpec
	walls      []float64 // seconds per measured iteration
	slow       map[int]float64
	status     string
	err        string
	failedRank int
}

// synthPhase builds a PhaseResult the way the engine does (Fill over rank
// records and merged histograms), with latencies scaled by scale.
func synthPhase(rng *rand.Rand, s phaseSpec, scale float64) PhaseResult {
	pr := PhaseResult{Name: s.name, Kind: s.kind, Ranks: s.ranks, Status: StatusSkipped, Expect: []Verdict{}}
	if s.status == StatusSkipped {
		return pr
	}
	pr.Status, pr.StartedAt, pr.Params = StatusPassed, synthStart, map[string]string{"count": "100"}
	pr.Cache = CacheInfo{Requested: "auto", Applied: "drop_caches"}
	walls := make([]float64, len(s.walls))
	var total float64
	for i, w := range s.walls {
		walls[i] = w * scale
		total += walls[i]
	}
	hists := map[string]*hdr.Histogram{}
	var recs []RankRecord
	for r := 0; r < s.ranks; r++ {
		set := NewSet()
		f := 1.0
		if x, ok := s.slow[r]; ok {
			f = x
		}
		for _, op := range s.ops {
			rec := set.Op(op.name)
			for i := 0; i < op.n*len(walls); i++ {
				ns := op.medianNs * scale * f * math.Exp(op.sigma*rng.NormFloat64())
				rec.ObserveNs(int64(ns), op.bytes, nil)
			}
			if hists[op.name] == nil {
				hists[op.name] = NewHistogram()
			}
			hists[op.name].Merge(rec.Hist())
		}
		busy := total * 0.9 * f * (1 + 0.05*float64(r%3))
		recs = append(recs, NewRankRecord(r, fmt.Sprintf("node%03d", r/4+1), set, busy))
	}
	if err := Fill(&pr, recs, hists, walls); err != nil {
		panic(err)
	}
	pr.Timeline = synthTimeline(pr.OpsByType) // its own generator: the other samples stay as the golden files have them
	if s.status != "" {
		pr.Status, pr.Error = s.status, s.err
		rank := s.failedRank
		pr.FailedRank = &rank
		// The failed rank's row, set after Fill as a rank's error is:
		// the hosts' sums stay as the golden files have them.
		var rows []RankResult
		for _, r := range pr.PerRank.All() {
			rows = append(rows, r)
		}
		rows[rank].Error, rows[rank].Errors = s.err, 1
		pr.PerRank = RowsOf(rows...)
		pr.Errors = 1
	}
	return pr
}

// synthTimeline spreads each op type's ops and bytes over six 1 s
// intervals, with a dip in the fourth.
func synthTimeline(ops map[string]OpStats) *Timeline {
	const n = 6
	rng := rand.New(rand.NewPCG(uint64(len(ops)), 3))
	t := &Timeline{IntervalSeconds: 1, Ops: map[string][]int64{}}
	for _, op := range sortedOps(ops) {
		st := ops[op]
		if st.Ops == 0 {
			continue
		}
		o, b := make([]int64, n), make([]int64, n)
		w := []float64{1, 1.1, 0.9, 0.3, 1.2, 0.5}
		for i := range o {
			f := w[i] * (0.9 + 0.2*rng.Float64()) / 5
			o[i], b[i] = int64(float64(st.Ops)*f), int64(float64(st.Bytes)*f)
		}
		t.Ops[op] = o
		if st.Bytes > 0 {
			if t.Bytes == nil {
				t.Bytes = map[string][]int64{}
			}
			t.Bytes[op] = b
		}
	}
	if len(t.Ops) == 0 {
		return nil
	}
	return t
}

// synthManifest is an acceptance run on 8 ranks of 2 hosts: a create_files
// sweep over 2, 4 and 8 ranks whose op rate falls at 8 ranks and whose
// rank 5 straggles, a list_files phase with two op types, a move_files
// phase that failed on rank 3 and a skipped delete_files. scale multiplies
// every latency and wall (2 = storage twice as slow); seed varies the
// samples.
func synthManifest(seed uint64, scale float64) *Manifest {
	rng := rand.New(rand.NewPCG(seed, 7))
	m := &Manifest{
		SchemaVersion: SchemaVersion, Tool: "prism", Version: "1.0.0-test", RunID: fmt.Sprintf("20250314T092653Z-%06x", seed),
		Status: StatusFailed, StartedAt: synthStart, FinishedAt: synthStart.Add(12500 * time.Millisecond),
		Comm: CommInfo{Kind: "mpi", Ranks: 8, Hosts: 2, RankSource: "OMPI_COMM_WORLD_RANK"},
		Host: synthHost, RunDir: "/lustre/scratch/prism/prism-x",
		Plan: map[string]any{"name": "acceptance", "file": "acceptance.toml"},
	}
	create := opSpec{name: "create", n: 50, medianNs: 400e3, sigma: 0.4, bytes: 64 << 10}
	for i, k := range []int{2, 4, 8} {
		s := phaseSpec{name: "create_files", kind: "create_files", ranks: k, ops: []opSpec{create},
			walls: []float64{0.021 * float64(i+1), 0.022 * float64(i+1), 0.020 * float64(i+1)}}
		if k == 8 {
			s.walls = []float64{0.150, 0.155, 0.148} // the op rate falls: a scale inversion
			s.slow = map[int]float64{5: 2.5}
		}
		p := synthPhase(rng, s, scale)
		p.Index = 0
		p.Expect = []Verdict{
			{Metric: "p99", Limit: "2ms", Value: FormatNsAgainst(p.Latency.P99, 2e6), Raw: float64(p.Latency.P99), Passed: p.Latency.P99 <= 2e6},
			{Metric: "max_errors", Limit: "0", Value: "0", Passed: true},
		}
		m.Phases = append(m.Phases, p)
	}
	list := synthPhase(rng, phaseSpec{name: "list_files", kind: "list_files", ranks: 8,
		ops:   []opSpec{{name: "readdir", n: 1, medianNs: 2e6, sigma: 0.2}, {name: "stat", n: 100, medianNs: 15e3, sigma: 0.5}},
		walls: []float64{0.05, 0.052, 0.049}}, scale)
	list.Index = 1
	list.Expect = []Verdict{{Metric: "min_iops", Limit: FormatCount(20000), Value: FormatCount(math.Round(list.OpsPerSec)), Raw: list.OpsPerSec, Passed: list.OpsPerSec >= 20000}}
	move := synthPhase(rng, phaseSpec{name: "move_files", kind: "move_files", ranks: 8,
		ops: []opSpec{{name: "rename", n: 20, medianNs: 80e3, sigma: 0.3}}, walls: []float64{0.01},
		status: StatusFailed, failedRank: 3,
		err: "move_files: rank 3: rename /lustre/scratch/prism/prism-x/r3/f7: input/output error (EIO: the storage reported a hardware or network error)"}, scale)
	move.Index = 2
	del := synthPhase(rng, phaseSpec{name: "delete_files", kind: "delete_files", ranks: 8, status: StatusSkipped}, scale)
	del.Index = 3
	m.Phases = append(m.Phases, list, move, del)
	return m
}
