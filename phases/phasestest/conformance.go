package phasestest

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/report"
)

// Conformance checks every kind of reg against the contract every phase
// kind must keep, whatever its family:
//
//   - every field of its config carries a toml and a doc tag (prism list
//     prints the doc; BurntSushi/toml would otherwise match keys
//     case-insensitively);
//   - it has a Sample (a small, fast instance), and its defaults with the
//     Sample keys decode and validate;
//   - its footprint is never negative;
//   - a run on one rank in a temporary directory passes, its Teardown
//     leaves no file in the phase's directory but what it declares as
//     Outputs, and the run directory is gone afterwards;
//   - a kind that counts its ops (phases.OpCounter) records exactly
//     ExpectedOps per iteration, as read when its Run starts (which is
//     when progress reads it), unless that is 0 (not known);
//   - its Run makes no recorder and merges none: Setup makes them, the
//     engine merges worker sets after the clock (phases/doc.go, "Timed
//     loops"; report.Made);
//   - a Run whose context is cancelled while it runs returns within a
//     second, and the whole run ends with the phase failed, not hung.
//
// Kinds that run only over object storage (Kind.Storage) are checked for
// tags and decoding; their runs are skipped, since there is no server:
// ConformanceWith gives one.
func Conformance(t *testing.T, reg *phases.Registry) { ConformanceWith(t, reg, "") }

// ConformanceWith is Conformance with storage: [plan] lines (storage =
// "s3://…", s3_endpoint = …) given to the kinds that need object storage,
// whose runs then go through the same checks as every other kind's.
func ConformanceWith(t *testing.T, reg *phases.Registry, storage string) {
	for _, k := range reg.Kinds() {
		t.Run(k.Name, func(t *testing.T) {
			t.Run("tags", func(t *testing.T) { checkTags(t, reflect.TypeOf(k.New().Config()).Elem(), "") })
			if k.Sample == "" {
				t.Fatalf("kind %s has no Sample: the conformance suite runs each kind's small, fast instance (Kind.Sample)", k.Name)
			}
			plan := fmt.Sprintf("[[phase]]\nkind = %q\n%s\n", k.Name, k.Sample)
			header := "[plan]\ndrop_caches = \"none\"\n"
			if k.Storage {
				header += storage + "\n"
			}
			plan = header + plan
			p, err := phases.DecodePlan(reg, k.Name+".toml", []byte(plan))
			if err != nil {
				t.Fatalf("defaults with the kind's Sample do not decode: %v", err)
			}
			t.Run("footprint", func(t *testing.T) {
				fp, ok := p.Phases[0].Phase.(phases.Footprinter)
				if !ok {
					return
				}
				for _, n := range []int{1, 2, 3, 16, 1000} {
					if f := fp.Footprint(n); f.Files < 0 || f.Bytes < 0 {
						t.Errorf("Footprint(%d) = %+v: negative", n, f)
					}
				}
			})
			if k.Storage && storage == "" {
				t.Logf("%s runs over object storage only: run and cancel need a server (ConformanceWith)", k.Name)
				return
			}
			t.Run("run", func(t *testing.T) { conformRun(t, k, plan) })
			t.Run("cancel", func(t *testing.T) { conformCancel(t, k, plan) })
		})
	}
}

func checkTags(t *testing.T, typ reflect.Type, prefix string) {
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			checkTags(t, f.Type, prefix)
			continue
		}
		name := prefix + f.Name
		tag, ok := f.Tag.Lookup("toml")
		if !ok {
			t.Errorf("config field %s has no toml tag", name)
			continue
		}
		if tag == "-" {
			continue
		}
		if f.Tag.Get("doc") == "" {
			t.Errorf("config field %s (toml %q) has no doc tag", name, tag)
		}
	}
}

// runMakesRecorders are the kinds whose Run makes its recorders, and why
// it cannot leave that to Setup (phases/doc.go, "Timed loops"): every
// other kind's Run must make none.
var runMakesRecorders = map[string]string{
	// Which of read, write, trim and fsync it records is what fio's
	// report holds, known once fio has exited; its headline rates are
	// fio's own, over fio's runtime, which the ingest is not in.
	"fio": "its op types are the sections of fio's report",
}

// probed returns a registry holding only kind k, whose phases are wrapped
// so the test sees each step; every optional contract of the phase is
// forwarded, so the engine treats it as it treats the real one.
func probed(k phases.Kind, pr *probe) *phases.Registry {
	reg := phases.NewRegistry()
	w := k
	w.New = func() phases.Phase {
		pr.mu.Lock()
		defer pr.mu.Unlock()
		pr.inner = k.New()
		return pr
	}
	reg.Register(w)
	return reg
}

type probe struct {
	mu    sync.Mutex
	inner phases.Phase
	// cancelAfter > 0: Run's context is cancelled that long after Run
	// starts, and cancelled/returned record when.
	cancelAfter time.Duration
	cancelled   time.Time
	returned    time.Time
	leftovers   []string
	sawRun      bool
	wants       []int64 // ExpectedOps as each Run started
	// made are the recorders each Run created and the recorder merges it
	// did (report.Made, read around the inner Run): none, by the rule of
	// phases/doc.go's "Timed loops".
	made [][2]int64
}

func (p *probe) Config() any { return p.inner.Config() }

func (p *probe) Setup(ctx context.Context, env *phases.Env) error { return p.inner.Setup(ctx, env) }

func (p *probe) Run(ctx context.Context, env *phases.Env) error {
	p.sawRun = true
	if !env.Warmup {
		p.wants = append(p.wants, p.ExpectedOps())
	}
	if p.cancelAfter <= 0 {
		c0, m0 := report.Made()
		err := p.inner.Run(ctx, env)
		c1, m1 := report.Made()
		p.made = append(p.made, [2]int64{c1 - c0, m1 - m0})
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := time.AfterFunc(p.cancelAfter, func() {
		p.mu.Lock()
		p.cancelled = time.Now()
		p.mu.Unlock()
		cancel()
	})
	defer timer.Stop()
	err := p.inner.Run(ctx, env)
	p.mu.Lock()
	p.returned = time.Now()
	p.mu.Unlock()
	return err
}

func (p *probe) Verify(ctx context.Context, env *phases.Env) error { return p.inner.Verify(ctx, env) }

func (p *probe) Teardown(ctx context.Context, env *phases.Env) error {
	err := p.inner.Teardown(ctx, env)
	var keep []string
	if o, ok := p.inner.(phases.Outputter); ok {
		keep = o.Outputs()
	}
	_ = filepath.WalkDir(env.Dir, func(path string, d fs.DirEntry, werr error) error {
		if werr != nil || d.IsDir() {
			return nil
		}
		for _, k := range keep {
			if path == k || strings.HasPrefix(path, k+string(filepath.Separator)) {
				return nil
			}
		}
		p.leftovers = append(p.leftovers, path)
		return nil
	})
	return err
}

func (p *probe) Footprint(ranks int) phases.Footprint {
	if f, ok := p.inner.(phases.Footprinter); ok {
		return f.Footprint(ranks)
	}
	return phases.Footprint{}
}

func (p *probe) Fadvises() bool {
	f, ok := p.inner.(phases.Fadviser)
	return ok && f.Fadvises()
}

func (p *probe) ExpectedOps() int64 {
	if c, ok := p.inner.(phases.OpCounter); ok {
		return c.ExpectedOps()
	}
	return 0
}

func (p *probe) MetricLines(res *report.PhaseResult) []string {
	if m, ok := p.inner.(phases.MetricLiner); ok {
		return m.MetricLines(res)
	}
	return nil
}

func conformRun(t *testing.T, k phases.Kind, plan string) {
	pr := &probe{}
	res := Run(t, probed(k, pr), plan, File(k.Name+".toml"))
	ph := res.Phase(t, k.Name)
	if ph.Status != report.StatusPassed {
		t.Fatalf("the kind's Sample failed: %s\nstderr:\n%s", ph.Error, res.Stderr)
	}
	if !pr.sawRun {
		t.Fatal("Run was never called")
	}
	if len(pr.leftovers) > 0 {
		t.Errorf("Teardown left %d files it does not declare as Outputs, e.g. %s", len(pr.leftovers), pr.leftovers[0])
	}
	for it, m := range pr.made {
		if why, ok := runMakesRecorders[k.Name]; ok {
			t.Logf("%s: Run may make recorders: %s", k.Name, why)
			break
		}
		// Setup makes the recorders and the engine merges the worker sets
		// after the clock (phases/doc.go, "Timed loops"): either inside
		// the Run is time the phase's wall holds.
		if m[0] != 0 {
			t.Errorf("iteration %d: Run made %d recorders Setup had not (make them in Setup: Env.Recorder, Env.NewSet().Op)", it, m[0])
		}
		if m[1] != 0 {
			t.Errorf("iteration %d: Run merged %d recorders inside its timed span (leave worker sets to the engine: Env.NewSet)", it, m[1])
		}
	}
	if _, ok := pr.inner.(phases.OpCounter); ok {
		// Progress's percentage and ETA: the ops recorded, over the count.
		var want int64
		for _, w := range pr.wants {
			if w == 0 {
				return // not known for this configuration
			}
			want += w
		}
		if got := ph.PerRank.At(0).Ops; got != want {
			t.Errorf("%d ops recorded in %d iterations, ExpectedOps says %v: progress would not reach 100%%", got, len(pr.wants), pr.wants)
		}
	}
}

func conformCancel(t *testing.T, k phases.Kind, plan string) {
	pr := &probe{cancelAfter: 5 * time.Millisecond}
	res := Run(t, probed(k, pr), plan, File(k.Name+".toml"))
	pr.mu.Lock()
	cancelled, returned := pr.cancelled, pr.returned
	pr.mu.Unlock()
	if cancelled.IsZero() {
		// Run finished before the cancel: nothing to see, but it must
		// have passed.
		if st := res.Phase(t, k.Name).Status; st != report.StatusPassed {
			t.Fatalf("status %s: %s", st, res.Phase(t, k.Name).Error)
		}
		return
	}
	// A liveness bound, not a speed measurement: a Run that ignores its
	// context runs to the end of its work (seconds to forever).
	if d := returned.Sub(cancelled); d > time.Second {
		t.Errorf("Run returned %s after its context was cancelled (want within 1s)", d.Round(time.Millisecond))
	}
}
