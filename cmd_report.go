package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/prism-hpc/prism/report"
)

// reportOptions are the inputs of prism report.
type reportOptions struct {
	out       string   // --out; default report.html next to the first manifest
	labels    []string // --label a,b: one per manifest
	manifests []string
	summary   bool // --summary: print the text summaries, no HTML
	wide      bool // --wide: every column of the summaries
}

func cmdReport(_ context.Context, args []string, stdout, stderr io.Writer) error {
	var o reportOptions
	fs := newFlags("report")
	fs.StringVar(&o.out, "out", "", "write the HTML to `FILE` (default: report.html next to the manifest when one is given, else ./report.html)")
	labels := fs.String("label", "", "comma-separated `names` for the runs, in the order of the manifests (default: run ids)")
	fs.BoolVar(&o.summary, "summary", false, "print each manifest's text summary (as prism run does) instead of writing the HTML")
	fs.BoolVar(&o.wide, "wide", false, "with --summary: every column (kind, errors, mean, p90, p99.9, cache) and whole names; by default the summary fits 100 columns")
	pos, err := parseFlags(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageErrorf("%s", usageLine("report"))
	}
	if o.wide && !o.summary {
		return usageErrorf("report: --wide shapes the text summary: give --summary too")
	}
	if o.summary {
		for i, p := range pos {
			m, err := report.ReadManifest(p)
			if err != nil {
				return asUsage(fmt.Errorf("report: %w", err))
			}
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			if err := report.WriteSummaryWith(stdout, m, report.SummaryOptions{Wide: o.wide}); err != nil {
				return err
			}
		}
		return nil
	}
	o.manifests = pos
	if *labels != "" {
		o.labels = strings.Split(*labels, ",")
		if len(o.labels) != len(pos) {
			return usageErrorf("report: %d labels for %d manifests", len(o.labels), len(pos))
		}
	}
	path, err := runReport(o)
	if err != nil {
		return asUsage(fmt.Errorf("report: %w", err))
	}
	_, err = fmt.Fprintf(stdout, "report: %s\n", path)
	return err
}

// runReport renders the manifests into one HTML page (an overlay when there
// are several) and returns where it was written.
func runReport(o reportOptions) (string, error) {
	var runs []*report.Manifest
	for _, p := range o.manifests {
		m, err := report.ReadManifest(p)
		if err != nil {
			return "", err
		}
		runs = append(runs, m)
	}
	out := o.out
	if out == "" {
		out = "report.html"
		if len(o.manifests) == 1 {
			out = filepath.Join(filepath.Dir(o.manifests[0]), "report.html")
		}
	}
	var buf bytes.Buffer
	if err := report.WriteHTMLWith(&buf, runs, report.HTMLOptions{Labels: o.labels}); err != nil {
		return "", err
	}
	if err := report.WriteFileAtomic(out, buf.Bytes()); err != nil {
		return "", err
	}
	return out, nil
}
