package checkpoint

import (
	"context"
	"encoding/binary"
	"errors"
	"path/filepath"

	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/ckpt"
)

// ckptSave is ddp_save and fsdp_save.
type ckptSave struct {
	kind  string
	cfg   saveCfg
	model *ckpt.Model
	w     *writer
	ok    bool
	want  int64 // this rank's timed ops per iteration, from Setup's plan
}

func (p *ckptSave) Config() any { return p.cfg }

// ExpectedOps is this rank's timed ops per iteration (phases.OpCounter),
// which Setup counts from the calls it planned (writer.expectedOps): they
// depend on the model, the format, the rank (rank 0 alone writes a DDP
// checkpoint and an FSDP .metadata, every FSDP rank its own shard) and the
// directory's st_blksize, so it is 0 until Setup has run.
func (p *ckptSave) ExpectedOps() int64 { return p.want }

func (p *ckptSave) Footprint(ranks int) phases.Footprint {
	mk, _, _ := p.cfg.keys()
	m := mk.model()
	if m == nil {
		return phases.Footprint{}
	}
	spec := saveSpec(p.kind, p.cfg)
	if p.kind == "ddp" {
		// Rank 0 writes it all; spread over the ranks so totals add up.
		return phases.Footprint{Files: 1, Bytes: (m.Bytes() + int64(ranks) - 1) / int64(ranks)}
	}
	l := newLayout(m, spec, ranks, 0, "")
	return phases.Footprint{Files: int64((len(l.Files) + ranks - 1) / ranks), Bytes: (l.Payload() + int64(ranks) - 1) / int64(ranks)}
}

func (p *ckptSave) Setup(ctx context.Context, env *phases.Env) error {
	mk, _, _ := p.cfg.keys()
	if p.model == nil {
		m, err := mk.resolve(ctx, env)
		if err != nil {
			return err
		}
		p.model = m
	}
	dir := filepath.Join(env.Dir, "checkpoint")
	if p.w != nil && p.w.dir == dir {
		// The previous iteration's checkpoint: every iteration creates its
		// files afresh, as a training job's next save does. (A sweep's
		// other sizes write elsewhere, and their checkpoints stay for the
		// loads of the same size.)
		if err := p.w.removeMade(); err != nil {
			return env.Errorf("setup: remove the previous iteration's checkpoint: %w", err)
		}
	}
	p.ok = false
	obj, err := openPlace(ctx, env, &mk.StorageKeys, dir)
	if err != nil {
		return err
	}
	p.w = &writer{spec: saveSpec(p.kind, p.cfg), model: p.model, dir: dir, gen: generation(env, "save"), obj: obj}
	p.want = 0
	if err := p.w.prepare(env, uint64(mk.Seed), int64(mk.BufferBudget)); err != nil {
		return err
	}
	p.want = p.w.expectedOps()
	// The rank's recorders of the files Run writes, made here: not inside
	// the timed Run (a recorder's creation clears its ~270 KiB histogram).
	for _, f := range p.w.files {
		p.w.makeRecs(env, f)
	}
	return nil
}

func (p *ckptSave) Run(ctx context.Context, env *phases.Env) error {
	if err := p.w.write(ctx, env); err != nil {
		return err
	}
	p.ok = true
	// Metrics are summed over ranks: per-checkpoint figures come from rank 0.
	if env.Rank == 0 {
		env.SetMetric("checkpoint_bytes", float64(p.model.Bytes()))
		env.SetMetric("model_params", float64(p.model.Params))
		env.SetMetric("fsync", b2f(p.w.spec.fsync && p.w.obj == nil)) // an object has nothing to fsync
	}
	env.SetMetric("header_bytes", float64(p.w.headerB))
	env.SetMetric("files", float64(len(p.w.files)))
	if p.w.splits > 0 {
		env.SetMetric("split_writes", float64(p.w.splits))
	}
	if p.w.obj != nil {
		p.w.obj.st.Record(env) // the retries of the Run's requests too
	}
	return nil
}

// Verify checks the files' sizes and shares every piece's CRC with every
// rank, recording the checkpoint for the loads after it.
func (p *ckptSave) Verify(ctx context.Context, env *phases.Env) error {
	_, err := p.w.finish(ctx, env)
	return err
}

// Teardown removes a partial checkpoint; a complete one stays for the
// load phases after it (the run directory's cleanup removes it).
func (p *ckptSave) Teardown(ctx context.Context, env *phases.Env) error {
	if p.w != nil && !p.ok {
		return p.w.removeMade()
	}
	return nil
}

// Memory is the content pool (at most buffer_budget) and a window of the
// largest tensor, plus the layout's bookkeeping.
func (p *ckptSave) Memory(ranks int) (int64, string) {
	mk, _, _ := p.cfg.keys()
	return checkpointMemory(mk)
}

// checkpointMemory is what a checkpoint phase holds: buffer_budget of
// content (pool or read buffer) and ~200 bytes of layout per tensor.
func checkpointMemory(mk *ModelKeys) (int64, string) {
	b := int64(mk.BufferBudget) + mk.objMemory(1)
	if m := mk.model(); m != nil {
		b += int64(len(m.Tensors)) * 200
	}
	return b, "buffer_budget"
}

// Outputs is the complete checkpoint, left for the loads after this phase.
func (p *ckptSave) Outputs() []string {
	if p.w != nil && p.ok {
		return []string{p.w.dir}
	}
	return nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// agreeRecord makes every rank of the phase load rank 0's choice of
// checkpoint, or all write one: a rank that sat out the save (a sweep
// size, a rank subset, a load at more ranks than saved) rebuilds its
// record from what rank 0 broadcasts: the spec, the generation and seed
// of the content, and every piece's CRC.
func agreeRecord(ctx context.Context, env *phases.Env, m *ckpt.Model, rec *checkpointRecord) (*checkpointRecord, error) {
	var msg []byte
	if env.Rank == 0 && rec != nil {
		msg = encodeRecord(rec)
	}
	got, err := env.Comm.Bcast(ctx, 0, msg)
	if err != nil {
		return nil, err
	}
	if len(got) == 0 {
		return nil, nil
	}
	if env.Rank == 0 {
		return rec, nil
	}
	want, crcs, err := decodeRecord(got)
	if err != nil {
		return nil, env.Errorf("setup: the checkpoint record rank 0 sent: %w", err)
	}
	if rec != nil && rec.dir == want.dir && rec.gen == want.gen && rec.where == want.where {
		return rec, nil // this rank took part in that save
	}
	if want.modelID != m.ID() {
		return nil, env.Errorf("setup: rank 0 loads a checkpoint of model %s, this rank's plan resolves model %s (%s)", want.modelID, m.ID(), m)
	}
	l := newLayout(m, want.spec, want.layoutRanks, want.seed, want.dir)
	if len(crcs) != len(l.Pieces) {
		return nil, env.Errorf("setup: rank 0 sent %d checksums for the checkpoint in %s, its layout has %d pieces", len(crcs), want.dir, len(l.Pieces))
	}
	for i := range l.Pieces {
		l.Pieces[i].CRC = crcs[i]
	}
	return &checkpointRecord{kind: want.spec.kind, spec: want.spec, dir: want.dir, ranks: want.ranks, gen: want.gen,
		seed: want.seed, poolP: want.poolP, model: m, layout: l, where: want.where}, nil
}

// recordMsg is a checkpoint record as rank 0 broadcasts it.
type recordMsg struct {
	spec               writeSpec
	dir, modelID       string
	where              string
	ranks, layoutRanks int
	gen, seed          uint64
	poolP              int64
}

func encodeRecord(r *checkpointRecord) []byte {
	var b []byte
	str := func(s string) { b = binary.AppendUvarint(b, uint64(len(s))); b = append(b, s...) }
	num := func(x uint64) { b = binary.AppendUvarint(b, x) }
	str(r.spec.kind)
	str(r.spec.format)
	str(string(r.spec.version))
	num(uint64(b2i(r.spec.fsync)))
	num(uint64(r.spec.writeSize))
	num(uint64(b2i(r.spec.perTensor)))
	str(r.dir)
	str(r.where)
	str(r.model.ID())
	num(uint64(r.ranks))
	num(uint64(r.layout.Ranks))
	num(r.gen)
	num(r.seed)
	num(uint64(r.poolP))
	num(uint64(len(r.layout.Pieces)))
	for _, p := range r.layout.Pieces {
		b = binary.LittleEndian.AppendUint32(b, p.CRC)
	}
	return b
}

func decodeRecord(b []byte) (recordMsg, []uint32, error) {
	var m recordMsg
	bad := errors.New("truncated")
	num := func() uint64 {
		x, n := binary.Uvarint(b)
		if n <= 0 {
			b = nil
			return 0
		}
		b = b[n:]
		return x
	}
	str := func() string {
		n := num()
		if n > uint64(len(b)) {
			b = nil
			return ""
		}
		s := string(b[:n])
		b = b[n:]
		return s
	}
	m.spec.kind, m.spec.format, m.spec.version = str(), str(), ckpt.TorchVersion(str())
	m.spec.fsync, m.spec.writeSize, m.spec.perTensor = num() == 1, int64(num()), num() == 1
	m.dir, m.where, m.modelID = str(), str(), str()
	m.ranks, m.layoutRanks = int(num()), int(num())
	m.gen, m.seed, m.poolP = num(), num(), int64(num())
	n := num()
	if b == nil || uint64(len(b)) != 4*n || m.layoutRanks <= 0 {
		return m, nil, bad
	}
	crcs := make([]uint32, n)
	for i := range crcs {
		crcs[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return m, crcs, nil
}
