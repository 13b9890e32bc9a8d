"""A compiled program is the same in every process: the passes, the fusion plan, the layout and the generated
code never follow Python's string hash order (``PYTHONHASHSEED``) or where objects happen to sit in memory
(sets of Vars and Eqns hash by address).  Otherwise processes build different kernels from one step, miss each
other's cached graphs, and round differently.  B9's training step (a small GPT: forward, backward, gradient
clipping, AdamW; ``benchmarks/gpt_model.py``) is laid out in fresh processes under three hash seeds, without
building any code, and each prints its fusion plan, its program (steps, argument table, where every table slot
points) and its kernel and graph cache keys: all must be equal."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r'''
import hashlib, importlib, importlib.util, os, sys
import numpy as np
import jitgrad
for name in ("", ".nn", ".nn.functional", ".optim", ".autograd", ".utils", ".utils.data"):
    sys.modules["torch" + name] = importlib.import_module("jitgrad" + name)
import torch
from jitgrad.jit.graph_code import compiled_graph
spec = importlib.util.spec_from_file_location("gpt_model", os.path.join(sys.argv[1], "benchmarks", "gpt_model.py"))
gpt_model = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpt_model)
B, T, C, H, L, V = 4, 32, 64, 4, 2, 65
torch.manual_seed(0)
model = gpt_model.make_gpt(torch, V, T, C, H, L, dropout=0.0, sdpa=False)
opt = gpt_model.make_optimizer(torch, model, lr=3e-4)
fn = gpt_model.make_step(torch, model, model, opt)
g = torch.Generator().manual_seed(1)
x, y = torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)
fn(x, y)                                   # eagerly: the optimiser's state exists before the trace
step = torch.compile(fn)
e = step._entry_for((x, y), {})
cg = compiled_graph(e.graph, e.gf.writes, None, False, True)     # laid out; no build (background, never started)
prog = cg.program
where = sorted([(s, "dyn", r.kind, r.index, off) for s, r, off in prog.dynamic]
               + [(s, "ws", r.kind, r.offset, off) for s, r, off in prog.ws_slots]
               + [(s, "lit", a.shape, str(a.dtype), off) for s, a, off in prog.lit_slots])
print("plan", hashlib.sha256(str(cg.plan).encode()).hexdigest())
print("steps", hashlib.sha256(repr([(st.kind, st.label, st.block) for st in prog.steps + prog.writes]).encode()).hexdigest())
print("table", hashlib.sha256(repr((prog.table, where, prog.ws_size)).encode()).hexdigest())
print("kernels", sorted(cg.code.kkeys.values()) if isinstance(cg.code.kkeys, dict) else sorted(cg.code.kkeys))
print("graph", cg.code.gkey, len(cg.kernels), len(prog.steps))
'''


@pytest.mark.parametrize("seeds", [("0", "4", "17")])
def test_compiled_step_is_the_same_in_every_process(tmp_path, seeds):
    outs = {}
    for seed in seeds:
        env = dict(os.environ, PYTHONHASHSEED=seed, JITGRAD_BACKGROUND_COMPILE="1", JITGRAD_CACHE_DIR=str(tmp_path),
                   OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
        r = subprocess.run([sys.executable, "-c", CHILD, ROOT], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        outs[seed] = [ln for ln in r.stdout.splitlines() if ln.split(" ", 1)[0] in
                      ("plan", "steps", "table", "kernels", "graph")]
        assert len(outs[seed]) == 5, r.stdout[-2000:]
    first = outs[seeds[0]]
    for seed in seeds[1:]:
        for a, b in zip(first, outs[seed]):
            assert a == b, f"PYTHONHASHSEED={seeds[0]} and {seed} differ in {a.split(' ', 1)[0]}"
