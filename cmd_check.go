package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/report"
)

func cmdCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("n", 1, "number of ranks to size the plan for")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) > 1 || *n < 1 {
		fmt.Fprintf(stderr, "usage: prism check [-n N] [plan.toml]\n")
		return exitUsage
	}
	plan := ""
	if len(pos) == 1 {
		plan = pos[0]
	}
	src, name, err := loadSource(plan)
	var p *phases.Plan
	if err == nil {
		p, err = phases.DecodePlan(phases.Default(), name, src)
	}
	if err != nil {
		fmt.Fprintf(stderr, "prism: %v\n", err)
		return exitUsage
	}
	if err := writeCheck(stdout, p, *n); err != nil {
		fmt.Fprintf(stderr, "prism: %v\n", err)
		return exitUsage
	}
	return exitOK
}

// writeCheck prints the resolved plan: every phase with its parameters as
// they will run, and the files and bytes it puts on the storage.
func writeCheck(w io.Writer, p *phases.Plan, ranks int) error {
	h := p.Header
	fmt.Fprintf(w, "plan %s (%s): %d phases, sized for %d ranks\n", h.Name, p.File, len(p.Phases), ranks)
	fmt.Fprintf(w, "workdir %q  results %q  drop_caches %s  keep %v  coordination_timeout %s\n\n",
		orDefault(h.Workdir, "."), h.Results, h.DropCaches, h.Keep, h.CoordinationTimeout)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tname\tkind\tranks\titer\twarmup\tfiles/rank\tbytes/rank\tfiles total\tbytes total")
	var peakFiles, totalBytes int64
	for _, s := range p.Phases {
		sizes := []int(s.Ranks)
		if len(sizes) == 0 {
			sizes = []int{ranks}
		}
		for _, k := range sizes {
			if k > ranks {
				return fmt.Errorf("%s:%d: phase %d (%s) asks for %d ranks; check with -n %d or more", p.File, s.Line, s.Index+1, s.Name, k, k)
			}
			files, bytes := "-", "-"
			tf, tb := "-", "-"
			if fp, ok := s.Phase.(phases.Footprinter); ok {
				f := fp.Footprint(k)
				files, bytes = fmt.Sprint(f.Files), report.FormatBytes(f.Bytes)
				tf, tb = fmt.Sprint(f.Files*int64(k)), report.FormatBytes(f.Bytes*int64(k))
				if f.Files*int64(k) > peakFiles {
					peakFiles = f.Files * int64(k)
				}
				totalBytes += f.Bytes * int64(k) * int64(s.Iterations+s.Warmup)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", s.Index+1, s.Name, s.Kind, k, s.Iterations, s.Warmup, files, bytes, tf, tb)
		}
		var params []string
		for _, prm := range phases.Params(s.Phase.Config()) {
			params = append(params, prm.Key+"="+prm.Default)
		}
		if s.DropCaches != "" {
			params = append(params, "drop_caches="+s.DropCaches)
		}
		fmt.Fprintf(tw, "\t  %s\t\t\t\t\t\t\t\t\n", strings.Join(params, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\npeak files of one phase: %d; bytes written over all iterations: %s\n", peakFiles, report.FormatBytes(totalBytes))
	return nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
