"""B9's compiled step launch by launch at one thread: each kernel, GEMM and batch of small products timed where it
runs in a warm step ("in step": its operands as cold as the step leaves them), then called three times in a row
and the third call timed ("hot": its operands in cache, as ``gemm_ceiling.py`` times the GEMM floor), medians over
the steps; and which launches raise the floating-point underflow flag (a product rounded to a subnormal or to
zero: on x86 a microcode assist per lane, ~100 cycles; B9's causal softmax went through one per masked element).

The step runs through a replica of the program's Python driver (``cpu.CompiledGraph._execute``) that calls the
same addresses, so the launches are the native entry's; the hot pass overwrites the state (run it last).  Time it
on a quiet machine (the in-step/hot ratio of one launch is robust to a steady load, absolute figures are not):

    OPENBLAS_NUM_THREADS=1 NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1 python benchmarks/b9_launch_times.py [--steps 20]
"""
import argparse
import ctypes
import ctypes.util
import os
import platform
import re
import sys
import time
from collections import OrderedDict

for _k in ("OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_k, "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=20, help="warm steps timed in step (then a third as many hot)")
ap.add_argument("--top", type=int, default=30)
ap.add_argument("--every", action="store_true", help="one line per launch, not per label")
args = ap.parse_args()

import numpy as np  # noqa: E402
import jitgrad  # noqa: E402
import gpt_model  # noqa: E402
from jitgrad.codegen.kernels.abi import call_gemm_batched  # noqa: E402
from jitgrad.codegen.program import cpu  # noqa: E402
from jitgrad.codegen.program.output_pool import take  # noqa: E402

step, x, y, cg = gpt_model.warm_b9(jitgrad)
prog = cg.program
launches = prog.steps + prog.writes
_LIBM = ctypes.CDLL(ctypes.util.find_library("m")) if platform.machine() in ("x86_64", "AMD64") else None
FE_UNDERFLOW, FE_ALL = 0x10, 0x3D            # x86-64 <fenv.h>
in_step, hot = [[] for _ in launches], [[] for _ in launches]
underflow = [False] * len(launches)
mode = ["in step"]
clock = time.perf_counter_ns


def run(*arrays):
    """The driver's loop over the program's launches, each timed (``mode``: in step, or the third of three)."""
    A, F, OFF = cg.A, cg.F, cg.OFF
    arrays = [np.ascontiguousarray(a) for a in arrays]
    fresh = [take(r.shape, r.dtype.np) for r in prog.fresh]
    cg._ierr[0] = 0
    for slot, r, _ in prog.dynamic:
        A[slot] = (arrays[r.index] if r.kind == "input" else fresh[r.index]).ctypes.data + OFF[slot]
    a_addr = A.ctypes.data
    for n, st in enumerate(launches):
        if st.kind in ("kernel", "native"):
            f, a = cpu._KERNEL_CALL(int(F[n])), (a_addr + 8 * st.block,)
        elif st.kind == "gemm":
            f, a = cpu._GEMM_CALL(int(F[n])), [int(v) for v in A[st.block:st.block + 13]]
        elif st.kind == "bgemm":
            f, a = (lambda addr, fn=int(F[n]): call_gemm_batched(fn, addr)), (a_addr + 8 * st.block,)
        else:
            raise RuntimeError(f"launch {n}: a {st.kind} step has no native form here")
        if mode[0] == "hot":
            f(*a)
            f(*a)
        if _LIBM is not None:
            _LIBM.feclearexcept(FE_ALL)
        t0 = clock()
        f(*a)
        t1 = clock()
        if _LIBM is not None and _LIBM.fetestexcept(FE_UNDERFLOW):
            underflow[n] = True
        (hot if mode[0] == "hot" else in_step)[n].append(t1 - t0)
    return [arrays[i] if kind == "input" else fresh[i] for kind, i in prog.outputs]


cg.run = run
load = os.getloadavg()
for _ in range(args.steps):
    step(x, y)
mode[0] = "hot"
for _ in range(max(3, args.steps // 3)):
    step(x, y)


def family(n, st):
    if st.kind == "gemm":
        blk = [int(v) for v in cg.A[st.block:st.block + 13]]
        i32 = [ctypes.cast(blk[k], ctypes.POINTER(ctypes.c_int))[0] for k in (2, 3, 4)]
        beta = ctypes.cast(blk[10], ctypes.POINTER(ctypes.c_float))[0]
        flags = ctypes.string_at(blk[0], 1).decode() + ctypes.string_at(blk[1], 1).decode()
        return f"gemm {flags} {i32[0]}x{i32[1]}x{i32[2]} beta {beta:g}"
    label = re.sub(r"fused_\d+", "loop", st.label.split(" gpt_model")[0])     # one label per body, every layer
    return f"{st.kind} {label[:60]} {[list(s) for s in (st.shapes or [])[:2]]}"[:100]


rows = OrderedDict()
for n, st in enumerate(launches):
    key = f"{n:3d} {family(n, st)}" if args.every else family(n, st)
    r = rows.setdefault(key, [0, 0.0, 0.0, False, st.kind])
    r[0] += 1
    r[1] += float(np.median(in_step[n]))
    r[2] += float(np.median(hot[n]))
    r[3] |= underflow[n]
total = sum(r[1] for r in rows.values())
print(f"B9 at one thread, {len(launches)} launches, medians of {args.steps} warm steps (load {load[0]:.2f}): "
      f"in step {total / 1e6:.2f} ms, hot {sum(r[2] for r in rows.values()) / 1e6:.2f} ms")
print(f"{'count':>5s} {'in step us':>10s} {'hot us':>8s} {'ratio':>5s} {'share':>6s}  launch")
for key, (cnt, s, h, uf, _) in sorted(rows.items(), key=lambda kv: -kv[1][1])[:args.top]:
    print(f"{cnt:5d} {s / 1e3:10.1f} {h / 1e3:8.1f} {s / max(h, 1):5.2f} {100 * s / total:5.1f}%  {key}"
          + ("  [underflow]" if uf else ""))
for kind in ("gemm", "bgemm", "kernel"):
    s = sum(r[1] for r in rows.values() if r[4] == kind)
    h = sum(r[2] for r in rows.values() if r[4] == kind)
    print(f"{kind:>6s}: in step {s / 1e6:6.2f} ms, hot {h / 1e6:6.2f} ms")
print("launches raising the underflow flag:", sum(underflow) if _LIBM is not None else "not checked (not x86)")
