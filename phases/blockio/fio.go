package blockio

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/report"
	"golang.org/x/sys/unix"
)

// The fio phase runs the real fio on every rank, in the rank's directory,
// and ingests its json+ output into the rank's recorders, so that fio's
// numbers get the same manifest, aggregation across ranks, expectations
// and comparisons as prism's own phases.

func registerFio(r *phases.Registry) {
	r.Register(phases.Kind{Name: "fio", Family: "blockio",
		Summary: "runs the real fio on every rank (job_file or inline options, checked against an allow-list: see the end of prism list) in the rank's directory and ingests its json+ latency bins; headline bandwidth and IOPS are fio's own, its JSON is kept beside the manifest; ops read, write, trim, fsync",
		New:     func() phases.Phase { return &fioPhase{cfg: fioConfig{Binary: "fio", Layout: true}} },
		Sample:  "options = [\"rw=randread\", \"bs=16k\", \"size=2m\", \"ioengine=psync\"]"})
}

type fioConfig struct {
	JobFile string     `toml:"job_file" doc:"fio job file (path relative to the current directory); its directory= and filename= must be relative: fio runs inside the rank's directory"`
	Options FioOptions `toml:"options" doc:"inline fio options when there is no job_file: an array of \"name=value\" strings, kept in order, or a table"`
	Binary  string     `toml:"binary" doc:"fio executable: a path, or a name looked up in PATH"`
	Layout  bool       `toml:"layout" doc:"create fio's files in Setup (fio --create_only=1) so the timed run does not include laying them out"`

	binPath string // resolved by Validate
	// job is the job file as Validate read and checked it. fio is given
	// this copy, written in its working directory, never job_file
	// itself: whoever can write job_file (or a FIFO there, which answers
	// each open differently) would otherwise swap in exec_prerun between
	// the check and fio's own read.
	job []byte
}

// fioJobName is the checked copy of job_file in fio's working directory.
const fioJobName = "prism-job.fio"

// FioOptions are fio job options, "name=value" or a bare "name", in the
// order fio will see them (it matters: engine options such as
// userspace_reap must follow ioengine=). A table is accepted too and
// ordered by key, with ioengine first.
type FioOptions []string

// UnmarshalTOML accepts an array of strings or a table of options.
func (o *FioOptions) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case []any:
		out := make(FioOptions, 0, len(x))
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return fmt.Errorf("fio options are strings such as \"bs=4k\", not %T", e)
			}
			out = append(out, s)
		}
		*o = out
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			if (keys[i] == "ioengine") != (keys[j] == "ioengine") {
				return keys[i] == "ioengine"
			}
			return keys[i] < keys[j]
		})
		out := make(FioOptions, 0, len(x))
		for _, k := range keys {
			switch val := x[k].(type) {
			case bool:
				if val {
					out = append(out, k)
				} else {
					out = append(out, k+"=0")
				}
			case string:
				out = append(out, k+"="+val)
			case int64:
				out = append(out, k+"="+strconv.FormatInt(val, 10))
			case float64:
				out = append(out, k+"="+strconv.FormatFloat(val, 'g', -1, 64))
			default:
				return fmt.Errorf("fio option %s: a string, number or boolean, not %T", k, val)
			}
		}
		*o = out
	default:
		return fmt.Errorf("fio options are an array of \"name=value\" strings or a table, not %T", v)
	}
	return nil
}

// Validate resolves the fio binary and checks the job, so that a missing
// fio or a job aimed outside the run directory fails `prism check`.
func (c *fioConfig) Validate() error {
	switch {
	case c.JobFile == "" && len(c.Options) == 0:
		return &phases.KeyError{Key: "job_file", Msg: "give a job_file or inline options, e.g. options = [\"rw=randread\", \"bs=4k\", \"size=64m\"]"}
	case c.JobFile != "" && len(c.Options) > 0:
		return &phases.KeyError{Key: "options", Msg: "give a job_file or inline options, not both"}
	}
	for _, o := range c.Options {
		if err := checkFioOption(o); err != nil {
			return &phases.KeyError{Key: "options", Msg: err.Error()}
		}
	}
	if c.JobFile != "" {
		abs, err := filepath.Abs(c.JobFile)
		if err != nil {
			return &phases.KeyError{Key: "job_file", Msg: err.Error()}
		}
		b, err := pio.ReadInput(abs, pio.MaxInput, pio.InputTimeout)
		if err != nil {
			return &phases.KeyError{Key: "job_file", Msg: fmt.Sprintf("cannot read the job file: %v", err)}
		}
		if err := checkFioJobFile(b); err != nil {
			return &phases.KeyError{Key: "job_file", Msg: fmt.Sprintf("%s: %v", c.JobFile, err)}
		}
		c.job = b
	}
	if c.Binary == "" {
		c.Binary = "fio"
	}
	bin, err := exec.LookPath(c.Binary)
	if err != nil {
		return &phases.KeyError{Key: "binary", Msg: fmt.Sprintf("%q not found (%v): install fio (Debian/Ubuntu: apt-get install fio) or set binary to its path", c.Binary, errors.Unwrap(err))}
	}
	c.binPath = bin
	return nil
}

// fioStopGrace is how long fio has to write its partial results after
// SIGTERM before its process group is killed.
const fioStopGrace = 5 * time.Second

type fioPhase struct {
	cfg     fioConfig
	pin     *pio.Dir // <rank dir>/fio, fio's working directory
	dir     string   // fio's working directory, below the rank's
	created bool
	ioBytes int64 // fio's own io_bytes of the last run
	// fio's own rates (bw_bytes, iops; per direction and in all) summed
	// over this rank's jobs, summed over the measured iterations so far
	// (runs of them): their mean is this rank's share of the headline.
	bw, iops     float64
	opBW, opIOPS [3]float64
	runs         int
	raw          []byte            // fio's JSON of the last run
	kept         map[string][]byte // on the phase's rank 0: every rank's, by result file name
}

func (p *fioPhase) Config() any { return &p.cfg }

// args builds fio's argument list (never a shell command line). Options
// before the job file or the first --name are fio's global defaults:
// directory points inside the rank's directory and lat_percentiles makes
// json+ carry total-latency bins (submission + completion).
func (p *fioPhase) args(out string, extra ...string) []string {
	output := "--output=" + filepath.Base(out)
	if out == "" {
		output = "--output=" + fioOutputFD // exec's pipe
	}
	a := []string{"--output-format=json+", output, "--eta=never", "--directory=.", "--lat_percentiles=1"}
	a = append(a, extra...)
	if p.cfg.job != nil {
		return append(a, fioJobName)
	}
	named := false
	for _, o := range p.cfg.Options {
		named = named || strings.HasPrefix(strings.TrimSpace(o), "name=")
	}
	if !named {
		a = append(a, "--name=prism")
	}
	for _, o := range p.cfg.Options {
		a = append(a, "--"+strings.TrimSpace(o))
	}
	return a
}

func (p *fioPhase) Setup(ctx context.Context, env *phases.Env) error {
	if p.pin != nil {
		p.pin.Close()
	}
	d, err := env.Own.EnsureSub("fio", 0o755)
	if err != nil {
		return env.Errorf("setup: %w", err)
	}
	// fio runs with this directory as its working directory, reached
	// through its descriptor (/proc/self/fd), and is given only names
	// relative to it: a run directory renamed or swapped for a link above
	// it cannot send fio's I/O elsewhere.
	p.pin, p.dir = d, d.ProcPath()
	p.created = true
	if p.cfg.job != nil {
		// A previous iteration's copy is replaced: WriteFile never
		// writes through what is already there.
		if err := d.Unlink(pio.MustName(fioJobName)); err != nil && err != unix.ENOENT {
			return env.Errorf("setup: %w", d.Wrap("unlink", pio.MustName(fioJobName), err))
		}
		if err := d.WriteFile(fioJobName, p.cfg.job, 0o644); err != nil {
			return env.Errorf("setup: %w", err)
		}
	}
	if !p.cfg.Layout {
		return nil
	}
	layout := filepath.Join(p.dir, "fio-layout.json")
	if err := p.exec(ctx, env, p.args(layout, "--create_only=1"), nil); err != nil {
		return env.Errorf("setup: laying out fio's files: %w", err)
	}
	return nil
}

// fioOutputFD is where fio writes its JSON in a timed run: a pipe to
// prism (exec's objs), so that nothing but the job's own I/O touches the
// storage under test, and progress can read fio's periodic status.
const fioOutputFD = "/dev/fd/3"

// exec runs fio, stopping it with SIGTERM (it then writes what it has and
// exits) when ctx is cancelled, and killing it if it lingers. With objs
// set, fio's output is a pipe on its fd 3 (args name fioOutputFD) and objs
// gets each JSON object fio writes to it, as it writes it.
func (p *fioPhase) exec(ctx context.Context, env *phases.Env, args []string, objs func([]byte)) error {
	cmd := phases.Command(ctx, p.dir, p.cfg.binPath, args...)
	var tail fioTail
	cmd.Stdout, cmd.Stderr = &tail, &tail
	// SIGTERM first: fio then writes what it has and exits; the group is
	// killed if it lingers past WaitDelay.
	cmd.Cancel = func() error {
		err := phases.KillGroup(cmd, syscall.SIGTERM)
		time.AfterFunc(fioStopGrace, func() { phases.KillGroup(cmd, syscall.SIGKILL) })
		return err
	}
	cmd.WaitDelay = fioStopGrace + phases.CommandWaitDelay
	var read chan error
	var pr *os.File
	if objs != nil {
		var pw *os.File
		var err error
		if pr, pw, err = os.Pipe(); err != nil {
			return fmt.Errorf("fio's output pipe: %w", err)
		}
		defer pr.Close()
		cmd.ExtraFiles = []*os.File{pw}
		if err := cmd.Start(); err != nil {
			pw.Close()
			return fmt.Errorf("%s: %w", p.cfg.binPath, err)
		}
		pw.Close() // fio (and its job processes) hold the write end now
		read = make(chan error, 1)
		go func() { read <- readFioObjects(pr, objs) }()
	} else if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", p.cfg.binPath, err)
	}
	err := cmd.Wait()
	if read != nil {
		// fio has exited; the pipe ends once its last job process has too.
		// Bounded: a process of the group that kept the pipe open is not
		// waited for past the grace.
		select {
		case rerr := <-read:
			if err == nil && rerr != nil {
				err = fmt.Errorf("reading its output: %w", rerr)
			}
		case <-time.After(phases.CommandWaitDelay):
			pr.Close()
			<-read
			if err == nil {
				err = errors.New("its output pipe stayed open after it exited")
			}
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", p.cfg.binPath, strings.Join(args, " "), err, strings.TrimSpace(tail.String()))
	}
	return nil
}

// readFioObjects calls each with every top-level JSON object in r, as fio
// writes them (with --status-interval, one per interval, then the final
// one). Text between objects (fio's notes) is skipped, and so is an object
// cut short by such text: objects start with '{' at the start of a line.
func readFioObjects(r io.Reader, each func([]byte)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	skip := false // past the line of an object that did not parse
	for {
		// To the next line that starts an object.
		for {
			c, err := br.Peek(1)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if c[0] == '{' && !skip {
				break
			}
			skip = false
			if _, err := br.ReadSlice('\n'); err != nil && err != bufio.ErrBufferFull {
				if err == io.EOF {
					return nil
				}
				return err
			}
		}
		dec := json.NewDecoder(br)
		for {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				if err == io.EOF {
					return nil
				}
				var syn *json.SyntaxError
				if !errors.As(err, &syn) && err != io.ErrUnexpectedEOF {
					return err
				}
				// Not an object (or one cut short): go on after its first
				// line (Buffered starts at the value that failed).
				br = bufio.NewReaderSize(io.MultiReader(dec.Buffered(), br), 64<<10)
				skip = true
				break
			}
			if len(raw) > 0 && raw[0] == '{' {
				each(raw)
			}
		}
	}
}

// fioTotals is what progress needs of one fio status object: the ops and
// bytes of every job so far.
func fioTotals(obj []byte) (ops, bytes int64, ok bool) {
	type counts struct {
		IOBytes  int64 `json:"io_bytes"`
		TotalIOs int64 `json:"total_ios"`
	}
	var st struct {
		Jobs []struct {
			Read  counts `json:"read"`
			Write counts `json:"write"`
			Trim  counts `json:"trim"`
			Sync  counts `json:"sync"`
		} `json:"jobs"`
	}
	if json.Unmarshal(obj, &st) != nil {
		return 0, 0, false
	}
	for _, j := range st.Jobs {
		for _, d := range []counts{j.Read, j.Write, j.Trim, j.Sync} {
			ops += max(d.TotalIOs, 0)
			bytes += max(d.IOBytes, 0)
		}
	}
	return ops, bytes, true
}

// Run runs fio once and ingests its result. The timed window includes
// fio's start-up (tens of milliseconds), so the phase's headline bandwidth
// and IOPS are fio's own over its own runtime (Headline); the histograms
// still give the latencies.
func (p *fioPhase) Run(ctx context.Context, env *phases.Env) error {
	if env.Iteration == 0 {
		p.bw, p.iops, p.opBW, p.opIOPS, p.runs = 0, 0, [3]float64{}, [3]float64{}, 0
	}
	var extra []string
	if env.ProgressEvery > 0 {
		// fio's own status, as often as progress looks (whole seconds).
		extra = append(extra, "--status-interval="+strconv.Itoa(max(1, int(math.Ceil(env.ProgressEvery.Seconds())))))
	}
	var last []byte
	err := p.exec(ctx, env, p.args("", extra...), func(obj []byte) {
		last = obj
		if ops, bytes, ok := fioTotals(obj); ok && env.ProgressEvery > 0 {
			env.LiveOutside(ops, bytes)
		}
	})
	// The recorders take fio's ops now: progress must not count them twice.
	env.LiveOutside(0, 0)
	if err != nil {
		return env.Errorf("%w", err)
	}
	if last == nil {
		return env.Errorf("fio output: no JSON object found")
	}
	rep, err := ParseFioJSON(last)
	if err != nil {
		return env.Errorf("%w", err)
	}
	p.raw = last
	return p.ingest(env, rep)
}

// fioOps maps fio's sections to prism op names.
var fioOps = []string{"read", "write", "trim", "fsync"}

func (p *fioPhase) ingest(env *phases.Env, rep *FioReport) error {
	var ioBytes int64
	var bw, iops float64
	var opBW, opIOPS [3]float64
	for _, job := range rep.Jobs {
		if job.Error != 0 {
			return env.Errorf("fio job %q failed: error %d (%v)", job.Name, job.Error, unix.Errno(job.Error))
		}
		for i, fo := range []*FioOp{job.Read, job.Write, job.Trim, job.Sync} {
			if fo == nil {
				continue
			}
			ioBytes += fo.IOBytes
			bw += fo.BWBytes
			iops += fo.IOPS
			if i < len(opBW) {
				opBW[i] += fo.BWBytes
				opIOPS[i] += fo.IOPS
			}
			bins := fo.Latencies()
			var n int64
			for _, b := range bins {
				n += b.Count
			}
			if n == 0 {
				if fo.IOBytes > 0 {
					return env.Errorf("fio job %q reports %d %s bytes but no latencies", job.Name, fo.IOBytes, fioOps[i])
				}
				continue
			}
			// Bytes are spread over the ops so that they add up exactly
			// to fio's io_bytes; fio does not say which op moved what.
			rec := env.Recorder(fioOps[i])
			rec.NoSeries() // the bins carry no time: no per-second series
			base, rem := fo.IOBytes/n, fo.IOBytes%n
			for _, b := range bins {
				for c := int64(0); c < b.Count; c++ {
					by := base
					if rem > 0 {
						by++
						rem--
					}
					rec.ObserveNs(b.Ns, by, nil)
				}
			}
		}
	}
	p.ioBytes = ioBytes
	env.SetMetric("fio_io_bytes", float64(ioBytes))
	if env.Warmup {
		return nil
	}
	// The metrics are this rank's mean over the measured iterations; the
	// engine sums them over ranks, which is the aggregate: every rank's
	// jobs ran at the same time.
	p.runs++
	p.bw, p.iops = p.bw+bw, p.iops+iops
	n := float64(p.runs)
	env.SetMetric("fio_bytes_per_sec", p.bw/n)
	env.SetMetric("fio_iops", p.iops/n)
	for i := range opBW {
		p.opBW[i] += opBW[i]
		p.opIOPS[i] += opIOPS[i]
		if p.opBW[i] > 0 || p.opIOPS[i] > 0 {
			env.SetMetric("fio_"+fioOps[i]+"_bytes_per_sec", p.opBW[i]/n)
			env.SetMetric("fio_"+fioOps[i]+"_iops", p.opIOPS[i]/n)
		}
	}
	return nil
}

// Headline makes fio's own rates the phase's: bytes_per_sec and
// ops_per_sec (and those of read, write and trim) are fio's bw_bytes and
// iops summed over jobs and ranks, over fio's runtime, which leaves out its
// start-up; prism's wall-based figures stay in metrics as
// prism_bytes_per_sec and prism_ops_per_sec.
func (p *fioPhase) Headline(res *report.PhaseResult) {
	m := res.Metrics
	bw, ok := m["fio_bytes_per_sec"]
	if !ok {
		return
	}
	m["prism_bytes_per_sec"], m["prism_ops_per_sec"] = res.BytesPerSec, res.OpsPerSec
	res.BytesPerSec, res.OpsPerSec = bw, m["fio_iops"]
	for _, op := range fioOps[:3] {
		st, ok := res.OpsByType[op]
		v, has := m["fio_"+op+"_bytes_per_sec"]
		if ok && has {
			st.BytesPerSec, st.OpsPerSec = v, m["fio_"+op+"_iops"]
			res.OpsByType[op] = st
		}
	}
}

// Artefacts are every rank's fio JSON of the last measured iteration, for
// the results directory: fio-<phase>-r<rank>.json (-n<ranks> in a sweep).
func (p *fioPhase) Artefacts() map[string][]byte { return p.kept }

// Verify refuses a run in which fio moved nothing: a job that silently did
// no I/O (a typo in rw, size 0) must not pass as infinitely fast.
func (p *fioPhase) Verify(ctx context.Context, env *phases.Env) error {
	// fio's JSON goes to the phase's rank 0, which keeps it for the results
	// directory; every rank takes part before any may fail, so none waits.
	if !env.Warmup {
		all, err := env.Comm.Gather(ctx, 0, p.raw)
		if err != nil {
			return env.Errorf("verify: gather fio's output: %w", err)
		}
		if env.Rank == 0 {
			sweep := strings.TrimPrefix(env.Rel, fmt.Sprintf("%02d-%s", env.Index+1, env.Name))
			if p.kept == nil {
				p.kept = map[string][]byte{}
			}
			for r, b := range all {
				if len(b) > 0 {
					p.kept[fmt.Sprintf("fio-%s%s-r%d.json", env.Name, sweep, r)] = b
				}
			}
		}
	}
	if p.ioBytes == 0 {
		return env.Errorf("verify: fio reported no bytes moved")
	}
	return nil
}

// Teardown removes fio's directory and output files, which this phase
// created inside the rank's directory.
func (p *fioPhase) Teardown(ctx context.Context, env *phases.Env) error {
	if !p.created {
		return nil
	}
	p.created = false
	err := p.pin.Remove()
	p.pin.Close()
	p.pin = nil
	if err != nil {
		return env.Errorf("teardown: %w", err)
	}
	return nil
}

// fioTail keeps the last few KiB of fio's stdout and stderr for error
// messages.
type fioTail struct{ b []byte }

const fioTailMax = 4 << 10

func (t *fioTail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > fioTailMax {
		t.b = append(t.b[:0], t.b[len(t.b)-fioTailMax:]...)
	}
	return len(p), nil
}

func (t *fioTail) String() string { return string(t.b) }

// FioReport is what prism takes from fio's json+ output.
type FioReport struct {
	Version string
	Jobs    []FioJob
}

// FioJob is one job (or, with group_reporting, one group) of a fio run.
type FioJob struct {
	Name  string
	Error int
	// One per direction; Sync holds fsync/fdatasync (no bytes). Nil when
	// the output has no such section.
	Read, Write, Trim, Sync *FioOp
}

// FioOp is one direction of a job.
type FioOp struct {
	IOBytes  int64   // bytes moved (fio io_bytes)
	TotalIOs int64   // ops completed
	BWBytes  float64 // bytes per second over the job's runtime
	IOPS     float64
	Lat      FioLat // total latency (lat_ns): submission + completion
	Clat     FioLat // completion latency
	Slat     FioLat // submission latency (0 for synchronous engines)
}

// FioLat is one of fio's latency summaries, with json+ bins when present.
type FioLat struct {
	Min, Max int64
	Mean     float64
	N        int64
	Bins     []FioBin // sorted by Ns
}

// FioBin is one bucket of fio's latency histogram: Count ops took about Ns.
type FioBin struct {
	Ns    int64
	Count int64
}

// Latencies returns the per-op latency distribution prism records, the
// closest to fio's "lat" (what a caller waits for, as prism's own phases
// time it):
//   - lat_ns bins, present when lat_percentiles=1 (prism passes it): exact;
//   - else clat_ns bins shifted by the mean submission latency: exact for
//     synchronous engines (slat is 0 there: clat is the whole syscall) and
//     for async ones the mean is exact while percentiles are off by slat's
//     spread, which is microseconds against clat's milliseconds;
//   - else (plain json) every op at the mean latency, so counts and bytes
//     still add up.
func (o *FioOp) Latencies() []FioBin {
	if binsTotal(o.Lat.Bins) > 0 {
		return o.Lat.Bins
	}
	if binsTotal(o.Clat.Bins) > 0 {
		shift := int64(0)
		if o.Slat.N > 0 {
			shift = int64(math.Round(o.Slat.Mean))
		}
		out := make([]FioBin, len(o.Clat.Bins))
		for i, b := range o.Clat.Bins {
			ns := b.Ns + shift
			if ns < b.Ns { // overflow of corrupt input: saturate
				ns = math.MaxInt64
			}
			out[i] = FioBin{Ns: ns, Count: b.Count}
		}
		return out
	}
	n := o.TotalIOs
	if n == 0 {
		n = o.Lat.N
	}
	if n <= 0 {
		return nil
	}
	mean := o.Lat.Mean
	if mean == 0 {
		mean = o.Clat.Mean + o.Slat.Mean
	}
	return []FioBin{{Ns: int64(math.Round(mean)), Count: n}}
}

func binsTotal(bins []FioBin) int64 {
	var n int64
	for _, b := range bins {
		n += b.Count
	}
	return n
}

// maxFioOps bounds the ops one report may claim (2^50, far beyond any real
// run), so that corrupt input cannot make ingestion loop for years.
const maxFioOps = 1 << 50

// ParseFioJSON reads fio's --output-format=json or json+ output. Text that
// fio prints before the JSON object (notes, warnings) is skipped. Counts
// and latencies must be non-negative; a malformed number is an error.
func ParseFioJSON(b []byte) (*FioReport, error) {
	start := -1
	if len(b) > 0 && b[0] == '{' {
		start = 0
	} else if i := bytes.Index(b, []byte("\n{")); i >= 0 {
		start = i + 1
	}
	if start < 0 {
		return nil, errors.New("fio output: no JSON object found")
	}
	var raw struct {
		Version string `json:"fio version"`
		Jobs    []struct {
			Name  string    `json:"jobname"`
			Error int       `json:"error"`
			Read  *fioRawOp `json:"read"`
			Write *fioRawOp `json:"write"`
			Trim  *fioRawOp `json:"trim"`
			Sync  *fioRawOp `json:"sync"`
		} `json:"jobs"`
	}
	if err := json.NewDecoder(bytes.NewReader(b[start:])).Decode(&raw); err != nil {
		return nil, fmt.Errorf("fio output: %w", err)
	}
	if raw.Jobs == nil {
		return nil, errors.New("fio output: no \"jobs\" array")
	}
	rep := &FioReport{Version: raw.Version}
	var total int64
	for _, j := range raw.Jobs {
		fj := FioJob{Name: j.Name, Error: j.Error}
		for _, d := range []struct {
			raw *fioRawOp
			dst **FioOp
		}{{j.Read, &fj.Read}, {j.Write, &fj.Write}, {j.Trim, &fj.Trim}, {j.Sync, &fj.Sync}} {
			if d.raw == nil {
				continue
			}
			op, err := d.raw.convert()
			if err != nil {
				return nil, fmt.Errorf("fio output: job %q: %w", j.Name, err)
			}
			n := max(binsTotal(op.Lat.Bins), binsTotal(op.Clat.Bins), op.TotalIOs)
			if total += n; total > maxFioOps || n > maxFioOps {
				return nil, fmt.Errorf("fio output: job %q: more than %d ops", j.Name, int64(maxFioOps))
			}
			*d.dst = op
		}
		rep.Jobs = append(rep.Jobs, fj)
	}
	return rep, nil
}

type fioRawOp struct {
	IOBytes  int64      `json:"io_bytes"`
	TotalIOs int64      `json:"total_ios"`
	BWBytes  float64    `json:"bw_bytes"`
	IOPS     float64    `json:"iops"`
	Lat      *fioRawLat `json:"lat_ns"`
	Clat     *fioRawLat `json:"clat_ns"`
	Slat     *fioRawLat `json:"slat_ns"`
}

type fioRawLat struct {
	Min  int64            `json:"min"`
	Max  int64            `json:"max"`
	Mean float64          `json:"mean"`
	N    int64            `json:"N"`
	Bins map[string]int64 `json:"bins"`
}

func (r *fioRawOp) convert() (*FioOp, error) {
	if r.IOBytes < 0 || r.TotalIOs < 0 || r.TotalIOs > maxFioOps || math.IsNaN(r.BWBytes) || math.IsNaN(r.IOPS) {
		return nil, fmt.Errorf("negative or invalid counters (io_bytes %d, total_ios %d)", r.IOBytes, r.TotalIOs)
	}
	op := &FioOp{IOBytes: r.IOBytes, TotalIOs: r.TotalIOs, BWBytes: r.BWBytes, IOPS: r.IOPS}
	for _, l := range []struct {
		raw *fioRawLat
		dst *FioLat
	}{{r.Lat, &op.Lat}, {r.Clat, &op.Clat}, {r.Slat, &op.Slat}} {
		if l.raw == nil {
			continue
		}
		lat, err := l.raw.convert()
		if err != nil {
			return nil, err
		}
		*l.dst = lat
	}
	return op, nil
}

func (r *fioRawLat) convert() (FioLat, error) {
	if r.N < 0 || r.Min < 0 || r.Max < 0 || r.Mean < 0 || math.IsNaN(r.Mean) || math.IsInf(r.Mean, 0) || r.Mean > float64(int64(time.Hour)*1000) {
		return FioLat{}, fmt.Errorf("invalid latency summary (min %d, max %d, mean %g, N %d)", r.Min, r.Max, r.Mean, r.N)
	}
	l := FioLat{Min: r.Min, Max: r.Max, Mean: r.Mean, N: r.N}
	var total int64
	for k, c := range r.Bins {
		ns, err := strconv.ParseInt(k, 10, 64)
		if err != nil || ns < 0 {
			return FioLat{}, fmt.Errorf("bad latency bin %q", k)
		}
		if c < 0 || c > maxFioOps {
			return FioLat{}, fmt.Errorf("bad count %d in latency bin %s", c, k)
		}
		if total += c; total > maxFioOps {
			return FioLat{}, fmt.Errorf("latency bins count more than %d ops", int64(maxFioOps))
		}
		if c > 0 {
			l.Bins = append(l.Bins, FioBin{Ns: ns, Count: c})
		}
	}
	sort.Slice(l.Bins, func(i, j int) bool { return l.Bins[i].Ns < l.Bins[j].Ns })
	return l, nil
}
