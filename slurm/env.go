package slurm

import (
	"fmt"
	"strconv"
)

// Job is the part of a Slurm job's environment the manifest records. The
// raw variables are kept as Slurm wrote them; the parsed fields are filled
// when the values parse, and Problems says why one did not.
type Job struct {
	ID           string `json:"job_id"`
	NodeList     string `json:"node_list"`      // SLURM_JOB_NODELIST, compressed
	TasksPerNode string `json:"tasks_per_node"` // SLURM_TASKS_PER_NODE, compressed
	NTasks       string `json:"ntasks"`

	// Nodes is NodeList expanded: one host name per node, in Slurm's order.
	Nodes []string `json:"nodes,omitempty"`
	// Tasks is TasksPerNode expanded: Tasks[i] tasks run on Nodes[i].
	Tasks []int `json:"tasks,omitempty"`
	// This task's place in the job: SLURM_PROCID, SLURM_LOCALID (rank on
	// its node), SLURM_NODEID (index of its node in Nodes); -1 when unset,
	// as in the batch script itself, which is no task of a step.
	ProcID  int `json:"proc_id"`
	LocalID int `json:"local_id"`
	NodeID  int `json:"node_id"`
	// Problems lists variables that were set but did not parse, or that
	// contradict each other; they never make FromEnv fail.
	Problems []string `json:"problems,omitempty"`
}

// FromEnv reads the job from the environment (getenv is os.Getenv in
// production); ok is false outside Slurm (no SLURM_JOB_ID).
func FromEnv(getenv func(string) string) (job Job, ok bool) {
	job = Job{
		ID:           getenv("SLURM_JOB_ID"),
		NodeList:     getenv("SLURM_JOB_NODELIST"),
		TasksPerNode: getenv("SLURM_TASKS_PER_NODE"),
		NTasks:       getenv("SLURM_NTASKS"),
	}
	if job.NodeList != "" {
		nodes, err := ExpandHostList(job.NodeList)
		if err != nil {
			job.Problems = append(job.Problems, "SLURM_JOB_NODELIST: "+err.Error())
		}
		job.Nodes = nodes
	}
	if job.TasksPerNode != "" {
		tasks, err := ExpandTasksPerNode(job.TasksPerNode)
		if err != nil {
			job.Problems = append(job.Problems, "SLURM_TASKS_PER_NODE: "+err.Error())
		}
		job.Tasks = tasks
	}
	if job.Nodes != nil && job.Tasks != nil && len(job.Nodes) != len(job.Tasks) {
		job.Problems = append(job.Problems, fmt.Sprintf("SLURM_JOB_NODELIST names %d nodes but SLURM_TASKS_PER_NODE counts %d", len(job.Nodes), len(job.Tasks)))
	}
	job.ProcID = intVar(getenv, "SLURM_PROCID", &job.Problems)
	job.LocalID = intVar(getenv, "SLURM_LOCALID", &job.Problems)
	job.NodeID = intVar(getenv, "SLURM_NODEID", &job.Problems)
	if job.NodeID >= 0 && job.Nodes != nil && job.NodeID >= len(job.Nodes) {
		job.Problems = append(job.Problems, fmt.Sprintf("SLURM_NODEID=%d but the job has %d nodes", job.NodeID, len(job.Nodes)))
	}
	return job, job.ID != ""
}

// TotalTasks is the sum of Tasks (0 when unknown).
func (j Job) TotalTasks() int {
	n := 0
	for _, t := range j.Tasks {
		n += t
	}
	return n
}

// Host returns the name of this task's node (Nodes[NodeID]), or "".
func (j Job) Host() string {
	if j.NodeID < 0 || j.NodeID >= len(j.Nodes) {
		return ""
	}
	return j.Nodes[j.NodeID]
}

func intVar(getenv func(string) string, name string, problems *[]string) int {
	v := getenv(name)
	if v == "" {
		return -1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 1<<24 {
		*problems = append(*problems, fmt.Sprintf("%s=%q is not a task or node number", name, v))
		return -1
	}
	return n
}
