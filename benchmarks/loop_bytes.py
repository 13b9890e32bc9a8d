"""B9's compiled step counted in bytes, not timed: per loop kernel of the program (fused loops, row kernels, copies
and region writes), the distinct elements each operand spans (its strides over the kernel's iteration sizes, from
the program's argument table) times their item size, summed by label.  No caching is modelled: a value a kernel
writes and the next reads counts twice.  GEMMs (their operands are the same in every plan) and loop batches (the
optimiser's update) are left out.  Also counted: the bytes written to a buffer that is not one the same launch
reads (not over a dying input, ``codegen/input_reuse.py``), each line of which the CPU reads before writing it
when it is not in cache (write-allocate).

    python benchmarks/loop_bytes.py [--top 25]
"""
import argparse
import math
import os
import re
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ap = argparse.ArgumentParser()
ap.add_argument("--top", type=int, default=25)
args = ap.parse_args()

import jitgrad  # noqa: E402
import gpt_model  # noqa: E402
from jitgrad.ir.graph import Var  # noqa: E402
from jitgrad.jit.graph_code import compiled_graph  # noqa: E402

step, x, y = gpt_model.compiled_b9(jitgrad)
e = [e for es in step._cache.values() for e in es][0]
prog = compiled_graph(e.graph, e.gf.writes, e.gf.parallel).program
total, count = defaultdict(float), defaultdict(int)
where = {slot: (id(r), off) for lst in (prog.dynamic, prog.ws_slots) for slot, r, off in lst}
fresh_lines = 0.0
for st in prog.steps + prog.writes:
    k = st.kernel
    if st.kind != "kernel" or k is None or k.kind not in ("fused", "rows", "copy"):
        continue
    r = k.rank
    t = prog.table[st.block:]
    sizes = [int(v) for v in t[:r]]
    nbytes = 0
    n_in = len(st.shapes)                 # the step's operands: its inputs' places first, then its outputs
    read_at = [where.get(st.block + r + i * (r + 1)) for i in range(n_in)]
    for i in range(len(k.classes)):       # each operand: its address, then its strides over the sizes
        strides = [int(v) for v in t[r + i * (r + 1) + 1:r + (i + 1) * (r + 1)]]
        op = k.operands[i] if i < len(k.operands) else None
        item = op.aval.dtype.np.itemsize if isinstance(op, Var) else 4
        b = math.prod(d for d, s in zip(sizes, strides) if s) * item
        nbytes += b
        at = where.get(st.block + r + i * (r + 1))
        if i >= n_in and (at is None or at not in read_at):
            fresh_lines += b
    label = re.sub(r"^fused_\d+", "loop", st.label.split(" gpt_model")[0])[:70]     # one label per body
    total[label] += nbytes
    count[label] += 1
print(f"B9 loop kernels: {sum(total.values()) / 2**20:.2f} MiB a step, {len(prog.steps) + len(prog.writes)} launches; "
      f"{fresh_lines / 2**20:.2f} MiB of it written into buffers the launch does not read")
for label, b in sorted(total.items(), key=lambda kv: -kv[1])[:args.top]:
    print(f"  {b / 2**20:8.2f} MiB  x{count[label]:<3d} {label}")
