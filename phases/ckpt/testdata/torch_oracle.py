"""Real PyTorch as the oracle for the checkpoints package ckpt lays out.

Run with the system interpreter that has Debian's python3-torch (1.13):
    /usr/bin/python3 torch_oracle.py COMMAND SPEC.json ARGS...

SPEC describes the model prism built: {"layers", "input", "hidden",
"dtype" (float32|bfloat16|float16), "optimizer" (none|adam|adam_mixed),
"step"}. The model is rebuilt here from torch's own classes (a ModuleList
of nn.Linear, torch.optim.Adam), so names, order and nesting come from
torch, not from prism. Every command prints one JSON object.

Commands:
  torch SPEC PRISM_FILE OUT_FILE
      Loads PRISM_FILE (weights_only where 1.13 allows it), loads its
      optimizer state into a fresh torch.optim.Adam, and writes OUT_FILE:
      torch.save of the same values held by a real model and a real Adam
      (state made by a real step, then overwritten in place).
  dcp-load SPEC DIR...
      FileSystemReader + load_state_dict(no_dist=True) of each DIR into
      full tensors (world size 1) under the keys torch's structure
      flattens to; prints, by DIR, each item's CRC-32 (tensors) or value.
  dcp-save SPEC DIR OUT_DIR PER_ITEM
      Loads DIR as dcp-load does, then saves the result with 1.13's
      FileSystemWriter (single_file_per_rank = not PER_ITEM) into OUT_DIR.
  dcp-save-dist SPEC DIR OUT_DIR WORLD PER_ITEM
      WORLD processes (gloo) each load DIR, hold the r-th torch.chunk of
      every tensor as a ShardedTensor (as FSDP shards) and save with
      1.13's FileSystemWriter; reports the files and whether OUT_DIR's
      Metadata equals DIR's (a multi-process save copies strings through
      pickle, so the .metadata bytes may differ where the objects do not).
  dcp-load-dist SPEC WORLD MARKS DIR...
      WORLD processes (gloo) load each DIR in turn with 1.13's
      FileSystemReader and load_state_dict into the r-th torch.chunk of
      every tensor as a ShardedTensor (FSDP's sharding at WORLD, which
      reshards a checkpoint saved at another world size); before its
      loads rank r creates MARKS/rank<r>, so a trace can tell whose reads
      are whose. The parent then loads each DIR whole (no_dist) and
      reports, by DIR, the items whose rows a rank loaded differ from
      those rows of the whole load (none when resharding is right).
  dcp2 SPEC DIR
      Unpickles a 2.x .metadata with classes mirroring torch 2.x's
      metadata.py and filesystem.py, reports its fields, converts it to
      1.13's classes and loads DIR as dcp-load does.
  safetensors FILE...
      Checks each file against the safetensors format and reads every
      tensor with torch.frombuffer; prints CRC-32s.
"""
import collections
import dataclasses
import enum
import io
import json
import os
import pickle
import struct
import sys
import types
import zlib

import torch
import torch.nn as nn

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def crc(t):
    t = t.detach().contiguous()
    return zlib.crc32(t.view(-1).view(torch.uint8).numpy().tobytes()) if t.numel() else 0


class Net(nn.Module):
    def __init__(self, spec):
        super().__init__()
        dims = [spec["input"]] + [spec["hidden"]] * spec["layers"]
        self.layers = nn.ModuleList(nn.Linear(dims[i], dims[i + 1]) for i in range(spec["layers"]))


def build(spec):
    """A real model and optimizer in the spec's dtype, the optimizer's
    state made by one real step. Returns (model, opt, masters)."""
    torch.manual_seed(0)
    model = Net(spec).to(DTYPES[spec["dtype"]])
    masters = None
    if spec["optimizer"] == "none":
        return model, None, None
    if spec["optimizer"] == "adam":
        params = list(model.parameters())
    else:  # Megatron-LM's fp32 main params
        masters = [p.detach().clone().float() for p in model.parameters()]
        params = masters
    opt = torch.optim.Adam(params)
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    return model, opt, masters


def saved(model, opt, masters):
    """What a training script saves."""
    if opt is None:
        return model.state_dict()
    osd = opt.state_dict()
    if masters is not None:
        osd = {"optimizer": osd, "fp32_from_fp16_params": [masters]}
    return {"model": model.state_dict(), "optimizer": osd}


def adam_of(ckpt, spec):
    return ckpt["optimizer"]["optimizer"] if spec["optimizer"] == "adam_mixed" else ckpt["optimizer"]


def cmd_torch(spec, path, out):
    res = {}
    # 1.13's weights_only unpickler has no BINFLOAT: an optimizer's
    # param_groups (lr = 0.001) cannot be read with it.
    wo = spec["optimizer"] == "none"
    ckpt = torch.load(path, weights_only=wo)
    res["weights_only"] = wo
    model, opt, masters = build(spec)
    msd = ckpt if opt is None else ckpt["model"]
    res["model_keys"] = list(msd.keys())
    res["model_metadata"] = list(getattr(msd, "_metadata", {}).keys())
    model.load_state_dict(msd)  # strict: names and shapes
    if opt is not None:
        # A fresh Adam accepts the saved state.
        fresh = torch.optim.Adam(list(model.parameters()) if masters is None else [m.clone() for m in masters])
        fresh.load_state_dict(adam_of(ckpt, spec))
        sd = fresh.state_dict()
        res["steps"] = [float(s["step"]) for s in sd["state"].values()]
        res["step_dtypes"] = sorted({str(s["step"].dtype) for s in sd["state"].values()})
        res["state_dtypes"] = sorted({str(s["exp_avg"].dtype) for s in sd["state"].values()})
        res["param_groups"] = [{k: v for k, v in g.items()} for g in adam_of(ckpt, spec)["param_groups"]]
        res["adam_defaults"] = [{k: v for k, v in g.items()} for g in opt.state_dict()["param_groups"]]
        # Put the saved values in the real optimizer's state, in place.
        saved_state = adam_of(ckpt, spec)["state"]
        for i, p in enumerate(opt.param_groups[0]["params"]):
            st = opt.state[p]
            for k in ("exp_avg", "exp_avg_sq"):
                st[k].copy_(saved_state[i][k])
            st["step"].fill_(saved_state[i]["step"])
        if masters is not None:
            for m, s in zip(masters, ckpt["optimizer"]["fp32_from_fp16_params"][0]):
                m.copy_(s)
    torch.save(saved(model, opt, masters), out)
    print(json.dumps(res))


def fqn_state(spec):
    """The state FSDP's optim_state_dict gives DCP: optimizer state keyed
    by parameter name."""
    model, opt, masters = build(spec)
    if opt is None:
        return model.state_dict()
    names = [n for n, _ in model.named_parameters()]
    osd = opt.state_dict()
    osd = {"state": {names[i]: v for i, v in osd["state"].items()},
           "param_groups": [dict(g, params=[names[i] for i in g["params"]]) for g in osd["param_groups"]]}
    if masters is not None:
        osd = {"optimizer": osd, "fp32_from_fp16_params": [masters]}
    return {"model": model.state_dict(), "optimizer": osd}


def flatten(state):
    """torch 2.4's flatten_state_dict traversal: dicts always descended,
    lists when they hold a tensor or a non-terminal container."""
    out = {}

    def terminal(v):
        if isinstance(v, collections.abc.Mapping):
            return False
        if not isinstance(v, list):
            return True
        return all(terminal(e) and not isinstance(e, torch.Tensor) for e in v)

    def walk(path, v):
        if isinstance(v, collections.abc.Mapping):
            for k, e in v.items():
                walk(path + (str(k),), e)
        elif terminal(v):
            out[".".join(map(str, path))] = v
        else:
            for i, e in enumerate(v):
                walk(path + (i,), e)

    for k, v in state.items():
        walk((str(k),), v)
    return out


def target(spec):
    """Full-size destination tensors (world size 1) and placeholders."""
    flat = flatten(fqn_state(spec))
    return {k: (torch.empty_like(v) if isinstance(v, torch.Tensor) else None) for k, v in flat.items()}, flat


def report(sd):
    return {k: ({"crc": crc(v), "dtype": str(v.dtype), "shape": list(v.shape)} if isinstance(v, torch.Tensor)
                else {"value": repr(v)}) for k, v in sd.items()}


def dcp_load(spec, d):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from dcp113 import dcp
    sd, _ = target(spec)
    dcp.load_state_dict(sd, dcp.FileSystemReader(d), no_dist=True)
    return sd


def cmd_dcp_load(spec, *dirs):
    print(json.dumps({d: report(dcp_load(spec, d)) for d in dirs}))


def cmd_dcp_save(spec, d, out, per_item):
    from dcp113 import dcp
    sd = dcp_load(spec, d)
    dcp.save_state_dict(sd, dcp.FileSystemWriter(out, single_file_per_rank=per_item != "1"), no_dist=True)
    print(json.dumps({"files": sorted(os.listdir(out))}))


def _dist_save(rank, spec, d, out, world, per_item, pg):
    import torch.distributed as dist
    from dcp113 import dcp
    from torch.distributed._shard.metadata import ShardMetadata
    from torch.distributed._shard.sharded_tensor import Shard, init_from_local_shards
    dist.init_process_group("gloo", init_method="file://" + pg, rank=rank, world_size=world)
    full = dcp_load(spec, d)
    sd = {}
    for k, v in full.items():
        if not isinstance(v, torch.Tensor) or v.dim() == 0:
            sd[k] = v
            continue
        chunks = torch.chunk(v, world)
        shards = []
        if rank < len(chunks):
            row = sum(c.shape[0] for c in chunks[:rank])
            local = chunks[rank].clone()
            shards = [Shard(tensor=local, metadata=ShardMetadata(
                shard_offsets=[row] + [0] * (v.dim() - 1), shard_sizes=list(local.shape), placement="rank:%d/cpu" % rank))]
        sd[k] = init_from_local_shards(shards, *v.shape)
    dcp.save_state_dict(sd, dcp.FileSystemWriter(out, single_file_per_rank=per_item != "1"))
    dist.barrier()
    dist.destroy_process_group()


def cmd_dcp_save_dist(spec, d, out, world, per_item):
    import tempfile
    import torch.multiprocessing as mp
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    world = int(world)
    pg = os.path.join(tempfile.mkdtemp(), "pg")
    mp.spawn(_dist_save, args=(spec, d, out, world, per_item, pg), nprocs=world)
    from dcp113 import dcp  # noqa: F401 (the classes the pickles name)
    mine = pickle.load(open(os.path.join(d, ".metadata"), "rb"))
    theirs = pickle.load(open(os.path.join(out, ".metadata"), "rb"))
    diff = [k for k in set(mine.state_dict_metadata) | set(theirs.state_dict_metadata)
            if mine.state_dict_metadata.get(k) != theirs.state_dict_metadata.get(k)]
    sdiff = [str(k) for k in set(mine.storage_data) | set(theirs.storage_data)
             if mine.storage_data.get(k) != theirs.storage_data.get(k)]
    print(json.dumps({"files": sorted(os.listdir(out)), "metadata_equal": mine == theirs,
                      "state_dict_metadata_diff": sorted(diff), "storage_data_diff": sorted(sdiff)}))


def _sharded_target(spec, rank, world):
    """target(spec) with every tensor of one or more dimensions replaced
    by a ShardedTensor holding this rank's torch.chunk of its rows."""
    from torch.distributed._shard.metadata import ShardMetadata
    from torch.distributed._shard.sharded_tensor import Shard, init_from_local_shards
    sd, flat = target(spec)
    for k, v in flat.items():
        if not isinstance(v, torch.Tensor) or v.dim() == 0:
            continue
        chunks = torch.chunk(torch.empty_like(v), world)
        shards = []
        if rank < len(chunks):
            row = sum(c.shape[0] for c in chunks[:rank])
            local = torch.empty_like(chunks[rank])
            shards = [Shard(tensor=local, metadata=ShardMetadata(
                shard_offsets=[row] + [0] * (v.dim() - 1), shard_sizes=list(local.shape), placement="rank:%d/cpu" % rank))]
        sd[k] = init_from_local_shards(shards, *v.shape)
    return sd


def _dist_load(rank, spec, world, marks, dirs, out):
    import torch.distributed as dist
    from dcp113 import dcp
    dist.init_process_group("gloo", init_method="file://" + os.path.join(out, "pg"), rank=rank, world_size=world)
    open(os.path.join(marks, "rank%d" % rank), "w").close()
    res = {}
    for d in dirs:
        sd = _sharded_target(spec, rank, world)
        dcp.load_state_dict(sd, dcp.FileSystemReader(d))
        got = {}
        for k, v in sd.items():
            if isinstance(v, torch.Tensor) and not hasattr(v, "local_shards"):
                got[k] = {"row": 0, "crc": crc(v), "rows": -1}
            elif hasattr(v, "local_shards"):
                for sh in v.local_shards():
                    got[k] = {"row": sh.metadata.shard_offsets[0], "rows": sh.tensor.shape[0], "crc": crc(sh.tensor)}
            else:
                got[k] = {"value": repr(v)}
        res[d] = got
        dist.barrier()
    with open(os.path.join(out, "rank%d.json" % rank), "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()


def cmd_dcp_load_dist(spec, world, marks, *dirs):
    import tempfile
    import torch.multiprocessing as mp
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    world = int(world)
    out = tempfile.mkdtemp()
    mp.spawn(_dist_load, args=(spec, world, marks, list(dirs), out), nprocs=world)
    ranks = [json.load(open(os.path.join(out, "rank%d.json" % r))) for r in range(world)]
    res = {}
    for d in dirs:
        full = dcp_load(spec, d)
        bad = []
        for r, got in enumerate(ranks):
            for k, g in got[d].items():
                v = full[k]
                if "value" in g:
                    ok = g["value"] == repr(v)
                elif g["rows"] < 0:
                    ok = g["crc"] == crc(v)
                else:
                    ok = g["crc"] == crc(v[g["row"]:g["row"] + g["rows"]])
                if not ok:
                    bad.append("rank %d: %s" % (r, k))
        res[d] = {"mismatches": bad, "items": sum(len(got[d]) for got in ranks)}
    print(json.dumps(res))


def stub_2x():
    """Modules torch.distributed.checkpoint.{metadata,filesystem} with the
    classes a 2.x .metadata names, mirroring torch 2.x's sources."""
    meta = types.ModuleType("torch.distributed.checkpoint.metadata")
    fs = types.ModuleType("torch.distributed.checkpoint.filesystem")

    @dataclasses.dataclass
    class ChunkStorageMetadata:
        offsets: torch.Size
        sizes: torch.Size

    class _MEM_FORMAT_ENCODING(enum.Enum):
        TORCH_CONTIGUOUS_FORMAT = 0
        TORCH_CHANNELS_LAST = 1
        TORCH_PRESERVE_FORMAT = 2

    @dataclasses.dataclass
    class TensorProperties:
        dtype: torch.dtype = dataclasses.field(default_factory=torch.get_default_dtype)
        layout: torch.layout = dataclasses.field(default=torch.strided)
        requires_grad: bool = False
        memory_format: torch.memory_format = dataclasses.field(default=torch.contiguous_format)
        pin_memory: bool = False

        def __setstate__(self, state):
            (self.dtype, self.layout, self.requires_grad, enc, self.pin_memory) = state
            assert enc == _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT, enc
            self.memory_format = torch.contiguous_format

    @dataclasses.dataclass
    class TensorStorageMetadata:
        properties: TensorProperties
        size: torch.Size
        chunks: list

    @dataclasses.dataclass
    class BytesStorageMetadata:
        pass

    @dataclasses.dataclass
    class StorageMeta:
        checkpoint_id: object = None
        save_id: object = None
        load_id: object = None
        modules: list = dataclasses.field(default_factory=list)

    @dataclasses.dataclass
    class Metadata:
        state_dict_metadata: dict
        planner_data: object = None
        storage_data: object = None
        storage_meta: object = None
        version: object = None

    @dataclasses.dataclass(frozen=True)
    class MetadataIndex:
        fqn: str
        offset: object = None
        index: object = dataclasses.field(hash=False, compare=False, default=None)

    @dataclasses.dataclass
    class _StorageInfo:
        relative_path: str
        offset: int
        length: int

    for c in (ChunkStorageMetadata, _MEM_FORMAT_ENCODING, TensorProperties, TensorStorageMetadata,
              BytesStorageMetadata, StorageMeta, Metadata, MetadataIndex):
        c.__module__ = meta.__name__
        setattr(meta, c.__name__, c)
    _StorageInfo.__module__ = fs.__name__
    fs._StorageInfo = _StorageInfo
    pkg = types.ModuleType("torch.distributed.checkpoint")
    pkg.metadata, pkg.filesystem = meta, fs
    sys.modules.update({pkg.__name__: pkg, meta.__name__: meta, fs.__name__: fs})
    return meta, fs


def cmd_dcp2(spec, d):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from dcp113 import dcp, metadata as m113
    from torch.distributed._shard.checkpoint import filesystem as fs113
    from torch.distributed._shard.sharded_tensor.metadata import TensorProperties as TP113
    meta2, _ = stub_2x()
    with open(os.path.join(d, ".metadata"), "rb") as f:
        md = pickle.load(f)
    res = {"class": type(md).__module__ + "." + type(md).__name__,
           "fields": list(vars(md).keys()), "version": md.version,
           "storage_meta": {k: (v if not isinstance(v, os.PathLike) else "Path:" + os.fspath(v)) for k, v in vars(md.storage_meta).items()},
           "planner_data": {k: list(v) for k, v in md.planner_data.items()}}
    # The same content as 1.13 objects, then 1.13's reader on the data.
    sdm = {}
    for k, v in md.state_dict_metadata.items():
        if isinstance(v, meta2.BytesStorageMetadata):
            sdm[k] = m113.BytesStorageMetadata()
            continue
        p = v.properties
        sdm[k] = m113.TensorStorageMetadata(
            properties=TP113(dtype=p.dtype, layout=p.layout, requires_grad=p.requires_grad,
                             memory_format=p.memory_format, pin_memory=p.pin_memory),
            size=v.size, chunks=[m113.ChunkStorageMetadata(offsets=c.offsets, sizes=c.sizes) for c in v.chunks])
    storage = {m113.MetadataIndex(i.fqn, i.offset, i.index): fs113._StorageInfo(s.relative_path, s.offset, s.length)
               for i, s in md.storage_data.items()}
    md113 = m113.Metadata(sdm, None, storage)
    reader = dcp.FileSystemReader(d)
    reader.read_metadata = lambda: md113
    sd, _ = target(spec)
    if spec["optimizer"] != "none":
        # 2.x's Adam has one hyperparameter 1.13's lacks.
        sd["optimizer.param_groups.0.decoupled_weight_decay"] = None
    dcp.load_state_dict(sd, reader, no_dist=True)
    res["items"] = report(sd)
    print(json.dumps(res))


def cmd_safetensors(paths):
    out = {}
    for path in paths:
        raw = open(path, "rb").read()
        (n,) = struct.unpack("<Q", raw[:8])
        assert (8 + n) % 8 == 0, "header not padded to 8 bytes"
        hdr = json.loads(raw[8:8 + n].decode("utf-8"))
        data = memoryview(raw)[8 + n:]
        meta = hdr.pop("__metadata__", None)
        assert meta is None or all(isinstance(v, str) for v in meta.values()), meta
        spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in hdr.items())
        pos = 0
        for lo, hi, k in spans:
            assert lo == pos, "%s starts at %d, expected %d" % (k, lo, pos)
            pos = hi
        assert pos == len(data), "data ends at %d, file has %d" % (pos, len(data))
        names = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
        for k, v in hdr.items():
            lo, hi = v["data_offsets"]
            dt = names[v["dtype"]]
            elems = 1
            for s in v["shape"]:
                elems *= s
            assert hi - lo == elems * torch.tensor([], dtype=dt).element_size(), k
            t = torch.frombuffer(bytearray(data[lo:hi]), dtype=dt).reshape(v["shape"]) if hi > lo else torch.empty(v["shape"], dtype=dt)
            out[k] = {"file": os.path.basename(path), "crc": crc(t), "dtype": v["dtype"], "shape": list(t.shape)}
    print(json.dumps(out))


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "safetensors":
        return cmd_safetensors(args)
    spec = json.load(open(args[0]))
    {"torch": cmd_torch, "dcp-load": cmd_dcp_load, "dcp-save": cmd_dcp_save,
     "dcp-save-dist": cmd_dcp_save_dist, "dcp-load-dist": cmd_dcp_load_dist, "dcp2": cmd_dcp2}[cmd](spec, *args[1:])


if __name__ == "__main__":
    main()
