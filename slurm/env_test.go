package slurm

import (
	"strings"
	"testing"
)

func TestFromEnv(t *testing.T) {
	env := map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "gpu[001-004]", "SLURM_TASKS_PER_NODE": "2(x4)", "SLURM_NTASKS": "8"}
	j, ok := FromEnv(func(k string) string { return env[k] })
	if !ok || j.ID != "42" || j.NodeList != "gpu[001-004]" || j.TasksPerNode != "2(x4)" || j.NTasks != "8" {
		t.Fatalf("%+v %v", j, ok)
	}
	if _, ok := FromEnv(func(string) string { return "" }); ok {
		t.Fatal("outside Slurm reported as a job")
	}
}

func TestFromEnvParsed(t *testing.T) {
	env := map[string]string{
		"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "a[1-2]-ib,b3", "SLURM_TASKS_PER_NODE": "2(x2),1",
		"SLURM_NTASKS": "5", "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
	}
	j, ok := FromEnv(func(k string) string { return env[k] })
	if !ok || strings.Join(j.Nodes, ",") != "a1-ib,a2-ib,b3" || !equal(j.Tasks, []int{2, 2, 1}) || j.TotalTasks() != 5 {
		t.Fatalf("%+v", j)
	}
	if j.ProcID != 3 || j.LocalID != 1 || j.NodeID != 1 || j.Host() != "a2-ib" || len(j.Problems) != 0 {
		t.Fatalf("%+v host %q", j, j.Host())
	}
	// The batch script is no task: ids unset.
	delete(env, "SLURM_PROCID")
	delete(env, "SLURM_NODEID")
	delete(env, "SLURM_LOCALID")
	j, _ = FromEnv(func(k string) string { return env[k] })
	if j.ProcID != -1 || j.NodeID != -1 || j.LocalID != -1 || j.Host() != "" {
		t.Fatalf("%+v", j)
	}
}

func TestFromEnvProblems(t *testing.T) {
	env := map[string]string{"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "gpu[1-", "SLURM_TASKS_PER_NODE": "2(x3),1", "SLURM_PROCID": "x", "SLURM_NODEID": "9"}
	j, ok := FromEnv(func(k string) string { return env[k] })
	if !ok || j.Nodes != nil || len(j.Tasks) != 4 || j.ProcID != -1 {
		t.Fatalf("%+v", j)
	}
	p := strings.Join(j.Problems, "\n")
	for _, want := range []string{"SLURM_JOB_NODELIST", "SLURM_PROCID"} {
		if !strings.Contains(p, want) {
			t.Errorf("problems %q lack %s", p, want)
		}
	}
	env["SLURM_JOB_NODELIST"] = "n[1-2]"
	j, _ = FromEnv(func(k string) string { return env[k] })
	if p := strings.Join(j.Problems, "\n"); !strings.Contains(p, "names 2 nodes but SLURM_TASKS_PER_NODE counts 4") || !strings.Contains(p, "SLURM_NODEID=9") {
		t.Errorf("problems %q", p)
	}
}
