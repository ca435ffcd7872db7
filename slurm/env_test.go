package slurm

import "testing"

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
