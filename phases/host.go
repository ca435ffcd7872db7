package phases

import (
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
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		h.MemoryBytes = int64(si.Totalram) * int64(si.Unit)
	}
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
