package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prism-hpc/prism/report"
)

// compareOptions are the inputs of prism compare.
type compareOptions struct {
	bases     []string // earlier runs, oldest first
	new       string
	threshold float64 // relative: 0.10 = 10%
	json      bool
	labels    []string
}

func cmdCompare(_ context.Context, args []string, stdout, stderr io.Writer) error {
	o := compareOptions{threshold: report.DefaultThreshold}
	fs := newFlags("compare")
	fs.Func("threshold", "relative change tolerated before a metric counts (`PCT`, e.g. 10% or 25)", func(s string) error {
		v, err := parseThreshold(s)
		o.threshold = v
		return err
	})
	fs.BoolVar(&o.json, "json", false, "print the comparison as JSON")
	labels := fs.String("label", "", "`base,new` names for the base (the first, with several) and the new run (default: run ids)")
	baseDir := fs.String("base-dir", "", "take every `DIR`/*/manifest.json (earlier runs of the plan, e.g. results/<plan>) as base runs")
	pos, err := parseFlags(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(pos) < 1 || (len(pos) < 2 && *baseDir == "") {
		return usageErrorf("%s", usageLine("compare"))
	}
	o.bases, o.new = pos[:len(pos)-1], pos[len(pos)-1]
	if *baseDir != "" {
		found, err := filepath.Glob(filepath.Join(*baseDir, "*", "manifest.json"))
		if err != nil {
			return usageErrorf("compare: --base-dir %s: %v", *baseDir, err)
		}
		newAbs, _ := filepath.Abs(o.new)
		for _, f := range found {
			// The new run may sit in the same directory: it is not its
			// own history.
			if abs, _ := filepath.Abs(f); abs != newAbs {
				o.bases = append(o.bases, f)
			}
		}
		if len(o.bases) == 0 {
			return usageErrorf("compare: --base-dir %s: no */manifest.json other than the new run's", *baseDir)
		}
	}
	if *labels != "" {
		o.labels = strings.Split(*labels, ",")
		if len(o.labels) != 2 {
			return usageErrorf("compare: --label wants two names, base,new")
		}
	}
	c, err := runCompare(o)
	if err != nil {
		return asUsage(fmt.Errorf("compare: %w", err))
	}
	if len(o.bases) == 1 && !o.json {
		for _, w := range c.Warnings {
			if strings.HasPrefix(w, "one base run") {
				fmt.Fprintf(stderr, "prism compare: warning: %s\n", w)
			}
		}
	}
	if o.json {
		b, err := json.MarshalIndent(c, "", "  ")
		if err != nil {
			return err
		}
		if _, err := stdout.Write(append(b, '\n')); err != nil {
			return err
		}
	} else if err := c.WriteText(stdout); err != nil {
		return err
	}
	if c.Regressed() {
		return errReported
	}
	return nil
}

// runCompare reads every manifest (a truncated or foreign file is an
// error naming it) and compares the new run against the bases, which must
// be runs of the same plan, schema version and rank count.
func runCompare(o compareOptions) (*report.Comparison, error) {
	new, err := report.ReadManifest(o.new)
	if err != nil {
		return nil, err
	}
	var bases []*report.Manifest
	for _, path := range o.bases {
		b, err := report.ReadManifest(path)
		if err != nil {
			return nil, err
		}
		if err := report.Comparable(b, new); err != nil {
			return nil, fmt.Errorf("%s: %w (new run %s)", path, err, o.new)
		}
		bases = append(bases, b)
	}
	co := report.CompareOptions{Threshold: o.threshold}
	if len(o.labels) == 2 {
		co.BaseLabel, co.NewLabel = o.labels[0], o.labels[1]
	}
	return report.CompareHistory(bases, new, co), nil
}

// parseThreshold reads "10%", "10" (both 10%) or "2.5%".
func parseThreshold(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "%"), 64)
	if err != nil || v <= 0 || v >= 1000 {
		return 0, fmt.Errorf("%q: want a percentage above 0, e.g. 10%%", s)
	}
	return v / 100, nil
}
