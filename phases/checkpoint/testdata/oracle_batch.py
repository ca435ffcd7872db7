"""Runs several checks of phases/ckpt's torch_oracle.py in one interpreter.

    /usr/bin/python3 oracle_batch.py JOBS.json

JOBS is a list of {"cmd": torch | dcp-load | dcp-save-dist | safetensors,
"spec": the model (see torch_oracle.py), "args": [...]}; the answer is
the list of each command's JSON. A dcp-load answer also carries, under
"expected", repr() of every non-tensor value of the state torch's own
model and Adam give (flattened as DCP flattens it), to compare with what
load_state_dict read from prism's files. One torch import serves every
job: the start-up costs more than most checks.
"""
import contextlib
import io
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# At the top level: mp.spawn's children import this module and must find
# torch_oracle too.
sys.path.insert(0, os.path.join(HERE, "..", "..", "ckpt", "testdata"))

import torch  # noqa: E402
import torch_oracle as oracle  # noqa: E402


def run(job):
    cmd, spec, args = job["cmd"], job.get("spec"), job["args"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if cmd == "safetensors":
            oracle.cmd_safetensors(args)
        else:
            {"torch": oracle.cmd_torch, "dcp-load": oracle.cmd_dcp_load,
             "dcp-save-dist": oracle.cmd_dcp_save_dist}[cmd](spec, *args)
    res = json.loads(out.getvalue())
    if cmd == "dcp-load":
        flat = oracle.flatten(oracle.fqn_state(spec))
        res = {"items": res[args[0]],
               "expected": {k: repr(v) for k, v in flat.items() if not isinstance(v, torch.Tensor)}}
    return res


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        jobs = json.load(f)
    print(json.dumps([run(j) for j in jobs]))
