package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/report"
)

// cmdDatasets lists or removes the persistent datasets and checkpoints
// of a workdir (<workdir>/prism-datasets/, phases/persist.go). rm touches
// only a directory that carries one of prism's markers.
func cmdDatasets(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("datasets")
	workdir := fs.String("workdir", ".", "the workdir whose prism-datasets/ to manage")
	asJSON := fs.Bool("json", false, "list as JSON")
	pos, err := parseFlags(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageErrorf("datasets: give list or rm NAME")
	}
	switch pos[0] {
	case "list", "ls":
		if len(pos) > 1 {
			return usageErrorf("datasets list: unexpected argument %q", pos[1])
		}
		ents, err := phases.ListPersistent(*workdir)
		if err != nil {
			return fmt.Errorf("datasets list: %w", err)
		}
		if *asJSON {
			b, _ := json.MarshalIndent(ents, "", "  ")
			_, err := fmt.Fprintf(stdout, "%s\n", b)
			return err
		}
		tw := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "dir\tkind\tstatus\tfiles\tbytes\tcreated\trun")
		for _, e := range ents {
			if e.Info == nil {
				fmt.Fprintf(tw, "%s\t-\t%s\t-\t-\t-\t-\n", e.Dir, e.Status)
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", e.Dir, e.Info.Kind, e.Status, e.Info.Files, report.FormatBytes(e.Info.Bytes), e.Info.Created, e.Info.RunID)
		}
		return tw.Flush()
	case "rm", "remove":
		if len(pos) != 2 {
			return usageErrorf("datasets rm: give one NAME (or NAME-HASH)")
		}
		if err := phases.CheckPersistName("NAME", trimHash(pos[1])); err != nil {
			return usageErrorf("datasets rm: %v", err)
		}
		path, err := phases.RemovePersistent(*workdir, pos[1])
		if err != nil {
			return fmt.Errorf("datasets rm: %w", err)
		}
		_, err = fmt.Fprintf(stdout, "removed %s\n", path)
		return err
	}
	return usageErrorf("datasets: unknown subcommand %q (list, rm)", pos[0])
}

// trimHash is NAME of NAME-HASH.
func trimHash(s string) string {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '-' {
			return s[:i]
		}
	}
	return s
}
