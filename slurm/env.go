package slurm

// Job is the part of a Slurm job's environment the manifest records.
type Job struct {
	ID           string `json:"job_id"`
	NodeList     string `json:"node_list"`
	TasksPerNode string `json:"tasks_per_node"`
	NTasks       string `json:"ntasks"`
}

// FromEnv reads the job from the environment (getenv is os.Getenv in
// production); ok is false outside Slurm.
func FromEnv(getenv func(string) string) (job Job, ok bool) {
	job = Job{
		ID:           getenv("SLURM_JOB_ID"),
		NodeList:     getenv("SLURM_JOB_NODELIST"),
		TasksPerNode: getenv("SLURM_TASKS_PER_NODE"),
		NTasks:       getenv("SLURM_NTASKS"),
	}
	return job, job.ID != ""
}
