package spmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// slurmRank is the environment srun gives task rank of a 2-task step
// 0 of job id, without MPI.
func slurmRank(id string, rank int) func(string) string {
	env := map[string]string{"SLURM_PROCID": strconv.Itoa(rank), "SLURM_NTASKS": "2", "SLURM_JOB_ID": id, "SLURM_STEP_ID": "0"}
	return func(k string) string { return env[k] }
}

// jobRun is how one 2-rank job on a plan's rendezvous directory went.
type jobRun struct {
	id   string
	errs [2]error
}

func (j *jobRun) passed() bool { return j.errs[0] == nil && j.errs[1] == nil }

// runJob runs a 2-rank Slurm job id on the plan directory dir, each rank
// in a goroutine as Open would in a process: join, wait for hold (if not
// nil) to be closed, check an Allreduce of this job's own values, Close.
// Rank 1 starts first, so the job file is not always rank 0's.
func runJob(dir, id string, hold <-chan struct{}) *jobRun {
	j := &jobRun{id: id}
	base, _ := strconv.Atoi(id)
	var wg sync.WaitGroup
	for _, r := range []int{1, 0} {
		wg.Go(func() {
			j.errs[r] = func() error {
				c, _, err := Open(context.Background(), OpenOptions{Rendezvous: dir, Timeout: slack, Getenv: slurmRank(id, r)})
				if err != nil {
					return err
				}
				if hold != nil {
					<-hold
				}
				v := []int64{int64(base + r)}
				if err := c.AllreduceInt64(context.Background(), Sum, v); err != nil {
					return err
				}
				if want := int64(2*base + 1); v[0] != want {
					return fmt.Errorf("allreduce = %d, want %d: another job's rank took part", v[0], want)
				}
				return c.Close()
			}()
		})
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	return j
}

// checkRefused checks that every rank of job got the error naming both
// tokens, the directory and the remedy.
func checkRefused(t *testing.T, job *jobRun, other, dir string) {
	t.Helper()
	for r, err := range job.errs {
		var re *RankError
		msg := fmt.Sprint(err)
		switch {
		case err == nil:
			t.Errorf("job %s rank %d joined a directory of job %s", job.id, r, other)
		case !errors.As(err, &re) || re.Rank != r:
			t.Errorf("job %s rank %d: %v, want a RankError naming rank %d", job.id, r, err, r)
		case !strings.Contains(msg, "belongs to another job: its token is \""+other+".0\""),
			!strings.Contains(msg, "this rank's is \""+job.id+".0\" (from SLURM_JOB_ID.SLURM_STEP_ID)"),
			!strings.Contains(msg, dir), !strings.Contains(msg, "%j"):
			t.Errorf("job %s rank %d: message %q lacks the tokens, the directory or the remedy", job.id, r, msg)
		}
	}
}

// TestRendezvousJobsDoNotMerge: two 2-rank jobs on one plan directory. When
// one is under way first, the other's ranks are refused with an error
// naming both tokens and the directory, and the first passes; started at
// the same moment, exactly one passes and the other is refused. A job that
// ended cleanly leaves the directory free for the next.
func TestRendezvousJobsDoNotMerge(t *testing.T) {
	t.Run("one after the other", func(t *testing.T) {
		dir := t.TempDir()
		hold := make(chan struct{})
		done := make(chan *jobRun)
		go func() { done <- runJob(dir, "100", hold) }()
		waitFile(t, filepath.Join(dir, beatDir, "0"))
		waitFile(t, filepath.Join(dir, beatDir, "1"))
		second := runJob(dir, "101", nil)
		close(hold)
		first := <-done
		if !first.passed() {
			t.Errorf("the first job failed: %v", first.errs)
		}
		checkRefused(t, second, "100", dir)
		t.Logf("refusal: %v", second.errs[0])
		if !strings.Contains(fmt.Sprint(second.errs[0]), "that job is running") {
			t.Errorf("the refusal does not say the first job is running: %v", second.errs[0])
		}
		if n := countFiles(t, dir); n != 0 {
			t.Errorf("%d files left after the first job ended", n)
		}
		if third := runJob(dir, "102", nil); !third.passed() {
			t.Errorf("a job after one that ended cleanly failed: %v", third.errs)
		}
	})
	t.Run("at the same time", func(t *testing.T) {
		dir := t.TempDir()
		jobs := make([]*jobRun, 2)
		var wg sync.WaitGroup
		for i, id := range []string{"200", "201"} {
			wg.Go(func() { jobs[i] = runJob(dir, id, nil) })
		}
		wg.Wait()
		switch {
		case jobs[0].passed() && !jobs[1].passed():
			checkRefused(t, jobs[1], "200", dir)
		case jobs[1].passed() && !jobs[0].passed():
			checkRefused(t, jobs[0], "201", dir)
		default:
			t.Errorf("want exactly one job to pass: job 200 %v, job 201 %v", jobs[0].errs, jobs[1].errs)
		}
	})
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(slack)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRendezvousLeftBehind: a job that died (its ranks never closed, their
// heartbeats stopped) leaves its directory behind. A job with another token
// is refused by the job file, one with the same token by the heartbeats;
// both are told the old job's heartbeats stand still, and neither touches
// its files.
func TestRendezvousLeftBehind(t *testing.T) {
	dir := t.TempDir()
	cfg := RendezvousConfig{Dir: dir, Token: "old", Heartbeat: testHeartbeat, DeadAfter: testDeadAfter}
	for _, c := range startRanks(t, 2, cfg) {
		c.job.stopHeartbeat() // killed: nothing removed
	}
	before := listFiles(t, dir)
	for _, tc := range []struct{ token, want string }{
		{"new", `belongs to another job: its token is "old"`},
		{"old", "exists: another process joined this job as rank"},
	} {
		cfg := cfg
		cfg.Token, cfg.Size = tc.token, 2
		for r := range 2 {
			cfg.Rank = r
			c, err := NewRendezvous(context.Background(), cfg)
			if err == nil {
				c.Close()
				t.Fatalf("token %q rank %d joined a dead job's directory", tc.token, r)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.want) || !strings.Contains(msg, "no heartbeat of that job advanced") {
				t.Errorf("token %q rank %d: %q, want %q and the stale heartbeats", tc.token, r, msg, tc.want)
			}
		}
	}
	if after := listFiles(t, dir); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("the refused ranks changed the dead job's files:\nbefore %v\nafter  %v", before, after)
	}
}

// listFiles returns every file under dir with its contents.
func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := os.ReadFile(path)
			out = append(out, path+"="+string(b))
		}
		return nil
	})
	return out
}

// TestRendezvousNoToken: a rank without a job token is refused in the
// plan's directory, which other jobs may share, with the remedy; it may
// join one a launcher handed it; and a tokenless rank is refused by a
// directory that holds a job's token.
func TestRendezvousNoToken(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2"} // a bare srun never lacks SLURM_JOB_ID; a test can
	_, _, err := Open(context.Background(), OpenOptions{Rendezvous: dir, Getenv: func(k string) string { return env[k] }})
	if err == nil || !strings.Contains(err.Error(), EnvRendezvousToken) || !strings.Contains(err.Error(), dir) {
		t.Errorf("tokenless rank on the plan's directory: %v, want a refusal naming %s", err, EnvRendezvousToken)
	}

	env = map[string]string{EnvRank: "0", EnvSize: "1", EnvRendezvous: dir}
	c, _, err := Open(context.Background(), OpenOptions{Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatalf("tokenless rank on a launcher's directory: %v", err)
	}
	other := startRanks(t, 1, RendezvousConfig{Dir: filepath.Join(dir, "sub"), Token: "t1"})
	_, err = NewRendezvous(context.Background(), RendezvousConfig{Dir: filepath.Join(dir, "sub"), Size: 1, Heartbeat: testHeartbeat, DeadAfter: testDeadAfter})
	if err == nil || !strings.Contains(err.Error(), `its token is "t1"`) || !strings.Contains(err.Error(), "this rank's is (none)") {
		t.Errorf("tokenless rank on a tokened directory: %v", err)
	}
	closeAll(t, other)
	if err := c.Close(); err != nil {
		t.Error(err)
	}
}

// TestRendezvousJobDir: %j in the plan's directory becomes the job token,
// so each job gets a directory of its own, which it removes at the end.
func TestRendezvousJobDir(t *testing.T) {
	parent := t.TempDir()
	plan := filepath.Join(parent, "rdv-%j")
	jobs := make([]*jobRun, 2)
	var wg sync.WaitGroup
	for i, id := range []string{"300", "301"} {
		wg.Go(func() { jobs[i] = runJob(plan, id, nil) })
	}
	wg.Wait()
	for _, j := range jobs {
		if !j.passed() {
			t.Errorf("job %s in its own directory: %v", j.id, j.errs)
		}
	}
	if left, _ := os.ReadDir(parent); len(left) != 0 {
		t.Errorf("left in %s: %v", parent, left)
	}
	if _, err := expandJobDir(plan, ""); err == nil {
		t.Error("%j without a token expanded")
	}
	if _, err := expandJobDir(plan, "a/b"); err == nil {
		t.Error("a token with a slash expanded into a path")
	}
}

func TestJobToken(t *testing.T) {
	for _, tc := range []struct {
		env           map[string]string
		token, source string
	}{
		{map[string]string{EnvJobToken: "n", "SLURM_JOB_ID": "7", EnvRendezvousToken: "x"}, "n", EnvJobToken},
		{map[string]string{"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "2", EnvRendezvousToken: "x"}, "7.2", "SLURM_JOB_ID.SLURM_STEP_ID"},
		{map[string]string{"SLURM_JOB_ID": "7", "SLURM_STEPID": "3"}, "7.3", "SLURM_JOB_ID.SLURM_STEP_ID"},
		{map[string]string{"SLURM_JOB_ID": "7"}, "7", "SLURM_JOB_ID"},
		{map[string]string{EnvRendezvousToken: "x"}, "x", EnvRendezvousToken},
		{map[string]string{}, "", ""},
	} {
		token, source := JobToken(func(k string) string { return tc.env[k] })
		if token != tc.token || source != tc.source {
			t.Errorf("JobToken(%v) = %q, %q; want %q, %q", tc.env, token, source, tc.token, tc.source)
		}
	}
	if _, err := NewRendezvous(context.Background(), RendezvousConfig{Dir: t.TempDir(), Size: 1, Token: "a\nb"}); err == nil {
		t.Error("a token with a newline was accepted")
	}
}

// A job directory another user can write in, or owns, is refused before
// any file is made there: they could plant links in it, or swap what is
// below it, and the job's files are theirs to read and replace.
func TestRendezvousRefusesWritableDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "job")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777)
	_, err := NewRendezvous(context.Background(), RendezvousConfig{Dir: dir, Token: "t", Size: 1, Heartbeat: testHeartbeat, DeadAfter: testDeadAfter})
	if err == nil || !strings.Contains(err.Error(), "writable by group or others") {
		t.Fatalf("%v; want a refusal of the group-writable directory", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("files made in the refused directory: %v", ents)
	}
	if os.Geteuid() != 0 {
		return
	}
	os.Chmod(dir, 0o755)
	if err := os.Chown(dir, 12345, 12345); err != nil {
		t.Fatal(err)
	}
	_, err = NewRendezvous(context.Background(), RendezvousConfig{Dir: dir, Token: "t", Size: 1, Heartbeat: testHeartbeat, DeadAfter: testDeadAfter})
	if err == nil || !strings.Contains(err.Error(), "owned by uid 12345") {
		t.Fatalf("%v; want a refusal of the directory another user owns", err)
	}
}
