// Command bench measures prism's S3 client beside boto3 against one local
// VersityGW: PUT and GET of n objects of a size at concurrency c, both
// sides interleaved round by round, and a concurrency sweep of prism alone
// with the server's CPU time, so a client limit can be told from a server
// limit. See README.md.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	ps3 "github.com/prism-hpc/prism/io/s3"
	"github.com/prism-hpc/prism/io/s3/s3test"
	"github.com/prism-hpc/prism/report"
)

// result is one side's measurement of one cell.
type result struct {
	Ops       int     `json:"ops"`
	Wall      float64 `json:"wall_seconds"`
	P50       int64   `json:"p50_ns"`
	P99       int64   `json:"p99_ns"`
	CPU       float64 `json:"cpu_seconds"` // client process, timed part
	ServerCPU float64 `json:"server_cpu_seconds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	MiBPerSec float64 `json:"mib_per_sec"`
}

func (r *result) finish(size int) {
	r.OpsPerSec = float64(r.Ops) / r.Wall
	r.MiBPerSec = r.OpsPerSec * float64(size) / (1 << 20)
}

type cell struct {
	size, conc int
	op         string
}

func main() {
	rounds := flag.Int("rounds", 3, "interleaved rounds")
	sizesF := flag.String("sizes", "4096,1048576", "object sizes in bytes")
	concsF := flag.String("conc", "1,8,32", "concurrencies")
	sweepF := flag.String("sweep", "1,2,4,8,16,32,64", "prism-only concurrency sweep for the server limit (4 KiB); empty to skip")
	budget := flag.Int("bytes", 256<<20, "bytes moved per cell (ops = bytes/size, capped by -max-ops)")
	maxOps := flag.Int("max-ops", 2000, "ops per cell at most")
	python := flag.String("python", "/usr/bin/python3", "Python with Debian's python3-boto3")
	jsonOut := flag.String("json", "", "also write every measurement to this file")
	ckptF := flag.Int("ckpt", 256<<20, "checkpoint-over-S3 figure: bytes of one checkpoint file, saved by a streaming multipart upload and loaded by ranged GETs (prism's Upload and RangeReader) beside boto3's upload_fileobj and download_fileobj; 0 to skip")
	partF := flag.Int("part", 16<<20, "part size of the checkpoint figure (both sides)")
	pconcF := flag.Int("part-conc", 4, "parts in flight in the checkpoint figure (both sides)")
	flag.Parse()
	ckptSize, ckptPart, ckptConc = *ckptF, *partF, *pconcF
	if err := run(*rounds, ints(*sizesF), ints(*concsF), ints(*sweepF), *budget, *maxOps, *python, *jsonOut); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func ints(s string) []int {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v <= 0 {
			fmt.Fprintf(os.Stderr, "bench: %q is not a positive integer\n", f)
			os.Exit(2)
		}
		out = append(out, v)
	}
	return out
}

func run(rounds int, sizes, concs, sweep []int, budget, maxOps int, python, jsonOut string) error {
	peer, err := peerPath()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "s3-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	t0 := time.Now()
	srv, err := s3test.Start(s3test.Options{Dir: dir})
	if err != nil {
		return err
	}
	defer srv.Stop()
	fmt.Printf("versitygw %s at %s (pid %d, started in %v), data in %s, GOMAXPROCS %d\n",
		s3test.Version, srv.Endpoint, srv.PID(), time.Since(t0).Round(time.Millisecond), srv.DataDir, runtime.GOMAXPROCS(0))
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v)
	}
	ctx := context.Background()
	maxConc := slices.Max(append(slices.Clone(concs), sweep...))
	c, err := ps3.New(ctx, ps3.Config{Bucket: "bench", Endpoint: srv.Endpoint, PathStyle: true, MaxIdleConns: maxConc})
	if err != nil {
		return err
	}
	if err := c.CreateBucket(ctx); err != nil {
		return err
	}

	var cells []cell
	for _, size := range sizes {
		for _, conc := range concs {
			cells = append(cells, cell{size, conc, "put"}, cell{size, conc, "get"})
		}
	}
	type pair struct{ prism, boto []result }
	res := map[cell]*pair{}
	for _, k := range cells {
		res[k] = &pair{}
	}
	for round := range rounds {
		for _, size := range sizes {
			n := min(maxOps, max(budget/size, 1))
			for _, conc := range concs {
				prefix := fmt.Sprintf("r%d/s%d/c%d", round, size, conc)
				// Alternate which side goes first, so neither always
				// meets the server's page cache and log state second.
				sides := []string{"prism", "boto3"}
				if round%2 == 1 {
					sides = []string{"boto3", "prism"}
				}
				for _, side := range sides {
					for _, op := range []string{"put", "get"} {
						var r result
						var err error
						if side == "prism" {
							r, err = prismCell(ctx, c, srv, op, prefix+"/p", size, n, conc)
						} else {
							r, err = botoCell(python, peer, srv, op, prefix+"/b", size, n, conc)
						}
						if err != nil {
							return fmt.Errorf("round %d %s %s size %d conc %d: %w", round, side, op, size, conc, err)
						}
						p := res[cell{size, conc, op}]
						if side == "prism" {
							p.prism = append(p.prism, r)
						} else {
							p.boto = append(p.boto, r)
						}
					}
				}
			}
		}
		fmt.Printf("round %d done\n", round+1)
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "size\top\tconc\tprism ops/s\tMiB/s\tp50 ms\tp99 ms\tcpu µs/op\tboto3 ops/s\tMiB/s\tp50 ms\tp99 ms\tcpu µs/op\tratio (min–max)\tsrv cpu%\t")
	for _, k := range cells {
		p := res[k]
		var ratios []float64
		for i := range p.prism {
			ratios = append(ratios, p.prism[i].OpsPerSec/p.boto[i].OpsPerSec)
		}
		pm, bm := medianResult(p.prism), medianResult(p.boto)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.1f\t%.2f\t%.2f\t%.0f\t%.0f\t%.1f\t%.2f\t%.2f\t%.0f\t%.2f× (%.2f–%.2f)\t%.0f\t\n",
			sizeName(k.size), k.op, k.conc,
			pm.OpsPerSec, pm.MiBPerSec, ms(pm.P50), ms(pm.P99), pm.CPU/float64(pm.Ops)*1e6,
			bm.OpsPerSec, bm.MiBPerSec, ms(bm.P50), ms(bm.P99), bm.CPU/float64(bm.Ops)*1e6,
			median(ratios), slices.Min(ratios), slices.Max(ratios), 100*pm.ServerCPU/pm.Wall)
	}
	tw.Flush()

	var ckptRes map[string]any
	if ckptSize > 0 {
		if ckptRes, err = ckptFigure(ctx, c, srv, python, peer, rounds); err != nil {
			return err
		}
	}

	var sweepRes []map[string]any
	if len(sweep) > 0 {
		fmt.Println("\nprism alone, 4 KiB, concurrency sweep (median of the rounds); srv cpu% is VersityGW's CPU time over the wall time (200% = both cores)")
		tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "op\tconc\tops/s\tp50 ms\tp99 ms\tclient cpu%\tsrv cpu%\t")
		n := min(maxOps, budget/4096)
		for _, op := range []string{"put", "get"} {
			for _, conc := range sweep {
				var rs []result
				for round := range rounds {
					r, err := prismCell(ctx, c, srv, op, fmt.Sprintf("sweep/r%d/c%d", round, conc), 4096, n, conc)
					if err != nil {
						return err
					}
					rs = append(rs, r)
				}
				m := medianResult(rs)
				fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.2f\t%.2f\t%.0f\t%.0f\t\n", op, conc, m.OpsPerSec, ms(m.P50), ms(m.P99), 100*m.CPU/m.Wall, 100*m.ServerCPU/m.Wall)
				sweepRes = append(sweepRes, map[string]any{"op": op, "conc": conc, "runs": rs})
			}
		}
		tw.Flush()
	}
	if jsonOut != "" {
		var all []map[string]any
		for _, k := range cells {
			all = append(all, map[string]any{"size_bytes": k.size, "op": k.op, "conc": k.conc, "prism": res[k].prism, "boto3": res[k].boto})
		}
		b, _ := json.MarshalIndent(map[string]any{"cells": all, "sweep": sweepRes, "checkpoint": ckptRes}, "", " ")
		if err := os.WriteFile(jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// prismCell runs n PUTs or GETs of size bytes at concurrency conc through
// the client: buffers allocated and connections warmed before the clock,
// one Recorder per worker, merged after.
func prismCell(ctx context.Context, c *ps3.Client, srv *s3test.Server, op, prefix string, size, n, conc int) (result, error) {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + "/" + strconv.Itoa(i)
	}
	bufs := make([][]byte, conc)
	recs := make([]*report.Recorder, conc)
	for w := range conc {
		bufs[w] = make([]byte, size)
		fill(bufs[w], uint64(w))
		recs[w] = report.NewRecorder(op)
	}
	// Warm-up: one request per worker, concurrently, so the pool holds
	// conc connections before the clock starts.
	var wg sync.WaitGroup
	errs := make([]error, conc)
	for w := range conc {
		wg.Go(func() {
			k := prefix + "/warm-" + strconv.Itoa(w)
			errs[w] = c.Put(ctx, k, bufs[w])
			if errs[w] == nil && op == "get" {
				_, errs[w] = c.Get(ctx, k, bufs[w])
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return result{}, err
		}
	}
	runtime.GC()
	var next atomic.Int64
	srv0, err := procCPU(srv.PID())
	if err != nil {
		return result{}, err
	}
	cpu0 := selfCPU()
	start := time.Now()
	for w := range conc {
		wg.Go(func() {
			buf, rec := bufs[w], recs[w]
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				t := time.Now()
				var err error
				nb := size
				if op == "put" {
					err = c.Put(ctx, keys[i], buf)
				} else {
					nb, err = c.Get(ctx, keys[i], buf)
				}
				rec.Observe(t, nb, err)
				if err != nil && errs[w] == nil {
					errs[w] = err
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(start).Seconds()
	cpu := selfCPU() - cpu0
	srv1, err := procCPU(srv.PID())
	if err != nil {
		return result{}, err
	}
	for _, err := range errs {
		if err != nil {
			return result{}, err
		}
	}
	for _, r := range recs[1:] {
		recs[0].Merge(r)
	}
	h := recs[0].Hist()
	r := result{Ops: int(recs[0].Ops), Wall: wall, P50: h.ValueAtQuantile(50), P99: h.ValueAtQuantile(99), CPU: cpu, ServerCPU: srv1 - srv0}
	r.finish(size)
	return r, nil
}

// botoCell runs the same cell in the boto3 peer.
func botoCell(python, peer string, srv *s3test.Server, op, prefix string, size, n, conc int) (result, error) {
	cmd := exec.Command(python, peer, op, "bench", prefix, strconv.Itoa(size), strconv.Itoa(n), strconv.Itoa(conc))
	cmd.Env = append(os.Environ(), srv.Env()...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	// The server's CPU is read around the whole child, so it includes the
	// warm-up; the warm-up is conc requests against n timed ones.
	srv0, err := procCPU(srv.PID())
	if err != nil {
		return result{}, err
	}
	if err := cmd.Run(); err != nil {
		return result{}, fmt.Errorf("boto3 peer: %v: %s", err, lastLines(stderr.String(), 5))
	}
	srv1, err := procCPU(srv.PID())
	if err != nil {
		return result{}, err
	}
	var r result
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return result{}, fmt.Errorf("boto3 peer printed %q: %w", out.String(), err)
	}
	if r.Ops != n {
		return result{}, fmt.Errorf("boto3 peer did %d ops, want %d", r.Ops, n)
	}
	r.ServerCPU = srv1 - srv0
	r.finish(size)
	return r, nil
}

func peerPath() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if ok {
		p := filepath.Join(filepath.Dir(file), "boto3_peer.py")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if _, err := os.Stat("io/s3/bench/boto3_peer.py"); err == nil {
		return "io/s3/bench/boto3_peer.py", nil
	}
	return "", fmt.Errorf("boto3_peer.py not found: run from the repository root")
}

func fill(b []byte, seed uint64) {
	x := seed*0x9e3779b97f4a7c15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
}

// selfCPU is this process's user+system CPU seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// procCPU is a process's user+system CPU seconds from /proc/PID/stat.
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may
	// contain spaces: utime and stime are the 12th and 13th of them.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100, nil // USER_HZ is 100 on Linux
}

func medianResult(rs []result) result {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b result) int {
		switch {
		case a.OpsPerSec < b.OpsPerSec:
			return -1
		case a.OpsPerSec > b.OpsPerSec:
			return 1
		}
		return 0
	})
	return s[len(s)/2]
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return strconv.Itoa(n)
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], " | ")
}

// The checkpoint figure's shape (flags).
var ckptSize, ckptPart, ckptConc int

// ckptFigure saves and loads one checkpoint-sized object per side and
// round, interleaved: prism streams it through an Upload in 1 MiB writes
// (a checkpoint writer's tensors) and reads it back through a RangeReader
// in 64 MiB reads (a loader's large tensors); boto3 runs upload_fileobj
// and download_fileobj with the same part size and concurrency.
func ckptFigure(ctx context.Context, c *ps3.Client, srv *s3test.Server, python, peer string, rounds int) (map[string]any, error) {
	size, part, conc := ckptSize, ckptPart, ckptConc
	body := make([]byte, size)
	fill(body, 7)
	bufs := make([][]byte, conc)
	for i := range bufs {
		bufs[i] = make([]byte, part)
	}
	win := make([]byte, part)
	back := make([]byte, size)
	gbps := func(wall float64) float64 { return float64(size) / wall / 1e9 }
	var ps, pl, bs, bl, rs, rl []float64
	for round := range rounds {
		sides := []string{"prism", "boto3"}
		if round%2 == 1 {
			sides = []string{"boto3", "prism"}
		}
		for _, side := range sides {
			key := fmt.Sprintf("ckpt/r%d/%s", round, side)
			if side == "boto3" {
				var w [2]float64
				for i, op := range []string{"usave", "uload"} {
					cmd := exec.Command(python, peer, op, "bench", key, strconv.Itoa(size), strconv.Itoa(conc), strconv.Itoa(part))
					cmd.Env = append(os.Environ(), srv.Env()...)
					var out, stderr bytes.Buffer
					cmd.Stdout, cmd.Stderr = &out, &stderr
					if err := cmd.Run(); err != nil {
						return nil, fmt.Errorf("boto3 peer %s: %v: %s", op, err, lastLines(stderr.String(), 5))
					}
					var r result
					if err := json.Unmarshal(out.Bytes(), &r); err != nil {
						return nil, fmt.Errorf("boto3 peer printed %q: %w", out.String(), err)
					}
					w[i] = r.Wall
				}
				bs, bl = append(bs, gbps(w[0])), append(bl, gbps(w[1]))
				continue
			}
			runtime.GC()
			start := time.Now()
			up, err := c.NewUpload(ctx, key, bufs, ps3.UploadObservers{})
			if err != nil {
				return nil, err
			}
			for off := 0; off < size; off += 1 << 20 {
				if _, err := up.Write(body[off:min(off+1<<20, size)]); err != nil {
					return nil, up.Abort(err)
				}
			}
			if err := up.Close(); err != nil {
				return nil, err
			}
			save := time.Since(start).Seconds()
			start = time.Now()
			r := c.NewRangeReader(key, int64(size), win, conc, nil)
			for off := 0; off < size; off += 64 << 20 {
				b := back[off:min(off+64<<20, size)]
				if n, err := r.ReadAt(ctx, b, int64(off)); err != nil || n != len(b) {
					return nil, fmt.Errorf("prism load: %d of %d bytes: %v", n, len(b), err)
				}
			}
			load := time.Since(start).Seconds()
			if !bytes.Equal(back, body) {
				return nil, fmt.Errorf("prism load: the object read back differs from the one saved")
			}
			ps, pl = append(ps, gbps(save)), append(pl, gbps(load))
		}
	}
	for i := range ps {
		rs, rl = append(rs, ps[i]/bs[i]), append(rl, pl[i]/bl[i])
	}
	fmt.Printf("\ncheckpoint over S3: one %s object, %s parts, %d in flight (median of %d rounds; ratio paired per round, min–max)\n", sizeName(size), sizeName(part), conc, rounds)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "op\tprism GB/s\tboto3 GB/s\tratio (min–max)\t")
	fmt.Fprintf(tw, "save\t%.2f\t%.2f\t%.2f× (%.2f–%.2f)\t\n", median(ps), median(bs), median(rs), slices.Min(rs), slices.Max(rs))
	fmt.Fprintf(tw, "load\t%.2f\t%.2f\t%.2f× (%.2f–%.2f)\t\n", median(pl), median(bl), median(rl), slices.Min(rl), slices.Max(rl))
	tw.Flush()
	return map[string]any{"size_bytes": size, "part_bytes": part, "concurrency": conc,
		"prism_save_gbps": ps, "prism_load_gbps": pl, "boto3_save_gbps": bs, "boto3_load_gbps": bl}, nil
}
