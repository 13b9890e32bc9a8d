"""B3's eager step (gradient penalty, ``grad(create_graph=True)`` then a backward through it) counted, never timed:
the Python and C calls of each phase of a warm step (``sys.setprofile``), and with ``--instructions`` the
instructions of one warm step by library (callgrind at one thread, instrumentation on for ``STEPS`` warm steps only,
OpenBLAS on its Haswell kernels: ``JITGRAD_BLAS_CORETYPE=keep``, which valgrind can run).

    python benchmarks/b3_counts.py [--instructions]

Eager kernels are built at their first call (``JITGRAD_EAGER_KERNELS=sync``), so the count is the steady state a
long run reaches (tanh_backward's kernel, not its NumPy fallback).  Valgrind counts ``rep stos``/``rep movs`` a byte
an instruction: memset (OpenBLAS clearing C for beta = 0) and memcpy are overcounts.
"""
from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
STEPS = 5
_LINE = re.compile(r"\s*([\d,]+) \([ \d.]+%\)\s+(\S.*?):(\S+)(?: \[(.*)\])?\s*$")


def _step():
    import jitgrad as jg
    import b3_double_backward as B
    x0, W10, b10, W20 = B.data(*B.SHAPE)
    x = jg.tensor(x0, requires_grad=True)
    W1, b1, W2 = (jg.tensor(a.copy(), requires_grad=True) for a in (W10, b10, W20))

    def step(mark=lambda name: None):
        d = jg.tanh(x @ W1 + b1) @ W2
        mark("forward")
        gx, = jg.autograd.grad(d.sum(), x, create_graph=True)
        mark("first backward (create_graph)")
        loss = d.mean() + 10 * ((gx.norm(dim=1) - 1) ** 2).mean()
        mark("loss")
        r = jg.autograd.grad(loss, [W1, b1, W2])
        mark("second backward")
        return r
    return step


def calls():
    """Python and C calls of each phase of one warm step."""
    step = _step()
    for _ in range(3):
        step()
    c = {"call": 0, "c_call": 0}
    rows = []

    def prof(frame, event, arg):
        if event in c:
            c[event] += 1

    def mark(name):
        rows.append((name, c["call"], c["c_call"]))
    gc.collect()
    gc.disable()
    rows.append(("", 0, 0))
    sys.setprofile(prof)
    step(mark)
    sys.setprofile(None)
    print("| phase | Python calls | C calls |\n| --- | --- | --- |")
    for (_, p0, c0), (name, p1, c1) in zip(rows, rows[1:]):
        print(f"| {name} | {p1 - p0 - 1} | {c1 - c0} |")     # (less the mark's own call)
    print(f"| step | {rows[-1][1] - len(rows) + 1} | {rows[-1][2]} |")


def under_callgrind():
    step = _step()
    for _ in range(5):
        step()
    pid = str(os.getpid())
    subprocess.run(["callgrind_control", "-i", "on", pid], check=True, capture_output=True)
    for _ in range(STEPS):
        step()
    subprocess.run(["callgrind_control", "-i", "off", pid], check=True, capture_output=True)


def instructions():
    """Instructions of one warm step by library (BLAS, Python, NumPy's loops, libc)."""
    out = tempfile.mkdtemp(prefix="b3-counts-")
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               JITGRAD_BLAS_CORETYPE=os.environ.get("JITGRAD_BLAS_CORETYPE", "keep"), JITGRAD_EAGER_KERNELS="sync")
    dump = os.path.join(out, "callgrind.out")
    subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={dump}",
                    sys.executable, os.path.abspath(__file__), "--under-callgrind"], env=env, check=True,
                   capture_output=True, timeout=1800)
    text = subprocess.run(["callgrind_annotate", "--threshold=100", dump], capture_output=True, text=True,
                          check=True).stdout
    parts = {}
    for line in text.splitlines():
        g = _LINE.match(line)
        if not g or "PROGRAM TOTALS" in line:
            continue
        n, fn, obj = int(g.group(1).replace(",", "")) / STEPS, g.group(3), g.group(4) or g.group(2)
        if "openblas" in obj:
            k = "OpenBLAS"
        elif "libpython" in obj or "Python-3" in g.group(2):
            k = "Python"
        elif "_multiarray_umath" in obj:
            k = "NumPy " + (fn if re.match(r"(FLOAT|DOUBLE)_|PyArray_Where", fn) else "(other)")
        elif "libc.so" in obj:
            k = "libc " + (fn.split("_")[2] if fn.startswith("__mem") else "(other)")
        else:
            k = "other"
        parts[k] = parts.get(k, 0) + n
    total = sum(parts.values())
    print(f"# B3 eager step, instructions of one warm step (callgrind, 1 thread, {STEPS} steps): {total:,.0f}")
    print("| part | instructions a step |\n| --- | --- |")
    for k, v in sorted(parts.items(), key=lambda kv: -kv[1]):
        if v >= 10000:
            print(f"| {k} | {v:,.0f} |")


if __name__ == "__main__":
    if "--under-callgrind" in sys.argv:
        under_callgrind()
    elif "--instructions" in sys.argv:
        instructions()
    else:
        os.environ.setdefault("JITGRAD_EAGER_KERNELS", "sync")
        calls()
