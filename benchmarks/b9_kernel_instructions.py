"""Instructions of B9's compiled step at one thread per kernel label (callgrind, a few warm steps): every loop and
row kernel and jitgrad's small-product kernels, each counted inclusively at its address (a kernel shared by
several launches once, at its first), OpenBLAS's own code and the whole step beside them.  Counted, never timed;
valgrind runs 256-bit code (its CPU has no AVX-512), so read a kernel's count as its work, not its time here.

    python benchmarks/b9_kernel_instructions.py [--steps 4]

The script runs itself under ``valgrind --tool=callgrind --instr-atstart=no`` (instrumentation on for the warm
steps only); under valgrind B9's build takes ~10 minutes.  ``JITGRAD_CAUSAL=0``: every product and row whole.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
_LINE = re.compile(r"\s*([\d,]+)\s+\([^)]*\)\s+(.*?):(\S+)(?:\s+\[(.*)\])?\s*$")


def counted_steps(out_dir, steps):
    """Under callgrind: B9 built and warmed, each launch's kernel address into ``out_dir/map.json``, then ``steps``
    instrumented steps, dumped as one part."""
    sys.path.insert(0, HERE)
    import jitgrad
    import gpt_model
    step, x, y, cg = gpt_model.warm_b9(jitgrad)
    with open(os.path.join(out_dir, "map.json"), "w") as f:
        json.dump({"pid": os.getpid(), "addresses": [int(a) for a in cg.F],
                   "launches": [[x.kind, x.routine, x.label] for x in step.launches(x, y)]}, f)

    def ctl(*a):
        subprocess.run(["callgrind_control", *a, str(os.getpid())], check=True, capture_output=True)
    ctl("-z")
    ctl("-i", "on")
    for _ in range(steps):
        step(x, y)
    ctl("-i", "off")
    ctl("-d", "steps")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--under-callgrind", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.under_callgrind:
        counted_steps(args.under_callgrind, args.steps)
        return
    out = tempfile.mkdtemp(prefix="b9-kernels-")
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               JITGRAD_BLAS_CORETYPE="keep", JITGRAD_BUILD_FORKS="0", JITGRAD_BACKGROUND_COMPILE="0")
    subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                    f"--callgrind-out-file={out}/callgrind.out.%p", sys.executable, __file__, "--steps",
                    str(args.steps), "--under-callgrind", out], env=env, check=True, capture_output=True,
                   stdin=subprocess.DEVNULL, timeout=3600)
    with open(os.path.join(out, "map.json")) as f:
        m = json.load(f)
    dump = f"{out}/callgrind.out.{m['pid']}.1"
    total, blas, at = 0.0, 0.0, {}
    for inclusive in ("no", "yes"):     # exclusive: the whole and OpenBLAS's code; inclusive: each kernel
        text = subprocess.run(["callgrind_annotate", f"--inclusive={inclusive}", "--threshold=100", dump],
                              capture_output=True, text=True, check=True).stdout
        for line in text.splitlines():
            if "PROGRAM TOTALS" in line:
                total = int(line.split()[0].replace(",", "")) / args.steps
            g = _LINE.match(line)
            if not g:
                continue
            n, fn, obj = int(g.group(1).replace(",", "")) / args.steps, g.group(3).split("'")[0], g.group(4) or ""
            if inclusive == "no" and "openblas" in obj:
                blas += n
            elif inclusive == "yes" and fn.startswith("0x") and int(fn, 16) in m["addresses"]:
                a = int(fn, 16)         # ('2: a recursion level, already in the outer level's count)
                at[a] = max(at.get(a, 0), n)
    seen, by = set(), {}
    for a, (kind, routine, label) in zip(m["addresses"], m["launches"]):
        n = at.get(a, 0) if a not in seen else 0
        seen.add(a)
        key = re.sub(r"fused_\d+", "loop", label.split(" gpt_model")[0])[:80] + (f" {routine}" if routine else "")
        c, s = by.get(key, (0, 0.0))
        by[key] = (c + 1, s + n)
    print(f"# B9 compiled step at one thread, instructions a step (callgrind, {args.steps} steps); "
          f"JITGRAD_CAUSAL={os.environ.get('JITGRAD_CAUSAL', '1')}")
    for key, (c, s) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        if s:
            print(f"{s:14,.0f}  x{c:<3d} {key}")
    print(f"{sum(s for _, s in by.values()):14,.0f}  kernels, all\n{blas:14,.0f}  OpenBLAS (valgrind's Haswell code)\n"
          f"{total:14,.0f}  whole step")


if __name__ == "__main__":
    main()
