package spmd

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/prism-hpc/prism/internal/rangelist"
)

// CPUBlocks splits cpus into n disjoint blocks of consecutive entries, one
// per local rank, the first len(cpus)%n blocks one CPU larger: 8 CPUs for 3
// ranks give 0-2, 3-5, 6-7. It returns nil when there are fewer CPUs than
// ranks, where binding would stack ranks on shared CPUs anyway.
//
// A block rather than a single CPU per rank, as OpenMPI's default
// --bind-to core would give: a phase may run several workers per rank
// (blockio numjobs, dataload threads), and they need the rank's share of the
// node, not one core.
func CPUBlocks(cpus []int, n int) [][]int {
	if n < 1 || len(cpus) < n {
		return nil
	}
	blocks := make([][]int, n)
	k, extra, at := len(cpus)/n, len(cpus)%n, 0
	for i := range blocks {
		size := k
		if i < extra {
			size++
		}
		blocks[i] = cpus[at : at+size : at+size]
		at += size
	}
	return blocks
}

// CPUList formats CPU numbers as the kernel's cpulist does ("0-3,8,10-11"),
// for ascending, distinct cpus; ParseCPUList reads it back.
func CPUList(cpus []int) string { return rangelist.Format(cpus) }

// ParseCPUList parses a cpulist as CPUList writes it and the kernel prints
// it (/sys/devices/system/cpu/online): ascending CPU numbers.
func ParseCPUList(s string) ([]int, error) {
	var cpus []int
	if s == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		z := a
		if err == nil && isRange {
			z, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || z < a || (len(cpus) > 0 && a <= cpus[len(cpus)-1]) {
			return nil, fmt.Errorf("spmd: bad cpulist %q at %q", s, part)
		}
		for c := a; c <= z; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// LocalSlot is this process's local rank and the number of ranks on its
// node as the launcher that started it says: OpenMPI's mpirun
// (OMPI_COMM_WORLD_LOCAL_RANK/SIZE), MPICH's hydra (MPI_LOCALRANKID,
// MPI_LOCALNRANKS), Slurm's srun (SLURM_LOCALID, and this node's entry of
// SLURM_STEP_TASKS_PER_NODE). ok is false when none did.
func LocalSlot(getenv func(string) string) (rank, size int, ok bool) {
	num := func(k string) (int, bool) {
		n, err := strconv.Atoi(getenv(k))
		return n, err == nil && n >= 0
	}
	for _, p := range [][2]string{{"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"}, {"MPI_LOCALRANKID", "MPI_LOCALNRANKS"}} {
		r, okr := num(p[0])
		n, okn := num(p[1])
		if okr && okn && r < n {
			return r, n, true
		}
	}
	r, okr := num("SLURM_LOCALID")
	node, okn := num("SLURM_NODEID")
	if !okr || !okn {
		return 0, 0, false
	}
	// SLURM_STEP_TASKS_PER_NODE: "2(x3),1": 2 tasks on each of the first
	// three nodes, then 1.
	at := 0
	for _, part := range strings.Split(getenv("SLURM_STEP_TASKS_PER_NODE"), ",") {
		tasks, rep, _ := strings.Cut(part, "(x")
		n, err := strconv.Atoi(tasks)
		times := 1
		if rep != "" {
			times, err = strconv.Atoi(strings.TrimSuffix(rep, ")"))
		}
		if err != nil || n < 1 || times < 1 {
			return 0, 0, false
		}
		if node < at+times {
			if r < n {
				return r, n, true
			}
			return 0, 0, false
		}
		at += times
	}
	return 0, 0, false
}
