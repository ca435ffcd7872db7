package main

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/report"
)

// The environment section of `prism check`: what this host says about
// running the plan here, before any rank starts. A problem (the workdir
// is missing or not writable, the plan's peak does not fit, drop_caches =
// "root" without root) means prism run would fail: check exits 1. A
// warning is something that runs but may not measure what the user thinks.

// planRanks is the rank count a plan needs: its largest sweep, or what a
// grouped phase and its partner need side by side (at least 1).
func planRanks(p *phases.Plan) int {
	n := 1
	for _, s := range p.Phases {
		for _, k := range s.Ranks {
			n = max(n, k)
		}
		if s.Group != "" && s.Index+1 < len(p.Phases) {
			need := s.Ranks[0] + 1
			if next := p.Phases[s.Index+1]; len(next.Ranks) == 1 {
				need = s.Ranks[0] + next.Ranks[0]
			}
			n = max(n, need)
		}
	}
	return n
}

// peak is the most a plan has on the storage at once, by the phases' own
// footprints (phases.Footprinter) over all their ranks: one phase at one
// rank count, or a grouped phase and its partner together.
type peak struct {
	bytes, files           int64
	bytesWhere, filesWhere string
}

func planPeak(p *phases.Plan, ranks int) peak {
	var pk peak
	fp := func(s *phases.Spec, k int) phases.Footprint {
		x, _ := s.Footprint(k)
		return phases.Footprint{Files: x.Files * int64(k), Bytes: x.Bytes * int64(k)}
	}
	note := func(f phases.Footprint, where string) {
		if f.Bytes > pk.bytes {
			pk.bytes, pk.bytesWhere = f.Bytes, where
		}
		if f.Files > pk.files {
			pk.files, pk.filesWhere = f.Files, where
		}
	}
	for i, s := range p.Phases {
		if i > 0 && p.Phases[i-1].Group != "" {
			continue // counted with the grouped phase before it
		}
		if s.Group != "" && i+1 < len(p.Phases) {
			next := p.Phases[i+1]
			k := s.Ranks[0]
			m := ranks - k
			if len(next.Ranks) == 1 {
				m = next.Ranks[0]
			}
			a, b := fp(s, k), fp(next, max(m, 1))
			note(phases.Footprint{Files: a.Files + b.Files, Bytes: a.Bytes + b.Bytes}, fmt.Sprintf("%s at %d ranks beside %s at %d", s.Name, k, next.Name, m))
			continue
		}
		// A node selection runs on every rank of k hosts: at most all ranks.
		sizes := []int(s.Ranks)
		if len(sizes) == 0 {
			sizes = []int{ranks}
		}
		for _, k := range sizes {
			note(fp(s, k), fmt.Sprintf("%s at %d ranks", s.Name, k))
		}
	}
	return pk
}

// checkWorkdir is the directory prism run would work in: --workdir, else
// the plan's node_local_workdir or workdir, else a temporary directory for
// the embedded default and the current directory for a plan.
func checkWorkdir(p *phases.Plan, flagDir string, embedded bool) (dir string, nodeLocal bool) {
	switch {
	case flagDir != "":
		return flagDir, false
	case p.Header.NodeLocalWorkdir != "":
		return p.Header.NodeLocalWorkdir, true
	case p.Header.Workdir != "":
		return p.Header.Workdir, false
	case embedded:
		return os.TempDir(), false
	}
	return ".", false
}

// writeEnvironment checks this host for the plan and prints the section;
// it returns the problems that would make prism run fail here.
func writeEnvironment(w io.Writer, p *phases.Plan, flagDir string, embedded bool, ranks, width int) []string {
	var warnings, problems []string
	fmt.Fprintf(w, "\nenvironment (this host)\n")
	row := func(name, format string, args ...any) {
		for i, l := range report.WrapWords(fmt.Sprintf(format, args...), width-15, width-15) {
			if i > 0 {
				name = ""
			}
			fmt.Fprintf(w, "  %-12s %s\n", name, l)
		}
	}
	dir, nodeLocal := checkWorkdir(p, flagDir, embedded)
	abs, _ := filepath.Abs(dir)
	workdirOK := true
	if ws, err := phases.CheckWorkdir(dir, p.Header.AllowSharedWorkdir); err != nil {
		row("workdir", "%s: refused", abs)
		problems = append(problems, err.Error())
		workdirOK = false
	} else {
		warnings = append(warnings, ws...)
		// A probe file proves it writable, as the run's first step would.
		f, err := os.CreateTemp(dir, ".prism-check-*")
		if err == nil {
			_, err = f.WriteString("prism check\n")
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if rerr := os.Remove(f.Name()); err == nil {
				err = rerr
			}
		}
		if err != nil {
			row("workdir", "%s: not writable", abs)
			problems = append(problems, fmt.Sprintf("workdir %s is not writable: %v", abs, err))
			workdirOK = false
		} else {
			row("workdir", "%s: exists, writable (a probe file was created and removed)", abs)
		}
	}
	fsType := ""
	if workdirOK {
		if fs, err := pio.StatFS(dir); err == nil {
			fsType = fs.Type
			row("filesystem", "%s on %s (%s)", cmp.Or(fs.Type, "?"), cmp.Or(fs.MountPoint, "?"), cmp.Or(fs.Source, "?"))
		}
		pk := planPeak(p, ranks)
		scope := ""
		if nodeLocal {
			// Each host has its own: the worst case is every rank on one.
			scope = " (node_local_workdir: as if all ranks were on this host)"
			warnings = append(warnings, "node_local_workdir: free space is checked on this host only; every host needs its own ranks' share")
		}
		if free, err := statfsFree(dir); err != nil {
			row("free space", "unknown (%v)", err)
			warnings = append(warnings, fmt.Sprintf("free space and inodes of %s unknown: %v", abs, err))
		} else {
			row("free space", "%s; the plan's peak %s%s%s", report.FormatBytes(int64(min(free.bytes, 1<<62))), report.FormatBytes(pk.bytes), where(pk.bytesWhere), scope)
			switch {
			case pk.bytes > 0 && uint64(pk.bytes) > free.bytes:
				problems = append(problems, fmt.Sprintf("not enough space in %s: the plan needs %s at its peak (%s), %s is free", abs, report.FormatBytes(pk.bytes), pk.bytesWhere, report.FormatBytes(int64(free.bytes))))
			case pk.bytes > 0 && float64(pk.bytes) > 0.8*float64(free.bytes):
				warnings = append(warnings, fmt.Sprintf("the plan's peak (%s) takes more than 80%% of the free space of %s (%s)", report.FormatBytes(pk.bytes), abs, report.FormatBytes(int64(free.bytes))))
			}
			if free.totalFiles == 0 {
				row("free inodes", "not reported by this filesystem; the plan's peak %d files%s", pk.files, where(pk.filesWhere))
			} else {
				row("free inodes", "%d; the plan's peak %d files%s%s", free.files, pk.files, where(pk.filesWhere), scope)
				if uint64(pk.files) > free.files {
					problems = append(problems, fmt.Sprintf("not enough inodes in %s: the plan creates %d files at its peak (%s), %d inodes are free", abs, pk.files, pk.filesWhere, free.files))
				}
			}
		}
	}
	// The cache policy: "root" fails without root; "auto" falls back.
	root := pio.CanDropCaches()
	held := pio.CacheHeld(fsType)
	var policies []string
	for _, s := range p.Phases {
		req := cmp.Or(s.DropCaches, p.Header.DropCaches, "auto")
		if !slices.Contains(policies, req) {
			policies = append(policies, req)
		}
		if req == "root" && !root && !held {
			problems = append(problems, fmt.Sprintf("phase %d (%s): drop_caches = \"root\" needs root to write /proc/sys/vm/drop_caches: run as root, or use \"auto\" or \"fadvise\"", s.Index+1, s.Name))
		}
	}
	switch {
	case held:
		row("caches", "%s keeps file data in memory: no cache policy can make reads cold", fsType)
		warnings = append(warnings, fmt.Sprintf("the workdir is on %s: reads are served from memory whatever drop_caches says", fsType))
	case root:
		row("caches", "root: drop_caches can sync and drop the page cache before each timed run (policies %v)", policies)
	default:
		row("caches", "not root: caches cannot be dropped; posix_fadvise(DONTNEED) per file instead (policies %v)", policies)
		if slices.Contains(policies, "auto") {
			warnings = append(warnings, "not root: drop_caches = \"auto\" advises the kernel per file for phases that read file data, and leaves metadata phases' caches warm")
		}
	}
	// O_DIRECT: a phase with direct = true fails in setup where the
	// workdir's filesystem refuses it; a probe file says so now.
	var direct []string
	for _, s := range p.Phases {
		if usesDirect(phases.ParamValues(s)) {
			direct = append(direct, fmt.Sprintf("%d (%s)", s.Index+1, s.Name))
		}
	}
	if len(direct) > 0 && workdirOK {
		if err := probeDirect(dir); err != nil {
			row("O_DIRECT", "refused: %v", err)
			problems = append(problems, fmt.Sprintf("phase %s: direct = true, but %s does not take O_DIRECT: %v", strings.Join(direct, ", "), abs, err))
		} else {
			row("O_DIRECT", "supported (phase %s; a probe file was written with O_DIRECT and removed)", strings.Join(direct, ", "))
		}
	}
	problems, warnings = checkMemory(p, ranks, row, problems, warnings)
	if len(warnings) > 0 {
		fmt.Fprintln(w, "warnings:")
		for _, s := range warnings {
			fmt.Fprintln(w, wrapWords("- "+s, width, "    ")[2:])
		}
	}
	if len(problems) > 0 {
		fmt.Fprintln(w, "problems (prism run would fail here):")
		for _, s := range problems {
			fmt.Fprintln(w, wrapWords("- "+s, width, "    ")[2:])
		}
	} else {
		fmt.Fprintln(w, "this host can run the plan")
	}
	return problems
}

// checkMemory prints the plan's memory estimate (phases.PhaseMemory: per
// rank histograms of every worker, prepared names, buffers, tensors) at
// its largest, as if every rank of that phase ran on this host as prism
// run -n does, against the limit prism run applies ([plan] max_memory or
// half the host's memory shared by its ranks: a problem, the run refuses)
// and against MemAvailable (a warning: the page cache and other jobs hold
// the rest).
func checkMemory(p *phases.Plan, ranks int, row func(string, string, ...any), problems, warnings []string) ([]string, []string) {
	total, avail, err := memInfo()
	if err != nil {
		row("memory", "unknown (%v)", err)
		return problems, warnings
	}
	var peak, peakPer int64
	peakWhere := ""
	for _, s := range p.Phases {
		sizes := []int(s.Ranks)
		if len(sizes) == 0 {
			sizes = []int{ranks}
		}
		for _, k := range sizes {
			need, keys, ok := phases.PhaseMemory(s, k)
			if !ok {
				continue
			}
			if need*int64(k) > peak {
				peak, peakPer, peakWhere = need*int64(k), need, fmt.Sprintf("%s at %d ranks", s.Name, k)
			}
			limit := phases.RankMemoryLimit(p.Header.MaxMemory, total, k)
			if limit > 0 && need > limit {
				why := fmt.Sprintf("half of this host's %s shared by %d ranks", report.FormatBytes(total), k)
				if p.Header.MaxMemory > 0 {
					why = "[plan] max_memory"
				}
				problems = append(problems, fmt.Sprintf("phase %d (%s) needs about %s per rank at %d ranks, more than the %s of %s: prism run refuses it; lower %s",
					s.Index+1, s.Name, report.FormatBytes(need), k, report.FormatBytes(limit), why, keys))
			}
		}
	}
	if peak == 0 {
		row("memory", "no phase estimates its memory; this host has %s (%s available)", report.FormatBytes(total), report.FormatBytes(avail))
		return problems, warnings
	}
	row("memory", "about %s per rank, %s in all at the peak (%s) if its ranks share this host; this host has %s, %s available",
		report.FormatBytes(peakPer), report.FormatBytes(peak), peakWhere, report.FormatBytes(total), report.FormatBytes(avail))
	if avail > 0 && peak > avail {
		warnings = append(warnings, fmt.Sprintf("the plan's peak memory estimate %s (%s) is more than this host's available %s: spread the ranks over more hosts or lower the phase's keys", report.FormatBytes(peak), peakWhere, report.FormatBytes(avail)))
	}
	return problems, warnings
}

// usesDirect tells whether a phase's params ask for O_DIRECT: direct =
// true, or a fio option direct=1.
func usesDirect(params map[string]any) bool {
	if v, _ := params["direct"].(bool); v {
		return true
	}
	opts, _ := params["options"].([]any)
	for _, o := range opts {
		if s, _ := o.(string); strings.ReplaceAll(s, " ", "") == "direct=1" {
			return true
		}
	}
	return false
}

func where(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

// fsFree is what statfs says is left for an unprivileged user.
type fsFree struct {
	bytes, files, totalFiles uint64
}
