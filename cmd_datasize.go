package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/dataload"
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
func cmdDatasize(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("datasize")
	o := datasizeOptions{}
	fs.StringVar(&o.Workload, "workload", "unet3d", "unet3d | resnet50 | cosmoflow | retinanet")
	fs.StringVar(&o.Accelerator, "accelerator", "h100", "a100 | h100 | b200")
	fs.IntVar(&o.Accelerators, "accelerators", 1, "simulated accelerators of the whole job")
	fs.IntVar(&o.Hosts, "hosts", 1, "client hosts")
	mem := fs.String("memory", "", "memory per host, e.g. 512GiB (default: this host's MemTotal)")
	pos, err := parseFlags(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("datasize: unexpected argument %q", pos[0])
	}
	if *mem != "" {
		v, err := phases.ParseSize(*mem)
		if err != nil {
			return usageErrorf("datasize: --memory: %v", err)
		}
		o.Memory = int64(v)
	} else {
		v, err := dataload.HostMemory()
		if err != nil {
			return fmt.Errorf("datasize: %w; give --memory", err)
		}
		o.Memory = v
	}
	return runDatasize(o, stdout)
}

func runDatasize(o datasizeOptions, w io.Writer) error {
	if o.Accelerators < 1 || o.Accelerators > 1<<24 || o.Hosts < 1 || o.Hosts > 1<<20 || o.Memory < 0 {
		return usageErrorf("datasize: --accelerators (1 .. 16777216) and --hosts (1 .. 1048576) out of range, or --memory negative")
	}
	p, err := dataload.LookupTrainPreset(o.Workload, o.Accelerator)
	var pe *dataload.PresetError
	if errors.As(err, &pe) && pe.NoComputeTime {
		err = nil // the sizes do not depend on the compute time
	}
	if err != nil {
		var pe *dataload.PresetError
		if errors.As(err, &pe) {
			return usageErrorf("datasize: --%s: %s", pe.Key, pe.Msg)
		}
		return asUsage(err)
	}
	d := dataload.MLPerfDatasize(p, o.Accelerators, o.Hosts, o.Memory)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "workload\t%s (%d-byte samples, %d per file, batch %d)\n", o.Workload, p.RecordSize, p.SamplesPerFile, p.BatchSize)
	fmt.Fprintf(tw, "steps bound\t500 steps x batch %d x %d accelerators = %d samples\n", p.BatchSize, o.Accelerators, d.StepBound)
	fmt.Fprintf(tw, "memory bound\t%d hosts x %s x 5 / record = %d samples\n", o.Hosts, report.FormatBytes(o.Memory), d.MemBound)
	fmt.Fprintf(tw, "samples\t%d\n", d.Samples)
	fmt.Fprintf(tw, "num_files\t%d\n", d.Files)
	fmt.Fprintf(tw, "bytes\t%d (%s)\n", d.Bytes, report.FormatBytes(d.Bytes))
	return tw.Flush()
}
