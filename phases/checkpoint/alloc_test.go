package checkpoint

import (
	"context"
	"testing"

	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/phasestest"
)

// TestTimedLoopsAllocateNothing: a save's write loop (writevs of staged
// headers and pool chunks, DCP's writes, lseeks, fsyncs) and a load's
// read loop (buffered reads, lseeks; mapped touches) allocate nothing
// once Setup has run, so no allocation lands between two clock reads; nor
// does Run make a recorder Setup had not (a recorder's creation clears
// its ~270 KiB histogram, ~115 µs of the wall).
func TestTimedLoopsAllocateNothing(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ name, save, load, keys string }{
		{"torch", "ddp_save", "ddp_load", "optimizer = \"adam\"\n"},
		{"dcp", "fsdp_save", "fsdp_load", "optimizer = \"adam\"\n"},
		{"safetensors-mmap", "ddp_save", "ddp_load", "format = \"safetensors\"\n"},
		{"rl", "fsdp_save", "rl_load", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := phasestest.Env(t, tc.save)
			p, err := phases.DecodePlan(registry(), "a.toml", []byte("[[phase]]\nkind = \""+tc.save+"\"\n"+tc.keys+tinyModel+
				"[[phase]]\nkind = \""+tc.load+"\"\n"+tc.keys+tinyModel))
			if err != nil {
				t.Fatal(err)
			}
			save := p.Phases[0].Phase.(*ckptSave)
			if err := save.Setup(ctx, env); err != nil {
				t.Fatal(err)
			}
			w := save.w
			if w.recs == nil {
				t.Fatal("save: Setup made no recorders")
			}
			made := w.recs.all()
			n := testing.AllocsPerRun(5, func() {
				w.made = w.made[:0]
				for _, f := range w.files {
					if err := w.writeFile(ctx, env, f); err != nil {
						t.Fatal(err)
					}
				}
			})
			if n != 0 {
				t.Errorf("the write loop allocates %v times per save", n)
			}
			if err := save.Run(ctx, env); err != nil {
				t.Fatal(err)
			}
			if w.recs.all() != made {
				t.Error("save: Run made a recorder Setup had not")
			}
			if err := save.Verify(ctx, env); err != nil {
				t.Fatal(err)
			}
			load := p.Phases[1].Phase.(*ckptLoad)
			if err := load.Setup(ctx, env); err != nil {
				t.Fatal(err)
			}
			if load.rd.recs == nil {
				t.Fatal("load: Setup made no recorders")
			}
			made = load.rd.recs.all()
			n = testing.AllocsPerRun(5, func() {
				if err := load.rd.run(ctx, env, load.kind); err != nil {
					t.Fatal(err)
				}
			})
			if n != 0 {
				t.Errorf("the read loop allocates %v times per load", n)
			}
			if load.rd.recs.all() != made {
				t.Error("load: Run made a recorder Setup had not")
			}
			if err := load.Verify(ctx, env); err != nil {
				t.Fatal(err)
			}
			load.Teardown(ctx, env)
		})
	}
}
