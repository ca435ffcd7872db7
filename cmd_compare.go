package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/prism-hpc/prism/report"
)

// compareOptions are the inputs of prism compare.
type compareOptions struct {
	base, new string
	threshold float64 // relative: 0.10 = 10%
	json      bool
	labels    []string
}

func cmdCompare(args []string, stdout, stderr io.Writer) int {
	o := compareOptions{threshold: report.DefaultThreshold}
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Func("threshold", "relative change tolerated before a metric counts (`PCT`, e.g. 10% or 25)", func(s string) error {
		v, err := parseThreshold(s)
		o.threshold = v
		return err
	})
	fs.BoolVar(&o.json, "json", false, "print the comparison as JSON")
	labels := fs.String("label", "", "`base,new` names for the two runs (default: run ids)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) != 2 {
		fmt.Fprintf(stderr, "usage: prism compare [--threshold 10%%] [--json] [--label base,new] base.json new.json\n")
		return exitUsage
	}
	o.base, o.new = pos[0], pos[1]
	if *labels != "" {
		o.labels = strings.Split(*labels, ",")
		if len(o.labels) != 2 {
			fmt.Fprintf(stderr, "prism compare: --label wants two names, base,new\n")
			return exitUsage
		}
	}
	c, err := runCompare(o)
	if err != nil {
		fmt.Fprintf(stderr, "prism compare: %v\n", err)
		return exitUsage
	}
	if o.json {
		b, err := json.MarshalIndent(c, "", "  ")
		if err != nil {
			fmt.Fprintf(stderr, "prism compare: %v\n", err)
			return exitUsage
		}
		stdout.Write(append(b, '\n'))
	} else if err := c.WriteText(stdout); err != nil {
		fmt.Fprintf(stderr, "prism compare: %v\n", err)
		return exitUsage
	}
	if c.Regressed() {
		return exitFailed
	}
	return exitOK
}

// runCompare reads both manifests and compares them.
func runCompare(o compareOptions) (*report.Comparison, error) {
	base, err := report.ReadManifest(o.base)
	if err != nil {
		return nil, err
	}
	new, err := report.ReadManifest(o.new)
	if err != nil {
		return nil, err
	}
	co := report.CompareOptions{Threshold: o.threshold}
	if len(o.labels) == 2 {
		co.BaseLabel, co.NewLabel = o.labels[0], o.labels[1]
	}
	return report.Compare(base, new, co), nil
}

// parseThreshold reads "10%", "10" (both 10%) or "2.5%".
func parseThreshold(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "%"), 64)
	if err != nil || v <= 0 || v >= 1000 {
		return 0, fmt.Errorf("%q: want a percentage above 0, e.g. 10%%", s)
	}
	return v / 100, nil
}
