package spmd

import (
	"fmt"
	"testing"
)

func TestCPUBlocks(t *testing.T) {
	seq := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = i
		}
		return s
	}
	cases := []struct {
		cpus []int
		n    int
		want string
	}{
		{seq(2), 2, "[[0] [1]]"},
		{seq(8), 3, "[[0 1 2] [3 4 5] [6 7]]"},
		{seq(8), 4, "[[0 1] [2 3] [4 5] [6 7]]"},
		{[]int{2, 3, 8, 9, 10}, 2, "[[2 3 8] [9 10]]"},
		{seq(4), 1, "[[0 1 2 3]]"},
		{seq(2), 3, "[]"}, // fewer CPUs than ranks: no binding
		{seq(2), 0, "[]"},
	}
	for _, tc := range cases {
		if got := fmt.Sprint(CPUBlocks(tc.cpus, tc.n)); got != tc.want {
			t.Errorf("CPUBlocks(%v, %d) = %s, want %s", tc.cpus, tc.n, got, tc.want)
		}
	}
	// Blocks are capped: appending to one must not overwrite the next.
	b := CPUBlocks(seq(4), 2)
	_ = append(b[0], 99)
	if b[1][0] != 2 {
		t.Fatalf("appending to block 0 changed block 1 to %v", b[1])
	}
}

func TestCPUList(t *testing.T) {
	cases := []struct {
		cpus []int
		want string
	}{
		{nil, ""},
		{[]int{0}, "0"},
		{[]int{0, 1, 2, 3}, "0-3"},
		{[]int{0, 1, 2, 3, 8, 10, 11}, "0-3,8,10-11"},
		{[]int{1, 3, 5}, "1,3,5"},
	}
	for _, tc := range cases {
		if got := CPUList(tc.cpus); got != tc.want {
			t.Errorf("CPUList(%v) = %q, want %q", tc.cpus, got, tc.want)
		}
		back, err := ParseCPUList(tc.want)
		if err != nil || fmt.Sprint(back) != fmt.Sprint(tc.cpus) && len(tc.cpus) > 0 {
			t.Errorf("ParseCPUList(%q) = %v, %v; want %v", tc.want, back, err, tc.cpus)
		}
	}
	for _, bad := range []string{"x", "1-", "3-1", "2,1", "0,0", "-1", "1,,2"} {
		if got, err := ParseCPUList(bad); err == nil {
			t.Errorf("ParseCPUList(%q) = %v, want an error", bad, got)
		}
	}
}

func TestLocalSlot(t *testing.T) {
	for _, tc := range []struct {
		env        map[string]string
		rank, size int
		ok         bool
	}{
		{map[string]string{"OMPI_COMM_WORLD_LOCAL_RANK": "3", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, 3, 4, true},
		{map[string]string{"MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}, 1, 2, true},
		{map[string]string{"SLURM_LOCALID": "1", "SLURM_NODEID": "0", "SLURM_STEP_TASKS_PER_NODE": "2(x3),1"}, 1, 2, true},
		{map[string]string{"SLURM_LOCALID": "0", "SLURM_NODEID": "3", "SLURM_STEP_TASKS_PER_NODE": "2(x3),1"}, 0, 1, true},
		{map[string]string{"SLURM_LOCALID": "0", "SLURM_NODEID": "4", "SLURM_STEP_TASKS_PER_NODE": "2(x3),1"}, 0, 0, false},
		{map[string]string{"SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_STEP_TASKS_PER_NODE": "2(xx)"}, 0, 0, false},
		{map[string]string{"OMPI_COMM_WORLD_LOCAL_RANK": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, 0, 0, false},
		{map[string]string{}, 0, 0, false},
	} {
		r, n, ok := LocalSlot(func(k string) string { return tc.env[k] })
		if r != tc.rank || n != tc.size || ok != tc.ok {
			t.Errorf("%v: %d of %d, %v; want %d of %d, %v", tc.env, r, n, ok, tc.rank, tc.size, tc.ok)
		}
	}
}
