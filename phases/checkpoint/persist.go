package checkpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/phases"
)

// Split checkpoint runs (MLPerf Storage: "To split phases, specify
// --num-checkpoints-read=0 for the Write phase and
// --num-checkpoints-write=0 for the Read phase", with a manual cache flush
// between): mlperf_checkpoint with persist = "<name>" writes its
// checkpoints into <workdir>/prism-datasets/<name>-<hash>/ (phases/
// persist.go) instead of the run directory, and a later run with
// num_checkpoints_write = 0 and checkpoint = "<name>" reads them there
// after a stat pass, instead of writing one of its own first. The hash
// covers what the files' content and layout depend on (model, processes,
// scale, seed), so the reader is refused a checkpoint of other
// parameters, and the content's generation is the directory's, not the
// phase's name or iteration, so the reader's CRC checks hold.

// persistCkptParams are what the checkpoint's files depend on.
type persistCkptParams struct {
	Layout    int     `json:"layout"`
	Model     string  `json:"model"`
	Processes int     `json:"processes"`
	Scale     float64 `json:"scale"`
	Seed      int64   `json:"seed"`
}

func (c *mlperfConfig) persistParams() persistCkptParams {
	return persistCkptParams{Layout: 1, Model: c.Model, Processes: c.processes(), Scale: c.Scale, Seed: c.Seed}
}

const stepDir = "global_epoch1_step"

// validatePersist checks persist and checkpoint against the counts.
func (c *mlperfConfig) validatePersist() error {
	if c.Persist != "" {
		if err := phases.CheckPersistName("persist", c.Persist); err != nil {
			return err
		}
		switch {
		case c.NumWrite == 0:
			return &phases.KeyError{Key: "persist", Msg: "a run that writes no checkpoint has none to keep: set num_checkpoints_write, or read a kept one with checkpoint = \"<name>\""}
		case c.Checkpoint != "":
			return &phases.KeyError{Key: "checkpoint", Msg: "persist (a write run) and checkpoint (a read-only run) exclude each other"}
		case !c.Keep:
			return &phases.KeyError{Key: "keep", Msg: "persist keeps the checkpoints: keep = false contradicts it"}
		}
	}
	if c.Checkpoint != "" {
		if err := phases.CheckPersistName("checkpoint", c.Checkpoint); err != nil {
			return err
		}
		if c.NumWrite != 0 || c.NumRead == 0 {
			return &phases.KeyError{Key: "checkpoint", Msg: "reads a kept checkpoint in a read-only run: set num_checkpoints_write = 0 and num_checkpoints_read > 0"}
		}
	}
	return nil
}

// openPersist opens the persistent directory of a write run (made, or
// marked partial again) or of a read-only run (checked: marker, list,
// every file with its size, and the parameters' hash).
func (p *mlperfCheckpoint) openPersist(ctx context.Context, env *phases.Env) error {
	c := &p.cfg
	p.closePersist()
	p.persGens = 0
	switch {
	case c.Persist != "":
		pers, err := phases.CreatePersistent(ctx, env, "checkpoint", c.Persist, c.persistParams(), env.CoordinationTimeout)
		if err != nil {
			return err
		}
		var local error
		if env.Rank == 0 {
			local = pers.Restart(env)
		}
		if err := env.Agree(ctx, local); err != nil {
			pers.Close()
			return err
		}
		p.pers = pers
	case c.Checkpoint != "":
		pers, err := phases.OpenPersistent(ctx, env, "checkpoint", "checkpoint", c.Checkpoint)
		if err != nil {
			return err
		}
		p.pers = pers
		want := c.persistParams()
		if _, hash, raw := phases.PersistDirName("checkpoint", c.Checkpoint, want); hash != pers.Info.Hash {
			return env.Errorf("setup: checkpoint = %q: %s was written with %s; this phase reads %s (model, processes, scale and seed must be the write run's)", c.Checkpoint, pers.Root.Path(), pers.Info.Params, raw)
		}
		var files []phases.PersistFile
		if err := json.Unmarshal(pers.List, &files); err != nil {
			return env.Errorf("setup: %s: %w", pers.Root.Join(phases.PersistList), err)
		}
		for _, f := range files {
			d, _, _ := strings.Cut(f.Path, "/")
			if k, err := strconv.Atoi(strings.TrimPrefix(d, stepDir)); err == nil && strings.HasPrefix(d, stepDir) {
				p.persGens = max(p.persGens, k)
			}
		}
		if p.persGens == 0 {
			return env.Errorf("setup: checkpoint = %q: %s lists no checkpoint", c.Checkpoint, pers.Root.Path())
		}
		if err := pers.CheckFiles(ctx, env, files, false); err != nil {
			return err
		}
	}
	return nil
}

// gens is how many checkpoint directories the phase uses.
func (p *mlperfCheckpoint) gens() int {
	if p.persGens > 0 {
		return p.persGens
	}
	return max(p.cfg.NumWrite, 1)
}

// generation is the content generation of a checkpoint: the persistent
// directory's when there is one (the same for the write and the read
// run), else the phase's.
func (p *mlperfCheckpoint) generation(env *phases.Env, salt string) uint64 {
	if p.pers == nil {
		return generation(env, salt)
	}
	h := fnv.New64a() // generation's hash, over the directory's name
	fmt.Fprintf(h, "persist/%s/%s", p.pers.Dir, salt)
	return h.Sum64()
}

// persistPins puts the checkpoint directories in the persistent directory
// instead of the phase's, replacing those Setup pinned.
func (p *mlperfCheckpoint) persistPins(env *phases.Env, pins []*pio.Dir) error {
	if p.pers == nil {
		return nil
	}
	for k := range pins {
		if pins[k] == nil {
			return env.Errorf("setup: persist and checkpoint keep checkpoints in the workdir, not in object storage")
		}
		pins[k].Close()
		name := fmt.Sprintf("%s%d", stepDir, k+1)
		var err error
		if p.cfg.Checkpoint != "" {
			pins[k], err = p.pers.Root.OpenPath(name)
		} else {
			pins[k], err = p.pers.Root.EnsureSub(name, 0o755)
		}
		if err != nil {
			return env.Errorf("setup: %w", err)
		}
		p.dirs[k] = filepath.Join(p.pers.Root.Path(), name)
	}
	return nil
}

// completePersist lists every file the write run's processes wrote (a
// stat of each, on the rank that wrote it) and has rank 0 mark the
// directory complete.
func (p *mlperfCheckpoint) completePersist(ctx context.Context, env *phases.Env) error {
	if p.pers == nil || p.cfg.Persist == "" || !p.ok {
		return nil
	}
	var mine []phases.PersistFile
	var local error
	var st unix.Stat_t
	for _, pr := range p.procs {
		for k, w := range pr.writers {
			for _, f := range w.files {
				name := w.layout.Files[f].Name
				if err := w.pin.Stat(pio.MustName(name), &st); err != nil {
					local = env.Errorf("verify: %w", w.pin.Wrap("stat", pio.MustName(name), err))
					break
				}
				mine = append(mine, phases.PersistFile{Path: fmt.Sprintf("%s%d/%s", stepDir, k+1, name), Size: st.Size})
			}
		}
	}
	if err := env.Agree(ctx, local); err != nil {
		return err
	}
	b, _ := json.Marshal(mine)
	all, err := env.Comm.Gather(ctx, 0, b)
	if err != nil {
		return err
	}
	if env.Rank == 0 {
		local = func() error {
			var files []phases.PersistFile
			var bytes int64
			for r, raw := range all {
				var part []phases.PersistFile
				if err := json.Unmarshal(raw, &part); err != nil {
					return env.Errorf("verify: bad file list from rank %d: %w", r, err)
				}
				files = append(files, part...)
			}
			sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
			for _, f := range files {
				bytes += f.Size
			}
			list, _ := json.Marshal(files)
			return p.pers.Complete(env, "checkpoint", p.cfg.Persist, p.cfg.persistParams(), list, len(files), bytes)
		}()
	}
	return env.Agree(ctx, local)
}

func (p *mlperfCheckpoint) closePersist() {
	p.pers.Close()
	p.pers = nil
}
