package main

import (
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/prism-hpc/prism/phases"
)

func cmdList(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	writeList(stdout, phases.Default())
	return exitOK
}

func writeList(w io.Writer, reg *phases.Registry) {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	section := func(title string, params []phases.Param) {
		fmt.Fprintf(tw, "%s\n", title)
		for _, p := range params {
			fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\n", p.Key, p.Type, p.Default, p.Doc)
		}
	}
	section("[plan] keys", func() []phases.Param { h := phases.DefaultHeader(); return phases.Params(&h) }())
	fmt.Fprintln(tw)
	section("keys of every [[phase]]", phases.Params(&phases.Common{Iterations: 1}))
	section("  [phase.expect] keys", phases.Params(&phases.Expect{}))
	family := ""
	for _, k := range reg.Kinds() {
		if k.Family != family {
			family = k.Family
			fmt.Fprintf(tw, "\n%s family\n", family)
		}
		fmt.Fprintf(tw, "  %s\t\t\t%s\n", k.Name, k.Summary)
		for _, p := range phases.Params(k.New().Config()) {
			fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\n", p.Key, p.Type, p.Default, p.Doc)
		}
	}
	tw.Flush()
}
