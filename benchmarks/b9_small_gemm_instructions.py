"""Instructions of B9's compiled step at one thread in jitgrad's own small-product kernels (attention's per-head
products, ``codegen/kernels/small_gemm.py``: the whole kernel and its causal variants), counted by callgrind over
a few warm steps; the step's whole count and OpenBLAS's beside them (OpenBLAS's count is valgrind's Haswell
kernels', not this host's: read it as context only).  Counted, never timed.

    JITGRAD_CAUSAL=0 python benchmarks/b9_small_gemm_instructions.py     # every product whole (before)
    python benchmarks/b9_small_gemm_instructions.py                      # the causal variants (after)

The script runs itself under ``valgrind --tool=callgrind --instr-atstart=no`` (instrumentation on for ``STEPS``
warm steps only) and sums the exclusive instructions of the functions at the kernels' addresses.  Build the cache
first (a plain run of B9 with the same environment): under valgrind a kernel build takes minutes.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 4
_LINE = re.compile(r"\s*([\d,]+)\s+\([^)]*\)\s+(.*?):(\S+)(?:\s+\[(.*)\])?\s*$")


def counted_steps(out_dir):
    """Under callgrind: B9 built and warmed, the kernels' addresses into ``out_dir/map.json``, then ``STEPS``
    instrumented steps, dumped as one part."""
    sys.path.insert(0, HERE)
    import jitgrad
    import gpt_model
    from jitgrad.codegen.kernels import small_gemm
    step, x, y, _ = gpt_model.warm_b9(jitgrad)
    launches = [x for x in step.launches(x, y) if x.kind in ("gemm", "bgemm")]
    with open(os.path.join(out_dir, "map.json"), "w") as f:
        json.dump({"pid": os.getpid(), "small": {k: int(v) for k, v in small_gemm._ADDRESSES.items()},
                   "small_macs": sum(x.work for x in launches if x.routine.startswith("small_"))}, f)

    def ctl(*a):
        subprocess.run(["callgrind_control", *a, str(os.getpid())], check=True, capture_output=True)
    ctl("-z")
    ctl("-i", "on")
    for _ in range(STEPS):
        step(x, y)
    ctl("-i", "off")
    ctl("-d", "steps")


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--under-callgrind":
        counted_steps(sys.argv[2])
        return
    out = tempfile.mkdtemp(prefix="b9-small-gemm-")
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               JITGRAD_BLAS_CORETYPE="keep", JITGRAD_BUILD_FORKS="0", JITGRAD_BACKGROUND_COMPILE="0")
    subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                    f"--callgrind-out-file={out}/callgrind.out.%p", sys.executable, __file__, "--under-callgrind",
                    out], env=env, check=True, capture_output=True, stdin=subprocess.DEVNULL, timeout=3600)
    with open(os.path.join(out, "map.json")) as f:
        m = json.load(f)
    text = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100",
                           f"{out}/callgrind.out.{m['pid']}.1"], capture_output=True, text=True, check=True).stdout
    kernel_of = {a: name for name, a in m["small"].items()}
    total, blas, by = 0.0, 0.0, {}
    for line in text.splitlines():
        if "PROGRAM TOTALS" in line:
            total = int(line.split()[0].replace(",", "")) / STEPS
        g = _LINE.match(line)
        if not g:
            continue
        n, fn, obj = int(g.group(1).replace(",", "")) / STEPS, g.group(3).split("'")[0], g.group(4) or ""
        if "openblas" in obj:
            blas += n
        elif fn.startswith("0x") and int(fn, 16) in kernel_of:
            name = kernel_of[int(fn, 16)]
            by[name] = by.get(name, 0.0) + n
    print(f"# B9 compiled step at one thread, instructions a step (callgrind, {STEPS} steps); "
          f"JITGRAD_CAUSAL={os.environ.get('JITGRAD_CAUSAL', '1')}")
    for name, n in sorted(by.items()):
        print(f"small kernel {name:16s} {n:14,.0f}")
    print(f"small kernels, all     {sum(by.values()):14,.0f}  ({m['small_macs']:,.0f} multiply-adds a step)")
    print(f"OpenBLAS (valgrind's)  {blas:14,.0f}")
    print(f"whole step             {total:14,.0f}")


if __name__ == "__main__":
    main()
