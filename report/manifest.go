package report

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// SchemaVersion is bumped whenever a key listed in the README's manifest
// section is renamed or changes meaning. Adding keys does not bump it.
const SchemaVersion = 1

// Run statuses and phase statuses.
const (
	StatusPassed      = "passed"
	StatusFailed      = "failed"
	StatusInterrupted = "interrupted"
	StatusSkipped     = "skipped"
)

// Manifest is the one result file of a run, written by rank 0.
type Manifest struct {
	SchemaVersion int           `json:"schema_version"`
	Tool          string        `json:"tool"`
	Version       string        `json:"version"`
	RunID         string        `json:"run_id"`
	Status        string        `json:"status"`
	Error         string        `json:"error,omitempty"`
	StartedAt     time.Time     `json:"started_at"`
	FinishedAt    time.Time     `json:"finished_at"`
	Comm          CommInfo      `json:"comm"`
	Host          HostInfo      `json:"host"`
	Clock         ClockInfo     `json:"clock"`
	RunDir        string        `json:"run_dir"`
	Kept          bool          `json:"kept"`
	Plan          any           `json:"plan"`
	Phases        []PhaseResult `json:"phases"`
	// Flags are the outliers Flags found: scale inversions in sweeps and
	// straggler ranks.
	Flags []Flag `json:"flags,omitempty"`
}

// CommInfo says how the ranks found each other.
type CommInfo struct {
	Kind       string `json:"kind"`
	Ranks      int    `json:"ranks"`
	Hosts      int    `json:"hosts"`
	RankSource string `json:"rank_source"`
}

// HostInfo describes rank 0's host and the storage under the workdir.
type HostInfo struct {
	Hostname      string   `json:"hostname"`
	CPUModel      string   `json:"cpu_model"`
	CPUVendor     string   `json:"cpu_vendor"`
	CPUFeatures   []string `json:"cpu_features,omitempty"`
	PhysicalCores int      `json:"physical_cores"`
	LogicalCores  int      `json:"logical_cores"`
	MemoryBytes   int64    `json:"memory_bytes"`
	Kernel        string   `json:"kernel"`
	GoVersion     string   `json:"go_version"`
	GOMAXPROCS    int      `json:"gomaxprocs"`
	Workdir       string   `json:"workdir"`
	FSType        string   `json:"fs_type"`
	MountPoint    string   `json:"mount_point"`
	MountSource   string   `json:"mount_source"`
	MountOptions  string   `json:"mount_options"`
	MPILibrary    string   `json:"mpi_library"`
	SlurmJobID    string   `json:"slurm_job_id"`
	SlurmNodeList string   `json:"slurm_node_list,omitempty"`
	SlurmTasks    string   `json:"slurm_tasks_per_node,omitempty"`
	Warnings      []string `json:"warnings,omitempty"`
}

// PhaseResult is one phase (one rank count of a sweep) as rank 0 saw it.
type PhaseResult struct {
	Index      int    `json:"index"`
	Name       string `json:"name"`
	Kind       string `json:"kind"`
	Status     string `json:"status"`
	Error      string `json:"error,omitempty"`
	FailedRank *int   `json:"failed_rank,omitempty"`
	Ranks      int    `json:"ranks"`
	// Group and ConcurrentWith mark phases that ran at the same time on
	// disjoint ranks ([[phase]] group = "…").
	Group          string             `json:"group,omitempty"`
	ConcurrentWith string             `json:"concurrent_with,omitempty"`
	StartedAt      time.Time          `json:"started_at"`
	WallSeconds    float64            `json:"wall_seconds"`
	Bytes          int64              `json:"bytes"`
	Ops            int64              `json:"ops"`
	Errors         int64              `json:"errors"`
	BytesPerSec    float64            `json:"bytes_per_sec"`
	OpsPerSec      float64            `json:"ops_per_sec"`
	Latency        Latency            `json:"latency_ns"`
	OpsByType      map[string]OpStats `json:"ops_by_type"`
	// FirstDoneSeconds and LastDoneSeconds are the fastest and the slowest
	// rank's busy time: their gap is the straggler spread.
	FirstDoneSeconds float64            `json:"first_done_seconds"`
	LastDoneSeconds  float64            `json:"last_done_seconds"`
	PerRank          []RankResult       `json:"per_rank"`
	Iterations       []float64          `json:"iterations"`
	WarmupIterations int                `json:"warmup_iterations"`
	Cache            CacheInfo          `json:"cache"`
	Expect           []Verdict          `json:"expect"`
	Metrics          map[string]float64 `json:"metrics,omitempty"`
	Params           any                `json:"params,omitempty"`
	// Histograms holds each op type's merged histogram, HdrHistogram V2
	// compressed and base64-encoded, so other tools can re-read the
	// distribution exactly.
	Histograms map[string]string `json:"histograms,omitempty"`
}

// Latency summarises a histogram, in nanoseconds.
type Latency struct {
	Mean float64 `json:"mean"`
	Min  int64   `json:"min"`
	Max  int64   `json:"max"`
	P50  int64   `json:"p50"`
	P90  int64   `json:"p90"`
	P99  int64   `json:"p99"`
	P999 int64   `json:"p999"`
}

// OpStats is one op type's aggregate over every rank.
type OpStats struct {
	Ops         int64   `json:"ops"`
	Errors      int64   `json:"errors"`
	Bytes       int64   `json:"bytes"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	Latency     Latency `json:"latency_ns"`
}

// RankResult is one rank's row of a phase.
type RankResult struct {
	Rank         int     `json:"rank"`
	Host         string  `json:"host"`
	Bytes        int64   `json:"bytes"`
	Ops          int64   `json:"ops"`
	Seconds      float64 `json:"seconds"`
	Errors       int64   `json:"errors"`
	MaxLatencyNs int64   `json:"max_latency_ns"`
	Error        string  `json:"error,omitempty"`
	CPUs         string  `json:"cpus,omitempty"` // the rank's CPU affinity, a cpulist
}

// CacheInfo records the cache policy a phase asked for and what this run
// could actually do (not root, tmpfs, …).
type CacheInfo struct {
	Requested string `json:"requested"`
	Applied   string `json:"applied"`
	Reason    string `json:"reason,omitempty"`
}

// Verdict is one expectation checked against a phase's result.
type Verdict struct {
	Metric string  `json:"metric"`
	Limit  string  `json:"limit"`
	Value  string  `json:"value"`
	Passed bool    `json:"passed"`
	Raw    float64 `json:"raw_value"`
}

// Summarize computes the latency summary of h.
func Summarize(h *hdr.Histogram) Latency {
	if h.TotalCount() == 0 {
		return Latency{}
	}
	mean := h.Mean()
	if math.IsNaN(mean) {
		mean = 0
	}
	return Latency{
		Mean: mean,
		Min:  h.Min(),
		Max:  h.Max(),
		P50:  h.ValueAtQuantile(50),
		P90:  h.ValueAtQuantile(90),
		P99:  h.ValueAtQuantile(99),
		P999: h.ValueAtQuantile(99.9),
	}
}

// EncodeHistogram returns h as base64 HdrHistogram V2 (compressed), the
// format every HdrHistogram implementation can decode.
func EncodeHistogram(h *hdr.Histogram) (string, error) {
	b, err := h.Encode(hdr.V2CompressedEncodingCookieBase)
	if err != nil {
		return "", fmt.Errorf("report: encode histogram: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// DecodeHistogram is the inverse of EncodeHistogram.
func DecodeHistogram(s string) (*hdr.Histogram, error) {
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("report: decode histogram: %w", err)
	}
	h, err := hdr.Decode(raw)
	if err != nil {
		return nil, fmt.Errorf("report: decode histogram: %w", err)
	}
	return h, nil
}

// WriteFileAtomic writes b to path through a temporary file and a rename, so
// a reader (or a job killed mid-write) never sees half a manifest.
func WriteFileAtomic(path string, b []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if _, err = f.Write(b); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("report: write %s: %w", path, err)
	}
	return nil
}

// WriteManifest writes m as indented JSON to path, atomically.
func WriteManifest(path string, m *Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("report: encode manifest: %w", err)
	}
	return WriteFileAtomic(path, append(b, '\n'))
}

// ReadManifest loads a manifest written by WriteManifest, checking the
// schema version so a newer file is not misread.
func ReadManifest(path string) (*Manifest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseManifest(path, b)
}

// ParseManifest decodes manifest JSON; name is used in messages.
func ParseManifest(name string, b []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: not a prism manifest: %w", name, err)
	}
	if m.SchemaVersion == 0 || m.SchemaVersion > SchemaVersion {
		return nil, fmt.Errorf("%s: schema_version %d not understood (this prism reads up to %d)", name, m.SchemaVersion, SchemaVersion)
	}
	return &m, nil
}
