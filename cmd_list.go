package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/all"
	"github.com/prism-hpc/prism/phases/blockio"
	"github.com/prism-hpc/prism/report"
)

func cmdList(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("list")
	width := fs.Int("width", 0, "wrap lines at `N` columns (default: the terminal's width, 100 when stdout is not a terminal)")
	pos, err := parseFlags(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if *width == 0 {
		*width = outputWidth(stdout)
	}
	if *width < 40 {
		return usageErrorf("list: --width %d: at least 40 columns", *width)
	}
	reg := all.Registry()
	kinds, err := selectKinds(reg, pos)
	if err != nil {
		return usageErrorf("list: %v", err)
	}
	writeList(stdout, reg, kinds, len(pos) == 0, *width)
	return nil
}

// selectKinds resolves `prism list` arguments, each a kind or a family
// (blockio is both: the family's kinds are listed), to the kinds to print
// in the registry's order; no argument selects every kind.
func selectKinds(reg *phases.Registry, names []string) ([]phases.Kind, error) {
	if len(names) == 0 {
		return reg.Kinds(), nil
	}
	var families []string
	for _, k := range reg.Kinds() {
		if !slices.Contains(families, k.Family) {
			families = append(families, k.Family)
		}
	}
	want := map[string]bool{}
	for _, n := range names {
		matched := false
		for _, k := range reg.Kinds() {
			if k.Name == n || k.Family == n {
				want[k.Name], matched = true, true
			}
		}
		if !matched {
			return nil, fmt.Errorf("unknown kind or family %q (kinds: %s; families: %s)", n, strings.Join(reg.Names(), ", "), strings.Join(families, ", "))
		}
	}
	var out []phases.Kind
	for _, k := range reg.Kinds() {
		if want[k.Name] {
			out = append(out, k)
		}
	}
	return out, nil
}

// writeList prints kinds with their parameters, every line at most width
// columns (a word longer than a line is kept whole); full adds the units,
// the [plan] keys and the keys of every [[phase]].
func writeList(w io.Writer, reg *phases.Registry, kinds []phases.Kind, full bool, width int) {
	if full {
		fmt.Fprintln(w, "units")
		writeParams(w, []phases.Param{{Key: "size", Doc: sizeUnitsDoc}, {Key: "duration", Doc: durationUnitsDoc}}, width)
		fmt.Fprintln(w, "\n[plan] keys")
		h := phases.DefaultHeader()
		writeParams(w, phases.Params(&h), width)
		fmt.Fprintln(w, "\nkeys of every [[phase]]")
		writeParams(w, phases.Params(&phases.Common{Iterations: 1}), width)
		fmt.Fprintln(w, "  [phase.expect] keys")
		writeParams(w, append(phases.Params(&phases.Expect{}), phases.Param{Key: "<op>", Type: "table",
			Doc: "[phase.expect.<op>]: the keys above but min_au, checked against that op type alone (e.g. [phase.expect.write] p99 = \"20ms\")"}), width)
	}
	family := ""
	fio := false
	for i, k := range kinds {
		if k.Family != family {
			family = k.Family
			if full || i > 0 {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "%s family\n", family)
		}
		fio = fio || k.Name == "fio"
		for _, line := range report.WrapWords(k.Name+": "+k.Summary, width-2, width-6) {
			if strings.HasPrefix(line, k.Name+": ") {
				fmt.Fprintf(w, "  %s\n", line)
			} else {
				fmt.Fprintf(w, "      %s\n", line)
			}
		}
		writeParams(w, phases.Params(k.New().Config()), width)
	}
	if fio {
		// fio runs as root beside prism: say what it may be told to do.
		fmt.Fprintf(w, "\n%s\n%s\n", strings.Join(report.WrapWords("fio options a fio phase accepts (an allow-list: no programs run, no files read or written outside the rank's directory, no host reconfiguration; include, ${...} and $ expansion, exec*, exec/external engines, absolute or escaping paths and log files, triggers and daemonize are refused):", width, width), "\n"),
			wrapWords(strings.Join(blockio.FioAllowedOptions(), " "), width, "    "))
	}
}

// writeParams prints one block of parameters as aligned columns (key,
// type, default) and the doc wrapped in the last column; when the columns
// leave the doc less than 40 columns, it goes on the lines below instead.
func writeParams(w io.Writer, params []phases.Param, width int) {
	kw, tw, dw := 0, 0, 0
	for _, p := range params {
		kw, tw, dw = max(kw, len(p.Key)), max(tw, len(p.Type)), max(dw, len(p.Default))
	}
	cols := func(p phases.Param) string {
		s := fmt.Sprintf("    %-*s", kw, p.Key)
		if tw > 0 {
			s += fmt.Sprintf("  %-*s", tw, p.Type)
		}
		if dw > 0 {
			s += fmt.Sprintf("  %-*s", dw, p.Default)
		}
		return s + "  "
	}
	for _, p := range params {
		head := cols(p)
		if width-len(head) >= 40 {
			for i, line := range report.WrapWords(p.Doc, width-len(head), width-len(head)) {
				if i == 0 {
					fmt.Fprintf(w, "%s%s\n", head, line)
				} else {
					fmt.Fprintf(w, "%*s%s\n", len(head), "", line)
				}
			}
			continue
		}
		fmt.Fprintln(w, strings.TrimRight(head, " "))
		for _, line := range report.WrapWords(p.Doc, width-8, width-8) {
			fmt.Fprintf(w, "        %s\n", line)
		}
	}
}

// outputWidth is the terminal's width when w is one, else 100.
func outputWidth(w io.Writer) int {
	if f, ok := w.(*os.File); ok {
		if n := terminalWidth(f); n > 0 {
			return max(n, 40)
		}
	}
	return 100
}

// sizeUnitsDoc and durationUnitsDoc are what `prism list` says about the
// units of the "size" and "duration" parameters.
const (
	sizeUnitsDoc = "a byte count (4096) or a string with a unit, read as fio reads it: K = KB = 1024, M = MB = 1024^2, G = GB, T = TB, P = PB" +
		" (powers of 1024 unless [plan] kb_base = 1000, which makes them powers of 1000); KiB = Ki = 1024, MiB, GiB, TiB, PiB always powers of 1024"
	durationUnitsDoc = "Go syntax with a unit: \"300ms\", \"5s\", \"2m30s\" (a bare number is refused, except 0)"
)

// wrapWords breaks s into lines of at most width columns, each indented
// (report.WrapWords: a word longer than a line stays whole).
func wrapWords(s string, width int, indent string) string {
	lines := report.WrapWords(s, width-len(indent), width-len(indent))
	for i := range lines {
		lines[i] = indent + lines[i]
	}
	return strings.Join(lines, "\n")
}
