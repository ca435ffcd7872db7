package report

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// SchemaVersion is bumped whenever a key listed in the README's manifest
// section is renamed or changes meaning (2: phase params keep their TOML
// types instead of strings). Adding keys does not bump it.
const SchemaVersion = 2

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
	// StragglerTolerance is [plan] straggler_tolerance, the flags' rule.
	StragglerTolerance float64 `json:"straggler_tolerance,omitempty"`
	// Hosts are every rank's host and the filesystem under its workdir,
	// one entry per host (per distinct filesystem when ranks of a host
	// saw different ones, which only [plan] allow_mixed_fs lets run).
	Hosts []HostFS `json:"hosts,omitempty"`
	// CommandLine is the command the user ran (for the ranks of prism run
	// -n, the launcher's), argument by argument.
	CommandLine []string `json:"command_line,omitempty"`
}

// HostFS is what the ranks of one host found under their workdir.
type HostFS struct {
	Hostname    string `json:"hostname"`
	Ranks       []int  `json:"ranks"`
	Workdir     string `json:"workdir"`
	FSType      string `json:"fs_type"`
	MountSource string `json:"mount_source"`
	MountPoint  string `json:"mount_point"`
	// FSID is statfs(2)'s f_fsid, in hex: two paths show the same
	// filesystem when it is the same (on one host).
	FSID  string `json:"fs_id"`
	Error string `json:"error,omitempty"` // why the facts could not be read
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
	// SlurmNodes is SlurmNodeList expanded (node[1-3] → node1, node2,
	// node3), SlurmNodeCount its length.
	SlurmNodes     []string `json:"slurm_nodes,omitempty"`
	SlurmNodeCount int      `json:"slurm_node_count,omitempty"`
	SlurmTasks     string   `json:"slurm_tasks_per_node,omitempty"`
	Warnings       []string `json:"warnings,omitempty"`
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
	// Nodes is the host count of a phase that selected nodes (nodes = k).
	Nodes int `json:"nodes,omitempty"`
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
	FirstDoneSeconds float64  `json:"first_done_seconds"`
	LastDoneSeconds  float64  `json:"last_done_seconds"`
	PerRank          RankRows `json:"per_rank"`
	// PerHost sums the ranks of each host, in the order of their first
	// rank; PerNode* are the aggregate rates over the number of hosts (the
	// vendor PoC's "per node average").
	PerHost            []HostResult       `json:"per_host,omitempty"`
	PerNodeBytesPerSec float64            `json:"per_node_bytes_per_sec,omitempty"`
	PerNodeOpsPerSec   float64            `json:"per_node_ops_per_sec,omitempty"`
	Iterations         []float64          `json:"iterations"`
	WarmupIterations   int                `json:"warmup_iterations"`
	Cache              CacheInfo          `json:"cache"`
	Expect             []Verdict          `json:"expect"`
	Metrics            map[string]float64 `json:"metrics,omitempty"`
	// MetricArrays are a phase's figures that are lists (one per
	// checkpoint, one per simulated process), as JSON arrays.
	MetricArrays map[string][]float64 `json:"metric_arrays,omitempty"`
	Params       any                  `json:"params,omitempty"`
	// Histograms holds each op type's merged histogram, HdrHistogram V2
	// compressed and base64-encoded, so other tools can re-read the
	// distribution exactly.
	Histograms map[string]string `json:"histograms,omitempty"`
	// Storage is where a phase over object storage ran; absent for the
	// workdir.
	Storage *StorageInfo `json:"storage,omitempty"`
	// Notes are a phase's own facts about how it ran, as text (blockio's
	// ioengine; ioengine_fallback when io_uring was refused or its
	// requests would punt to io-wq; io_uring_punted when the plan kept
	// io_uring anyway).
	Notes map[string]string `json:"notes,omitempty"`
	// Timeline is the phase's ops and bytes per second since its start
	// (coarser past SeriesCap seconds), per op type, summed over ranks.
	Timeline *Timeline `json:"timeline,omitempty"`
	// MetricLines are the phase's figures of merit as another tool prints
	// them (MLPerf Storage's "[METRIC] …" lines), as the summary shows them.
	MetricLines []string `json:"metric_lines,omitempty"`
}

// StorageInfo records the object storage a phase ran over: the URI of the
// plan, the run's prefix in it, the client's settings (endpoint, region,
// addressing, TLS verification, timeouts, pool, retries, library; never a
// credential) and, with retries on, the requests sent beyond the first,
// per operation, by the rank-0 client since the run began.
type StorageInfo struct {
	URI       string           `json:"uri"`
	RunPrefix string           `json:"run_prefix"`
	Client    any              `json:"client"`
	Retries   map[string]int64 `json:"retries,omitempty"`
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

// HostResult is one host's ranks of a phase, summed. Its rates are its
// bytes and ops over the phase's wall, so the hosts' rates add up to the
// phase's.
type HostResult struct {
	Host             string  `json:"host"`
	Ranks            []int   `json:"ranks"`
	Bytes            int64   `json:"bytes"`
	Ops              int64   `json:"ops"`
	Errors           int64   `json:"errors"`
	BytesPerSec      float64 `json:"bytes_per_sec"`
	OpsPerSec        float64 `json:"ops_per_sec"`
	FirstDoneSeconds float64 `json:"first_done_seconds"`
	LastDoneSeconds  float64 `json:"last_done_seconds"`
	MaxLatencyNs     int64   `json:"max_latency_ns"`
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
	// DroppedBy names, for drop_caches, the one rank of each host that
	// dropped the host's caches.
	DroppedBy []HostRank `json:"dropped_by,omitempty"`
}

// HostRank is a rank and its host.
type HostRank struct {
	Host string `json:"host"`
	Rank int    `json:"rank"`
}

// Verdict is one expectation checked against a phase's result.
type Verdict struct {
	// Metric is the figure checked: "p99", or "<op>.p99" for a
	// [phase.expect.<op>] threshold (Op then names the op type).
	Metric string  `json:"metric"`
	Op     string  `json:"op,omitempty"`
	Limit  string  `json:"limit"`
	Value  string  `json:"value"`
	Passed bool    `json:"passed"`
	Raw    float64 `json:"raw_value"`
}

// Reason is the verdict in words: "write.p99 3.2ms, limit 1ms".
func (v Verdict) Reason() string {
	return fmt.Sprintf("%s %s, limit %s", v.Metric, v.Value, v.Limit)
}

// ExpectMissed reports whether an expectation of the phase missed. The
// engine checks expectations only when the phase ran without error, so a
// failed phase whose expectation missed failed on its verdict alone.
func (p *PhaseResult) ExpectMissed() bool {
	for _, v := range p.Expect {
		if !v.Passed {
			return true
		}
	}
	return false
}

// Blocking reports whether the phase failed in a way that stops the run
// (an error, an interrupt), as opposed to a verdict: a missed expectation
// fails the phase and the run, but the phases after it still run.
func (p *PhaseResult) Blocking() bool {
	return p.Status != StatusPassed && !(p.Status == StatusFailed && p.ExpectMissed())
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
// a reader (or a job killed mid-write) never sees half a manifest. The file
// gets ResultFileMode (0666 masked by the umask) before the rename, so it
// appears readable or not at all.
func WriteFileAtomic(path string, b []byte) error {
	return writeFileAtomic(path, func(f io.Writer) error {
		_, err := f.Write(b)
		return err
	})
}

// writeFileAtomic is WriteFileAtomic with the file's bytes written by
// write, which a manifest streams into; an error of write removes the
// temporary file and is returned as it is.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if err = f.Chmod(ResultFileMode()); err == nil {
		err = write(f)
	}
	if err == nil {
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
		if _, ok := err.(encodeError); ok {
			return err
		}
		return fmt.Errorf("report: write %s: %w", path, err)
	}
	return nil
}

// encodeError is a manifest that cannot be JSON (a NaN, say), as opposed
// to a file that cannot be written.
type encodeError struct{ error }

func (e encodeError) Error() string { return "report: encode manifest: " + e.error.Error() }
func (e encodeError) Unwrap() error { return e.error }

// WriteManifest writes m as indented JSON to path, atomically: the bytes
// of json.MarshalIndent(m, "", "  ") and a newline, streamed (see
// EncodeManifest).
func WriteManifest(path string, m *Manifest) error {
	return writeFileAtomic(path, func(f io.Writer) error {
		return EncodeManifest(f, m)
	})
}

// EncodeManifest writes m to w as json.MarshalIndent(m, "", "  ") and a
// newline, byte for byte, but writes each phase's per_rank itself, at its
// depth, as it reads the packed rows: through encoding/json, a
// json.Marshaler's output is validated, copied and then re-scanned by
// Indent, which made a 10,000-rank manifest 1.4 times slower to write
// than the []RankResult rows did. The rest of m is encoded by
// encoding/json with per_rank and then phases null, and the rows and the
// phases are put where those nulls are. A key is found by its line: in
// indented JSON a raw newline only ever starts a line (strings escape
// theirs), and the line of a key at depth d starts with d indents, so
// "\n" + two spaces + `"phases": ` is the manifest's own key, once.
func EncodeManifest(w io.Writer, m *Manifest) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	top := *m
	top.Phases = nil
	b, err := json.MarshalIndent(&top, "", "  ")
	if err != nil {
		return encodeError{err}
	}
	if m.Phases != nil {
		head, tail, err := splitNull(b, "\n  \"phases\": ")
		if err != nil {
			return err
		}
		bw.Write(head)
		bw.WriteByte('[')
		for i := range m.Phases {
			p := m.Phases[i]
			p.PerRank = RankRows{}
			pb, err := json.MarshalIndent(&p, "    ", "  ")
			if err != nil {
				return encodeError{err}
			}
			if i > 0 {
				bw.WriteByte(',')
			}
			bw.WriteString("\n    ")
			head, tail, err := splitNull(pb, "\n      \"per_rank\": ")
			if err != nil {
				return err
			}
			bw.Write(head)
			if err := m.Phases[i].PerRank.writeJSON(bw, "      ", "  "); err != nil {
				return encodeError{err}
			}
			bw.Write(tail)
		}
		if len(m.Phases) > 0 {
			bw.WriteString("\n  ")
		}
		bw.WriteByte(']')
		b = tail
	}
	bw.Write(b)
	bw.WriteByte('\n')
	return bw.Flush()
}

// splitNull splits b around the null after key: the bytes up to and with
// key, and those after the null. The key is always there, null, once
// (EncodeManifest nulls it), so an error is a bug here, not bad input.
func splitNull(b []byte, key string) (head, tail []byte, err error) {
	i := bytes.Index(b, []byte(key+"null"))
	if i < 0 || bytes.Contains(b[i+1:], []byte(key)) {
		return nil, nil, encodeError{fmt.Errorf("%s not once in the JSON", strconv.Quote(key))}
	}
	return b[:i+len(key)], b[i+len(key)+4:], nil
}

// ReadManifest loads a manifest written by WriteManifest, checking the
// schema version so a newer file is not misread.
func ReadManifest(path string) (*Manifest, error) {
	b, err := ReadResultFile(path)
	if err != nil {
		return nil, err
	}
	return ParseManifest(path, b)
}

// ReadResultFile reads a file prism wrote (a manifest, a summary), which
// is a regular file: anything else is refused before a byte is read, as
// /dev/zero would exhaust memory and a FIFO or /proc/kmsg would block
// forever. It reads the size fstat gave, so a /proc file (size 0) reads
// as empty instead of blocking.
func ReadResultFile(path string) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO without a writer would block.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s): prism reads only the files it wrote", path, st.Mode().Type())
	}
	b := make([]byte, st.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
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
