package phases

import (
	"strings"
	"testing"
)

// Under Slurm the host facts carry the job's node list expanded, with its
// count, and a node list Slurm would not have written is a warning.
func TestCollectHostSlurm(t *testing.T) {
	t.Setenv("SLURM_JOB_ID", "42")
	t.Setenv("SLURM_JOB_NODELIST", "gpu[01-03],login7")
	t.Setenv("SLURM_TASKS_PER_NODE", "2(x4)")
	h := CollectHost(t.TempDir())
	if h.SlurmJobID != "42" || h.SlurmNodeCount != 4 || strings.Join(h.SlurmNodes, ",") != "gpu01,gpu02,gpu03,login7" {
		t.Errorf("job %q, %d nodes %v", h.SlurmJobID, h.SlurmNodeCount, h.SlurmNodes)
	}
	t.Setenv("SLURM_JOB_NODELIST", "gpu[03-01")
	h = CollectHost(t.TempDir())
	if h.SlurmNodeCount != 0 || len(h.Warnings) == 0 || !strings.Contains(strings.Join(h.Warnings, "\n"), "SLURM_JOB_NODELIST") {
		t.Errorf("bad node list: %d nodes, warnings %q", h.SlurmNodeCount, h.Warnings)
	}
}
