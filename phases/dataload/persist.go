package dataload

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/prism-hpc/prism/phases"
)

// Persistent datasets (phases/persist.go): create_dataset with persist =
// "<name>" writes its files once into <workdir>/prism-datasets/<name>-
// <hash>/ and the manifest (paths, sizes, MD5s: the dsFile list md5_check
// already uses) as the directory's file list; a later create_dataset with
// the same parameters finds it complete and writes nothing, and train and
// md5_check with dataset = "<name>" read it in place after a stat pass
// (verify = "full": every file's MD5).

// persistParams are what a dataset's content depends on, and so what its
// directory's hash covers (chunk, fsync and buffer_budget change how it
// is written, not what). Layout is the file naming's version.
type persistParams struct {
	Layout  int     `json:"layout"`
	Sizes   []int64 `json:"sizes"`
	Copies  int     `json:"copies,omitempty"`
	Total   int64   `json:"total,omitempty"`
	Subdirs int     `json:"subdirs,omitempty"`
	Seed    int64   `json:"seed"`
}

func (k *DatasetKeys) persistParams() persistParams {
	p := persistParams{Layout: 1, Total: int64(k.Total), Seed: k.Seed}
	for _, s := range k.Sizes {
		p.Sizes = append(p.Sizes, int64(s))
	}
	if k.Total == 0 {
		p.Copies = k.Copies
	}
	if k.Subdirs > 1 {
		p.Subdirs = k.Subdirs
	}
	return p
}

// verifyModes are the values of a reader's verify key.
func checkVerify(v string) error {
	if v != "" && v != "stat" && v != "full" {
		return &phases.KeyError{Key: "verify", Msg: fmt.Sprintf("unknown check %q (allowed: stat, full)", v)}
	}
	return nil
}

// checkDatasetName checks a reader's dataset key naming a persistent one.
func checkDatasetName(name string) error { return phases.CheckPersistName("dataset", name) }

func persistFiles(files []dsFile) []phases.PersistFile {
	out := make([]phases.PersistFile, len(files))
	for i, f := range files {
		out[i] = phases.PersistFile{Path: f.Path, Size: f.Size, MD5: f.MD5}
	}
	return out
}

// decodeList is a persistent dataset's file list as the manifest.
func decodeList(env *phases.Env, pers *phases.Persistent) ([]dsFile, int64, error) {
	var files []dsFile
	if err := json.Unmarshal(pers.List, &files); err != nil {
		return nil, 0, env.Errorf("setup: %s: %w", pers.Root.Join(phases.PersistList), err)
	}
	var bytes int64
	for i, f := range files {
		if f.Index != i {
			return nil, 0, env.Errorf("setup: %s: entry %d has index %d", pers.Root.Join(phases.PersistList), i, f.Index)
		}
		bytes += f.Size
	}
	if len(files) != pers.Info.Files || bytes != pers.Info.Bytes {
		return nil, 0, env.Errorf("setup: %s: %d files of %d bytes, the marker says %d of %d", pers.Root.Join(phases.PersistList), len(files), bytes, pers.Info.Files, pers.Info.Bytes)
	}
	return files, bytes, nil
}

// setupPersist opens (or makes) the persistent directory. A complete one
// is checked (stat pass) and reused; otherwise this rank's share is laid
// out in it, after removing what an unfinished creation left of it.
func (p *createDataset) setupPersist(ctx context.Context, env *phases.Env) error {
	p.reuse = nil
	p.pers.Close()
	wait := env.CoordinationTimeout
	if p.cfg.PersistWait != nil {
		wait = time.Duration(*p.cfg.PersistWait)
	}
	pers, err := phases.CreatePersistent(ctx, env, "dataset", p.cfg.Persist, p.cfg.DatasetKeys.persistParams(), wait)
	if err != nil {
		return err
	}
	p.pers = pers
	if pers.Info != nil {
		files, _, err := decodeList(env, pers)
		if err != nil {
			return err
		}
		if err := pers.CheckFiles(ctx, env, persistFiles(files), false); err != nil {
			return err
		}
		p.reuse, p.root, p.path = files, pers.Root, pers.Root.Path()
		if env.Rank == 0 {
			fmt.Fprintf(env.Log, "prism: %s %q: reusing the persistent dataset %s (%d files)\n", env.Kind, env.Name, pers.Root.Path(), len(files))
		}
		return nil
	}
	if err := p.prepare(env, ""); err != nil {
		return err
	}
	for _, n := range p.names {
		if err := p.root.Unlink(n); err != nil && err != unix.ENOENT {
			return env.Errorf("setup: %w", p.root.Wrap("unlink", n, err))
		}
	}
	return nil
}

// verifyPersist shares the manifest and, for a dataset this run wrote,
// has rank 0 write its list and marker once every rank's files are there.
func (p *createDataset) verifyPersist(ctx context.Context, env *phases.Env) error {
	var ds *dataset
	reused := 0.0
	if p.reuse != nil {
		ds = &dataset{Phase: env.Name, Stamp: datasetStamp(env), Dir: p.pers.Root.Path(), Persist: p.pers.Dir, Seed: p.cfg.Seed, Files: p.reuse}
		for _, f := range p.reuse {
			ds.Bytes += f.Size
		}
		env.State[stateDataset] = ds
		reused = 1
	} else {
		var st unix.Stat_t
		var local error
		for i, f := range p.mine {
			if err := p.root.Stat(p.names[i], &st); err != nil {
				local = env.Errorf("verify: %w", p.root.Wrap("stat", p.names[i], err))
				break
			}
			if st.Size != f.Size {
				local = env.Errorf("verify: %s holds %d bytes, want %d", p.root.Join(f.Path), st.Size, f.Size)
				break
			}
		}
		if err := env.Agree(ctx, local); err != nil {
			return err
		}
		var err error
		if ds, err = p.share(ctx, env); err != nil {
			return err
		}
		local = nil
		if env.Rank == 0 {
			list, _ := json.Marshal(ds.Files)
			local = p.pers.Complete(env, "dataset", p.cfg.Persist, p.cfg.DatasetKeys.persistParams(), list, len(ds.Files), ds.Bytes)
		}
		if err := env.Agree(ctx, local); err != nil {
			return err
		}
		p.made = 0 // complete: never removed by a later iteration
	}
	if env.Rank == 0 {
		env.SetMetric("dataset_files", float64(len(ds.Files)))
		env.SetMetric("dataset_bytes", float64(ds.Bytes))
		env.SetMetric("dataset_reused", reused)
		// Time spent waiting for another job creating it (0 when none).
		env.SetMetric("dataset_wait_s", p.pers.Waited.Seconds())
	}
	p.ok = true
	return nil
}

// openPersistentDataset is the persistent dataset name, checked (a stat
// pass, or every MD5 with verify = "full") on every rank, as a manifest.
func openPersistentDataset(ctx context.Context, env *phases.Env, name, verify string) (*dataset, error) {
	pers, err := phases.OpenPersistent(ctx, env, "dataset", "dataset", name)
	if err != nil {
		return nil, err
	}
	defer pers.Close()
	files, bytes, err := decodeList(env, pers)
	if err != nil {
		return nil, err
	}
	if err := pers.CheckFiles(ctx, env, persistFiles(files), verify == "full"); err != nil {
		return nil, err
	}
	var seed int64
	var pp persistParams
	if json.Unmarshal(pers.Info.Params, &pp) == nil {
		seed = pp.Seed
	}
	return &dataset{Phase: pers.Info.Phase, Stamp: -1, Dir: pers.Root.Path(), Persist: pers.Dir, Seed: seed, Bytes: bytes, Files: files}, nil
}
