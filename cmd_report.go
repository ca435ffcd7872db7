package main

import (
	"bytes"
	"flag"
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
}

func cmdReport(args []string, stdout, stderr io.Writer) int {
	var o reportOptions
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.out, "out", "", "write the HTML to `FILE` (default: report.html next to the manifest when one is given, else ./report.html)")
	labels := fs.String("label", "", "comma-separated `names` for the runs, in the order of the manifests (default: run ids)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) == 0 {
		fmt.Fprintf(stderr, "usage: prism report [--out FILE] [--label a,b] manifest.json [more.json …]\n")
		return exitUsage
	}
	o.manifests = pos
	if *labels != "" {
		o.labels = strings.Split(*labels, ",")
		if len(o.labels) != len(pos) {
			fmt.Fprintf(stderr, "prism report: %d labels for %d manifests\n", len(o.labels), len(pos))
			return exitUsage
		}
	}
	path, err := runReport(o)
	if err != nil {
		fmt.Fprintf(stderr, "prism report: %v\n", err)
		return exitUsage
	}
	fmt.Fprintf(stdout, "report: %s\n", path)
	return exitOK
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
