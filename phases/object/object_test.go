package object

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prism-hpc/prism/io/s3/s3test"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/phasestest"
	"github.com/prism-hpc/prism/report"
)

func registry() *phases.Registry {
	r := phases.NewRegistry()
	Register(r)
	return r
}

// every object kind in one plan on two ranks, over a real S3 server: the
// ops each records, their counts and bytes, the storage recorded in the
// manifest (endpoint, never a secret), and a bucket left as it was. Each
// phase runs a warmup and two measured iterations, so the counts are
// exactly iterations × ops only if the engine merges every worker set
// once per iteration, after its clock (Env.NewSet): not twice, not
// never, not one iteration's into another's.
func TestEveryKind(t *testing.T) {
	srv := s3test.StartT(t)
	srv.SetEnv(t)
	c := srv.Client(t, "kinds")
	if err := c.Put(context.Background(), "data/keep-me", []byte("mine")); err != nil {
		t.Fatal(err)
	}
	const ranks, count, iters = 2, 30, 2
	plan := fmt.Sprintf(`[plan]
drop_caches = "none"
%s
[[phase]]
kind = "s3_put"
count = %[2]d
size = "8KiB"
workers = 3
objects_per_prefix = 7
[[phase]]
kind = "s3_get"
count = %[2]d
size = "8KiB"
workers = 3
[[phase]]
kind = "s3_get"
name = "ranged"
count = %[2]d
size = "8KiB"
range_size = "3KiB"
[[phase]]
kind = "s3_stat"
count = %[2]d
size = "1KiB"
[[phase]]
kind = "s3_list"
count = %[2]d
size = "0B"
objects_per_prefix = 10
page_size = 4
[[phase]]
kind = "s3_delete"
count = %[2]d
size = "0B"
[[phase]]
kind = "s3_delete"
name = "batched"
count = %[2]d
size = "0B"
batch = 8
[[phase]]
kind = "s3_multipart"
count = 2
size = "11MiB"
part_size = "5MiB"
part_concurrency = 2
workers = 2
`, srv.PlanLines("kinds", "data/bench"), count)
	plan = strings.ReplaceAll(plan, "[[phase]]\n", fmt.Sprintf("[[phase]]\nwarmup = 1\niterations = %d\n", iters))
	res := phasestest.Run(t, registry(), plan, phasestest.Ranks(ranks))
	type want = phasestest.Want
	const n = ranks * iters
	for name, w := range map[string]map[string]want{
		"s3_put":       {"put": {Ops: n * count, Bytes: n * count * 8192}},
		"s3_get":       {"get": {Ops: n * count, Bytes: n * count * 8192}},
		"ranged":       {"get": {Ops: n * count * 3, Bytes: n * count * 8192}},
		"s3_stat":      {"head": {Ops: n * count}},
		"s3_list":      {"list": {Ops: n * 3 * 3}}, // 3 prefixes of 10 keys, 3 pages of 4 each
		"s3_delete":    {"delete": {Ops: n * count}},
		"batched":      {"delete": {Ops: n * 4}}, // 30 keys in batches of 8
		"s3_multipart": {"create": {Ops: n * 2}, "part": {Ops: n * 2 * 3, Bytes: n * 2 * 11 << 20}, "complete": {Ops: n * 2}},
	} {
		ph := res.Phase(t, name)
		if ph.Status != report.StatusPassed || len(ph.Iterations) != iters {
			t.Errorf("%s: %s, %d iterations: %s", name, ph.Status, len(ph.Iterations), ph.Error)
			continue
		}
		phasestest.CheckOps(t, ph, w)
		for op := range w {
			if _, ok := ph.Histograms[op]; !ok {
				t.Errorf("%s: no histogram of %s", name, op)
			}
		}
		if ph.Storage == nil || ph.Storage.URI != "s3://kinds/data/bench/" || !strings.HasPrefix(ph.Storage.RunPrefix, "data/bench/prism-"+res.Manifest.RunID+"/") {
			t.Errorf("%s: storage %+v", name, ph.Storage)
		}
	}
	js, err := json.Marshal(res.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"endpoint":"`+srv.Endpoint+`"`) || !strings.Contains(string(js), `"path_style":true`) || !strings.Contains(string(js), `"max_attempts":1`) {
		t.Errorf("the manifest does not record the endpoint, path style and attempts")
	}
	if strings.Contains(string(js), srv.SecretKey) || strings.Contains(string(js), srv.AccessKey) || strings.Contains(res.Stderr+res.Stdout, srv.SecretKey) {
		t.Error("a credential is in the manifest or the output")
	}
	if keys := s3test.Keys(t, c); !slices.Equal(keys, []string{"data/keep-me"}) {
		t.Errorf("the bucket holds %v after the run, want only the object placed before", keys)
	}
}

// The cleanup deletes only what the run wrote: an object a stranger puts
// inside the run's own prefix while it runs survives, and the marker goes.
func TestCleanupSparesOthers(t *testing.T) {
	srv := s3test.StartT(t)
	srv.SetEnv(t)
	c := srv.Client(t, "fail")
	plan := fmt.Sprintf(`[plan]
drop_caches = "none"
%s
[[phase]]
kind = "s3_put"
count = 5
size = "1KiB"
[[phase]]
kind = "s3_put"
name = "second"
count = 5
size = "1KiB"
`, srv.PlanLines("fail", "p"))
	// Between the two phases, a stranger's object lands in the run's
	// prefix: it must survive the cleanup, which deletes only what the run
	// wrote.
	stranger := ""
	res := phasestest.Run(t, wrapped(registry(), func(env *phases.Env) {
		if env.Name != "second" || stranger != "" {
			return
		}
		keys := s3test.Keys(t, c)
		for _, k := range keys {
			if strings.HasSuffix(k, "/.prism-run") {
				stranger = strings.TrimSuffix(k, ".prism-run") + "not-prism"
			}
		}
		if err := c.Put(context.Background(), stranger, []byte("x")); err != nil {
			t.Error(err)
		}
	}, nil), plan)
	if st := res.Phase(t, "second").Status; st != report.StatusPassed {
		t.Fatalf("second: %s", st)
	}
	if stranger == "" {
		t.Fatal("no marker seen during the run")
	}
	if keys := s3test.Keys(t, c); !slices.Equal(keys, []string{stranger}) {
		t.Errorf("the bucket holds %v after the run, want only %s", keys, stranger)
	}
}

// A marker that no longer names the run (another run took the prefix):
// nothing is deleted, neither by the phase's Teardown nor at the end of
// the run, and the errors say why.
func TestForeignMarker(t *testing.T) {
	srv := s3test.StartT(t)
	srv.SetEnv(t)
	c := srv.Client(t, "foreign")
	plan := fmt.Sprintf("[plan]\ndrop_caches = \"none\"\n%s\n[[phase]]\nkind = \"s3_put\"\ncount = 5\nsize = \"1KiB\"\n", srv.PlanLines("foreign", "p"))
	marker := ""
	reg := wrapped(registry(), nil, func(env *phases.Env) {
		for _, k := range s3test.Keys(t, c) {
			if strings.HasSuffix(k, "/.prism-run") {
				marker = k
			}
		}
		if err := c.Put(context.Background(), marker, []byte("someone-else")); err != nil {
			t.Error(err)
		}
	})
	res := phasestest.Run(t, reg, plan)
	ph := res.Phase(t, "s3_put")
	if ph.Status != report.StatusFailed || !strings.Contains(ph.Error, `names run "someone-else"`) {
		t.Errorf("status %s, error %q; want the teardown refused under a foreign marker", ph.Status, ph.Error)
	}
	if !strings.Contains(res.Stderr, "refusing to delete") {
		t.Errorf("the end-of-run cleanup did not say it refused:\n%s", res.Stderr)
	}
	if keys := s3test.Keys(t, c); len(keys) != 6 {
		t.Errorf("the bucket holds %v, want the 5 objects and the foreign marker", keys)
	}
}

// wrapped returns a registry whose kinds call before ahead of their
// Setup and after behind their Run (either may be nil).
func wrapped(r *phases.Registry, before, after func(*phases.Env)) *phases.Registry {
	out := phases.NewRegistry()
	for _, k := range r.Kinds() {
		inner := k.New
		k.New = func() phases.Phase { return &hooked{Phase: inner(), before: before, after: after} }
		out.Register(k)
	}
	return out
}

type hooked struct {
	phases.Phase
	before, after func(*phases.Env)
}

func (h *hooked) Setup(ctx context.Context, env *phases.Env) error {
	if h.before != nil {
		h.before(env)
	}
	return h.Phase.Setup(ctx, env)
}

func (h *hooked) Run(ctx context.Context, env *phases.Env) error {
	err := h.Phase.Run(ctx, env)
	if h.after != nil {
		h.after(env)
	}
	return err
}

// Wrong credentials fail the phase (exit 1) at once with the endpoint and
// the S3 error code, and nothing is written.
func TestWrongCredentials(t *testing.T) {
	srv := s3test.StartT(t)
	srv.SetEnv(t)
	c := srv.Client(t, "creds")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-0123456789abcdefghijklmnop")
	plan := fmt.Sprintf("%s\n[[phase]]\nkind = \"s3_put\"\ncount = 5\n", srv.PlanLines("creds", ""))
	res := phasestest.Run(t, registry(), "[plan]\ndrop_caches = \"none\"\n"+plan)
	ph := res.Phase(t, "s3_put")
	if ph.Status != report.StatusFailed || res.Outcome.Status != report.StatusFailed {
		t.Fatalf("status %s (run %s), want failed", ph.Status, res.Outcome.Status)
	}
	for _, want := range []string{srv.Endpoint, "SignatureDoesNotMatch", "403"} {
		if !strings.Contains(ph.Error, want) {
			t.Errorf("error %q lacks %q", ph.Error, want)
		}
	}
	if strings.Contains(ph.Error+res.Stderr, "wrong-secret") || strings.Contains(ph.Error+res.Stderr, srv.SecretKey) {
		t.Error("a secret is in the error or the output")
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	if keys := s3test.Keys(t, c); len(keys) != 0 {
		t.Errorf("the bucket holds %v", keys)
	}
}

// The server killed while a put phase runs: the phase fails, bounded,
// with an error naming the endpoint, and the run ends.
func TestServerKilledMidPhase(t *testing.T) {
	srv := s3test.StartT(t)
	srv.SetEnv(t)
	srv.Client(t, "killed")
	plan := fmt.Sprintf("[plan]\ndrop_caches = \"none\"\n%s\n[[phase]]\nkind = \"s3_put\"\ncount = 1000000\nsize = \"4KiB\"\nworkers = 4\n", srv.PlanLines("killed", ""))
	// Killed once objects of the timed run land in the data directory.
	done := make(chan struct{})
	go func() {
		defer close(done)
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) {
			n := 0
			_ = filepath.WalkDir(filepath.Join(srv.DataDir, "killed"), func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() && strings.HasPrefix(d.Name(), "o") {
					n++
				}
				return nil
			})
			if n >= 20 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		srv.Kill()
	}()
	start := time.Now()
	res := phasestest.Run(t, registry(), plan, phasestest.ExpectError())
	took := time.Since(start)
	<-done
	ph := res.Phase(t, "s3_put")
	t.Log(ph.Error)
	if ph.Status != report.StatusFailed || !strings.Contains(ph.Error, srv.Endpoint) {
		t.Errorf("status %s, error %q; want failed naming %s", ph.Status, ph.Error, srv.Endpoint)
	}
	if ph.OpsByType["put"].Ops == 0 {
		t.Error("the server was killed before any timed put")
	}
	// A liveness bound: a hang would run to the test's timeout.
	if took > 3*time.Minute {
		t.Errorf("the run took %v after the kill", took)
	}
}

// A closed port: the phase fails at once with the endpoint, no hang.
func TestClosedPort(t *testing.T) {
	ep := s3test.ClosedPort(t)
	s3test.ServerEnv(t)
	plan := fmt.Sprintf("[plan]\ndrop_caches = \"none\"\nstorage = \"s3://nowhere/\"\ns3_endpoint = %q\n[[phase]]\nkind = \"s3_stat\"\ncount = 5\n", ep)
	res := phasestest.Run(t, registry(), plan)
	ph := res.Phase(t, "s3_stat")
	if ph.Status != report.StatusFailed || !strings.Contains(ph.Error, ep) || !strings.Contains(ph.Error, "refused") {
		t.Errorf("status %s, error %q; want connection refused at %s", ph.Status, ph.Error, ep)
	}
}

// Plan errors name their key; an object kind without storage fails
// saying what to set.
func TestPlanErrors(t *testing.T) {
	r := registry()
	for _, tc := range []struct{ plan, want string }{
		{"[plan]\nstorage = \"s3://Bad_Bucket/\"\n[[phase]]\nkind = \"s3_put\"\n", "plan.storage"},
		{"[[phase]]\nkind = \"s3_put\"\nstorage = \"file:///x\"\n", "storage"},
		{"[[phase]]\nkind = \"s3_list\"\npage_size = 5000\n", "page_size"},
		{"[[phase]]\nkind = \"s3_multipart\"\npart_size = \"1MiB\"\n", "part_size"},
		{"[[phase]]\nkind = \"s3_put\"\ns3_max_attempts = 0\n", "s3_max_attempts"},
	} {
		_, err := phases.DecodePlan(r, "p.toml", []byte(tc.plan))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want an error at %s", tc.plan, err, tc.want)
		}
	}
	// No storage at all: the phase fails with a message saying what to set.
	res := phasestest.Run(t, r, "[[phase]]\nkind = \"s3_put\"\ncount = 1\n")
	if ph := res.Phase(t, "s3_put"); ph.Status != report.StatusFailed || !strings.Contains(ph.Error, "storage = \"s3://") {
		t.Errorf("%s: %s", ph.Status, ph.Error)
	}
}

// Object sizes drawn from a distribution (phases.Sizes, as
// synthetic_workload's): a get and a stat of the same keys and seed find
// the sizes the put wrote, and the bytes are the draws', not count × size.
func TestSizeDistribution(t *testing.T) {
	srv := s3test.StartT(t)
	srv.SetEnv(t)
	srv.Client(t, "dist")
	const keys = "count = 40\nsize_dist = \"uniform\"\nmin = \"1KiB\"\nmax = \"32KiB\"\nmax_size = \"32KiB\"\nseed = 7\nworkers = 3\n"
	plan := fmt.Sprintf("[plan]\ndrop_caches = \"none\"\n%s\n[[phase]]\nkind = \"s3_put\"\n%s[[phase]]\nkind = \"s3_get\"\n%s[[phase]]\nkind = \"s3_stat\"\n%s",
		srv.PlanLines("dist", ""), keys, keys, keys)
	res := phasestest.Run(t, registry(), plan, phasestest.Ranks(2))
	put, get := res.Phase(t, "s3_put"), res.Phase(t, "s3_get")
	for _, ph := range []*report.PhaseResult{put, get, res.Phase(t, "s3_stat")} {
		if ph.Status != report.StatusPassed {
			t.Fatalf("%s: %s", ph.Name, ph.Error)
		}
	}
	if put.Bytes != get.Bytes || put.Bytes < 2*40*1024 || put.Bytes > 2*40*32*1024 || put.Bytes == 2*40*64*1024 {
		t.Errorf("put %d bytes, get %d: want equal, within the uniform's bounds", put.Bytes, get.Bytes)
	}
	if _, err := phases.DecodePlan(registry(), "p.toml", []byte("[[phase]]\nkind = \"s3_get\"\nsize_dist = \"uniform\"\nrange_size = \"1KiB\"\n")); err == nil || !strings.Contains(err.Error(), "size_dist") {
		t.Errorf("ranged get with a size distribution: %v", err)
	}
}

// A sweep adds ranks between steps: the rank that sat out the first step
// joins the run's prefix in the second, and every step's objects are
// apart (the phase directory names them) and cleaned up.
func TestSweep(t *testing.T) {
	srv := s3test.StartT(t)
	srv.SetEnv(t)
	c := srv.Client(t, "sweep")
	plan := fmt.Sprintf("[plan]\ndrop_caches = \"none\"\n%s\n[[phase]]\nkind = \"s3_stat\"\nranks = [1, 2]\ncount = 10\n[[phase]]\nkind = \"s3_list\"\ncount = 10\nobjects_per_prefix = 5\npage_size = 5\n", srv.PlanLines("sweep", "s"))
	res := phasestest.Run(t, registry(), plan, phasestest.Ranks(2))
	var sizes []int
	for _, ph := range res.Manifest.Phases {
		if ph.Status != report.StatusPassed {
			t.Fatalf("%s (%d ranks): %s", ph.Name, ph.Ranks, ph.Error)
		}
		if ph.Kind == "s3_stat" {
			sizes = append(sizes, ph.Ranks)
			if ph.OpsByType["head"].Ops != int64(10*ph.Ranks) {
				t.Errorf("%d ranks: %d heads", ph.Ranks, ph.OpsByType["head"].Ops)
			}
		}
	}
	if !slices.Equal(sizes, []int{1, 2}) {
		t.Errorf("sweep sizes %v", sizes)
	}
	if list := res.Phase(t, "s3_list"); list.OpsByType["list"].Ops != 2*2*1 {
		t.Errorf("%d list pages, want 1 for each of 2 prefixes on 2 ranks", list.OpsByType["list"].Ops)
	}
	if keys := s3test.Keys(t, c); len(keys) != 0 {
		t.Errorf("the bucket holds %v", keys)
	}
}

// Two object phases side by side (a group): each side's rank 0 finds the
// run's prefix unmarked or marked by the other; both run, and the bucket
// is left empty.
func TestGroup(t *testing.T) {
	srv := s3test.StartT(t)
	srv.SetEnv(t)
	c := srv.Client(t, "group")
	plan := fmt.Sprintf("[plan]\ndrop_caches = \"none\"\n%s\n[[phase]]\nkind = \"s3_put\"\ngroup = \"g\"\nranks = 1\ncount = 20\n[[phase]]\nkind = \"s3_stat\"\ncount = 20\n", srv.PlanLines("group", ""))
	res := phasestest.Run(t, registry(), plan, phasestest.Ranks(2))
	for _, name := range []string{"s3_put", "s3_stat"} {
		if ph := res.Phase(t, name); ph.Status != report.StatusPassed {
			t.Errorf("%s: %s", name, ph.Error)
		}
	}
	if keys := s3test.Keys(t, c); len(keys) != 0 {
		t.Errorf("the bucket holds %v\n%s", keys, res.Stderr)
	}
	// Two sides that both marked the prefix both remove the marker at the
	// end; neither may report a refusal for it.
	if strings.Contains(res.Stderr, "cleanup") {
		t.Errorf("the end of the run reported a cleanup problem:\n%s", res.Stderr)
	}
}
