package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/report"
)

// datasizeOptions are the flags of prism datasize.
type datasizeOptions struct {
	Workload     string
	Accelerator  string
	Accelerators int   // simulated accelerators of the whole job
	Hosts        int   // client hosts
	Memory       int64 // bytes of memory per host
}

// cmdDatasize prints the dataset MLPerf Storage requires of a training
// run: at least 500 steps of every accelerator and five times the memory
// of every host, so the page cache cannot serve the run.
func cmdDatasize(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("datasize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := datasizeOptions{}
	fs.StringVar(&o.Workload, "workload", "unet3d", "unet3d | resnet50 | cosmoflow | retinanet")
	fs.StringVar(&o.Accelerator, "accelerator", "h100", "a100 | h100 | b200")
	fs.IntVar(&o.Accelerators, "accelerators", 1, "simulated accelerators of the whole job")
	fs.IntVar(&o.Hosts, "hosts", 1, "client hosts")
	mem := fs.String("memory", "", "memory per host, e.g. 512GiB (default: this host's MemTotal)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "prism datasize: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if *mem != "" {
		v, err := phases.ParseSize(*mem)
		if err != nil {
			fmt.Fprintf(stderr, "prism datasize: --memory: %v\n", err)
			return exitUsage
		}
		o.Memory = int64(v)
	} else {
		v, err := phases.HostMemory()
		if err != nil {
			fmt.Fprintf(stderr, "prism datasize: %v; give --memory\n", err)
			return exitFailed
		}
		o.Memory = v
	}
	if err := runDatasize(o, stdout); err != nil {
		fmt.Fprintf(stderr, "prism datasize: %v\n", err)
		return exitUsage
	}
	return exitOK
}

func runDatasize(o datasizeOptions, w io.Writer) error {
	if o.Accelerators < 1 || o.Hosts < 1 || o.Memory < 0 {
		return errors.New("--accelerators and --hosts must be at least 1, --memory not negative")
	}
	p, err := phases.LookupTrainPreset(o.Workload, o.Accelerator)
	if err != nil && !strings.Contains(err.Error(), "compute time") {
		return err
	}
	d := phases.MLPerfDatasize(p, o.Accelerators, o.Hosts, o.Memory)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "workload\t%s (%d-byte samples, %d per file, batch %d)\n", o.Workload, p.RecordSize, p.SamplesPerFile, p.BatchSize)
	fmt.Fprintf(tw, "steps bound\t500 steps x batch %d x %d accelerators = %d samples\n", p.BatchSize, o.Accelerators, d.StepBound)
	fmt.Fprintf(tw, "memory bound\t%d hosts x %s x 5 / record = %d samples\n", o.Hosts, report.FormatBytes(o.Memory), d.MemBound)
	fmt.Fprintf(tw, "samples\t%d\n", d.Samples)
	fmt.Fprintf(tw, "num_files\t%d\n", d.Files)
	fmt.Fprintf(tw, "bytes\t%d (%s)\n", d.Bytes, report.FormatBytes(d.Bytes))
	return tw.Flush()
}
