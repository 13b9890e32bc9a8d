"""Where a compiled B2 call's time goes: counts from the machine code and the driver, and min-of-N timings.

    python benchmarks/b2_breakdown.py

B2: N = 4,000,000 float32, ``sum(tanh(x*w+b)*sigmoid(x))`` and the gradients of w and b.  Printed, each part in
its own fresh process where the thread count matters (``NUMBA_NUM_THREADS``):

- counts: kernels and driver steps per call, bytes moved per element, instructions (and divisions) per element
  in the kernel's main vector loop, minor page faults per steady-state call;
- the kernel's arithmetic: its serial build over 16K elements (in cache), ns per element, on one thread;
- the kernel alone over 4M elements (its serial and its parallel build) on 1 and 2 threads;
- a parallel launch: the parallel kernel over 64 elements (thread wake-up and partitioning, no work);
- the driver: a whole compiled call over 1,000 elements (guards, pooled outputs, the C entry);
- the whole compiled call over 4M elements on 1 and 2 threads, and the preallocated-output floor (a Numba loop
  reading x, w, b and writing two preallocated arrays) on 1 and 2 threads.

Timings are the minimum of N (what the code costs when nothing interferes) with the median beside it; outputs
are checked in every process.  The 1-minute load average is printed: on a shared machine only the minima and
the counts mean much.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

_CHILD = r'''
import ctypes, json, os, re, resource, sys, time
import numpy as np
os.environ["JITGRAD_BACKGROUND_COMPILE"] = "0"
import jitgrad as jg
from jitgrad.jit.graph_code import compiled_graph
from b2_workload import N, floor_kernel, inputs, matches, reference, step
what = sys.argv[1]
b2 = step(jg)

def compiled(n):
    x, w, b = inputs(n)
    args = (jg.tensor(x), jg.tensor(w, requires_grad=True), jg.tensor(b, requires_grad=True))
    f = jg.compile(b2, backend="numba")
    r = f(*args)
    good = matches((float(r[0]), r[1].numpy(), r[2].numpy()), reference(x, w, b))
    del r
    (entries,) = f._cache.values()
    return f, args, compiled_graph(entries[0].graph, entries[0].gf.writes), good

def timings(fn, reps):
    fn(); fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return float(min(ts) * 1e3), float(np.median(ts) * 1e3)

def kernel_alone(kernel, n, reps):
    ns = {"CACHE_ENABLED": False}
    exec(compile(kernel.source, "<k>", "exec"), ns)
    fn = ns["kernel"].ctypes
    x, w, b = inputs(n)
    o1, o2, loss = np.empty(n, np.float32), np.empty(n, np.float32), np.zeros(1, np.float32)
    blk = [n]
    for a in (x, w, b, o1, o2, loss):
        blk += [a.ctypes.data, 1]
    A = np.array(blk + [0] * 8, np.int64)
    arg = A.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
    fn(arg)
    good = matches((float(loss[0]), o2, o1), reference(x, w, b))
    mn, md = timings(lambda: fn(arg), reps)
    return {"min_ms": mn, "median_ms": md, "ns_per_element": mn * 1e6 / n, "ok": good}

out = {"load": os.getloadavg()[0], "threads": int(os.environ.get("NUMBA_NUM_THREADS", "0"))}
if what == "counts":
    from jitgrad.codegen import output_pool
    f, args, cg, good = compiled(1 << 18)
    (k,) = cg.kernels
    ns = {"CACHE_ENABLED": False}
    exec(compile(k.source, "<k>", "exec"), ns)
    asm = ns["kernel"]._library.get_asm_str()
    lines = asm.splitlines()
    labels = {m.group(1): i for i, ln in enumerate(lines) for m in [re.match(r"^(\.L\w+):", ln)] if m}
    loops = []
    for i, ln in enumerate(lines):
        m = re.match(r"^\s+j\w+\s+(\.L\w+)\s*$", ln)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            loops.append(lines[labels[m.group(1)] + 1:i + 1])
    vec = max(loops, key=lambda b: sum("zmm" in l or "ymm" in l for l in b))
    adds = [int(m.group(1)) for l in vec for m in [re.match(r"^\s+addq\s+\$(\d+),", l)] if m]
    per = adds[0] if adds else 1
    instrs = [l for l in vec if l.strip() and not l.strip().startswith(".")]
    for _ in range(3):
        f(*args)
    faults = []
    for _ in range(5):
        m0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        f(*args)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - m0)
    out.update(kernels=len(cg.kernels), driver_steps=len(cg.program.steps) + len(cg.program.writes),
               operands=len(k.operands), bytes_per_element=sum(v.aval.dtype.np.itemsize for v in k.operands
                                                              if v.aval.ndim),
               vector_loop_elements_per_iteration=per, vector_loop_instructions=len(instrs),
               instructions_per_element=round(len(instrs) / per, 2),
               divisions_per_element=round(sum("vdivps" in l for l in vec) * (16 if "zmm" in "".join(vec) else 8)
                                           / per, 2),
               min_page_faults_per_call=min(faults), parallel=k.parallel, ok=good,
               pool=dict(output_pool.STATS))
elif what == "kernel":
    f, args, cg, good = compiled(N)            # parallel build (N >= loops.PARALLEL_MIN)
    (kp,) = cg.kernels
    f2, args2, cg2, _ = compiled(4096)          # serial build of the same loop
    (ks,) = cg2.kernels
    out["serial_in_cache"] = kernel_alone(ks, 1 << 14, 3000)
    out["serial_4M"] = kernel_alone(ks, N, 30)
    out["parallel_4M"] = kernel_alone(kp, N, 30)
    out["parallel_launch_64"] = kernel_alone(kp, 64, 2000)
elif what == "call":
    f, args, cg, good = compiled(1000)
    mn, md = timings(lambda: f(*args), 3000)
    out["call_1000"] = {"min_ms": mn, "median_ms": md, "ok": good}
    f, args, cg, good = compiled(N)
    mn, md = timings(lambda: f(*args), 40)
    out["call_4M"] = {"min_ms": mn, "median_ms": md, "ok": good}
elif what == "floor":
    k = floor_kernel()
    x, w, b = inputs(N)
    o1, o2 = np.empty_like(x), np.empty_like(x)
    k(x, w, b, o1, o2)
    mn, md = timings(lambda: k(x, w, b, o1, o2), 100)
    out["floor_4M"] = {"min_ms": mn, "median_ms": md, "ok": bool(np.array_equal(o1, x + w))}
print("RESULT " + json.dumps(out))
'''


def child(what, threads):
    # the repository (jitgrad) and this folder (the workload: b2_workload.py)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE, os.environ.get("PYTHONPATH", "")]),
               NUMBA_NUM_THREADS=str(threads))
    r = subprocess.run([sys.executable, "-c", _CHILD, what], env=env, capture_output=True, text=True, timeout=1800)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": (r.stderr or r.stdout)[-800:]}


def main():
    print("counts:", child("counts", 2), flush=True)
    for t in (1, 2):
        for what in ("kernel", "call", "floor"):
            print(f"{what}, {t} thread(s):", child(what, t), flush=True)


if __name__ == "__main__":
    main()
