package phases

import (
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/klauspost/cpuid/v2"
	"golang.org/x/sys/unix"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/report"
	"github.com/prism-hpc/prism/slurm"
	"github.com/prism-hpc/prism/spmd"
)

// CollectHost describes this host and the filesystem under workdir for the
// manifest. It never fails: what cannot be read is left empty.
func CollectHost(workdir string) report.HostInfo {
	h := report.HostInfo{
		CPUModel:      strings.TrimSpace(cpuid.CPU.BrandName),
		CPUVendor:     cpuid.CPU.VendorString,
		PhysicalCores: cpuid.CPU.PhysicalCores,
		LogicalCores:  onlineCPUs(),
		GoVersion:     runtime.Version(),
		GOMAXPROCS:    runtime.GOMAXPROCS(0),
		Workdir:       workdir,
	}
	h.Hostname, _ = os.Hostname()
	if job, ok := slurm.FromEnv(os.Getenv); ok {
		h.SlurmJobID, h.SlurmNodeList, h.SlurmTasks = job.ID, job.NodeList, job.TasksPerNode
		h.SlurmNodes, h.SlurmNodeCount = job.Nodes, len(job.Nodes)
		for _, p := range job.Problems {
			h.Warnings = append(h.Warnings, "slurm: "+p)
		}
	}
	for _, f := range []cpuid.FeatureID{cpuid.AVX2, cpuid.AVX512F, cpuid.AESNI, cpuid.SHA, cpuid.ASIMD} {
		if cpuid.CPU.Supports(f) {
			h.CPUFeatures = append(h.CPUFeatures, f.String())
		}
	}
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		h.Kernel = unix.ByteSliceToString(uts.Sysname[:]) + " " + unix.ByteSliceToString(uts.Release[:])
	}
	h.MemoryBytes = hostMemory()
	if fs, err := pio.StatFS(workdir); err == nil {
		h.FSType, h.MountPoint, h.MountSource, h.MountOptions = fs.Type, fs.MountPoint, fs.Source, fs.MountOptions
	}
	// prism run -n binds on purpose (a block of CPUs per rank, PRISM_CPUS);
	// the warning is for launchers that bind to one core unasked.
	if h.GOMAXPROCS == 1 && h.LogicalCores > 1 && os.Getenv(spmd.EnvCPUs) == "" {
		h.Warnings = append(h.Warnings, "GOMAXPROCS is 1 on a multi-core host: the launcher bound this rank to one core (OpenMPI binds at -np <= 2); use --bind-to none so iodepth and workers can run in parallel")
	}
	return h
}

// CollectFS describes the filesystem under this rank's workdir, for the
// check that every rank sees the same one and the manifest's hosts[].
func CollectFS(host, workdir string) report.HostFS {
	h := report.HostFS{Hostname: host, Workdir: workdir}
	var sf unix.Statfs_t
	if err := unix.Statfs(workdir, &sf); err != nil {
		h.Error = (&os.PathError{Op: "statfs", Path: workdir, Err: err}).Error()
		return h
	}
	h.FSID = fmt.Sprintf("%08x%08x", uint32(sf.Fsid.Val[0]), uint32(sf.Fsid.Val[1]))
	if fs, err := pio.StatFS(workdir); err == nil {
		h.FSType, h.MountPoint, h.MountSource = fs.Type, fs.MountPoint, fs.Source
	}
	return h
}

// fsKey is what two ranks must share to see the same filesystem: its type
// and mount source everywhere, and on one host its id too. Across hosts the
// id is recorded but not compared: a network filesystem's f_fsid may be
// made up per client, while the type and source name the same export.
func fsKey(h report.HostFS, perHost bool) string {
	k := h.FSType + "\x00" + h.MountSource
	if perHost {
		k += "\x00" + h.FSID
	}
	return k
}

// mixedFS is rank 0's verdict on every rank's filesystem facts (indexed
// by rank): "" when they agree, else a message naming each group of ranks
// and what it sees. Ranks whose facts could not be read are left out (the
// workdir's open fails on them with its own error).
func mixedFS(facts []report.HostFS) string {
	ref := -1
	bad := false
	byHost := map[string]string{}
	for r, f := range facts {
		if f.Error != "" {
			continue
		}
		if ref < 0 {
			ref = r
		} else if fsKey(f, false) != fsKey(facts[ref], false) {
			bad = true
		}
		if k, ok := byHost[f.Hostname]; ok && k != fsKey(f, true) {
			bad = true
		}
		byHost[f.Hostname] = fsKey(f, true)
	}
	if !bad {
		return ""
	}
	var b strings.Builder
	b.WriteString("ranks see different filesystems under the workdir:")
	for _, g := range groupFS(facts) {
		fmt.Fprintf(&b, " rank %s on %s: %s %s mounted on %s (fs id %s) at %s;", spmd.CPUList(g.Ranks), g.Hostname, g.FSType, g.MountSource, g.MountPoint, g.FSID, g.Workdir)
	}
	b.WriteString(" a rank whose mount is missing writes to the filesystem below it; set [plan] allow_mixed_fs = true to run anyway")
	return b.String()
}

// groupFS folds every rank's facts into one entry per host and distinct
// filesystem, in rank order.
func groupFS(facts []report.HostFS) []report.HostFS {
	var out []report.HostFS
	at := map[string]int{}
	for r, f := range facts {
		k := f.Hostname + "\x00" + f.Workdir + "\x00" + fsKey(f, true) + "\x00" + f.Error
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, f)
			out[i].Ranks = nil
		}
		out[i].Ranks = append(out[i].Ranks, r)
	}
	return out
}

// onlineCPUs counts the host's online CPUs. runtime.NumCPU counts only the
// CPUs this process may run on, which for a bound rank is its own block,
// not the host.
func onlineCPUs() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return runtime.NumCPU()
	}
	cpus, err := spmd.ParseCPUList(strings.TrimSpace(string(b)))
	if err != nil || len(cpus) == 0 {
		return runtime.NumCPU()
	}
	return len(cpus)
}
