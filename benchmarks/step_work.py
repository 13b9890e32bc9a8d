"""B11's compiled training step by its launch records and by its instructions: what runs on the pool, what stays
serial, and how much work each part is (``scaling_model.py --work b11 [--launches] [--instructions]``).

Counted, never timed.  Work is the plan's cost unit (``f.launches``: a loop's elements x per-element cost, a
GEMM's multiply-adds); the instructions are callgrind's at one thread (``--instructions``: the script runs itself
under ``valgrind --tool=callgrind``, instrumentation on for ``STEPS`` warm steps only), split per launch by the
kernel addresses the compiled call's table holds (a kernel shared by several launches is counted once, at its
first).  Where each launch runs is its record's at two threads (``CompiledGraph.launches(workers=2)``): a
launch on the pool at two threads runs the same chunks on the calling thread at one.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 10


def b11_step():
    """B11's whole step compiled (built before the first call) and warmed: ``(call, fn, args)``."""
    import jitgrad as jg
    import force_field as W
    call, fn, args, _ = W.torch_style(jg, "compiled",
                                      compile_=lambda f: jg.compile(f, backend="numba", background=False))
    for _ in range(3):
        call()
    return call, fn, args


def launches_at_two(fn, args) -> list:
    """The launch records of compiled ``fn``'s call with ``args`` as a pool of two threads would run them (the
    same program at any thread count: its loops decide per call)."""
    from jitgrad.jit.graph_code import compiled_graph
    e = fn._entry_for(args, {})
    return compiled_graph(e.graph, e.gf.writes, e.gf.parallel, e.gf.disk_cache, e.gf.background).launches(workers=2)


def where(launch) -> str:
    if launch.parallel:
        return "pool"
    return "BLAS threads" if launch.threads > 1 else "serial"


def b11_work(every=False):
    """The launch records of B11's compiled step: per (where, kind) the launches and their work, the pool rounds
    of one step, the serial part's share of the work and the speedup that share predicts at 2 threads."""
    from jitgrad.codegen.native import workpool
    call, fn, args = b11_step()
    r0, j0 = workpool.rounds(), workpool.joined()
    call()
    launches = launches_at_two(fn, args)
    pooled, joined = sum(bool(l.parallel) for l in launches), sum(bool(l.joined) for l in launches)
    print(f"# B11 compiled step: {len(launches)} launches, pool rounds of one step {workpool.rounds() - r0} "
          f"(and {workpool.joined() - j0} launches in another's round; {workpool.threads()} workers); records at 2 "
          f"threads: {pooled} pooled launches, {joined} joined, {pooled - joined} rounds; thresholds: work "
          f"{workpool.min_work()}, grain {workpool.grain()}")
    if every:
        for i, l in enumerate(launches):
            print(f"{i:4d} {l.kind:7s} {where(l) + (' +' if l.joined else ''):12s} {l.work:11.0f} {l.elements:7d} "
                  f"{l.routine:11s} {l.label[:90]}")
    parts = {}
    for l in launches:
        kind = "GEMM" if l.kind in ("gemm", "bgemm") else "loop"
        n, w = parts.get((where(l), kind), (0, 0.0))
        parts[(where(l), kind)] = (n + 1, w + l.work)
    total = sum(w for _, w in parts.values()) or 1.0
    print("| where (at 2 threads) | kind | launches | work (2^20 units) | share |\n| --- | --- | --- | --- | --- |")
    for (w_, kind), (n, w) in sorted(parts.items()):
        print(f"| {w_} | {kind} | {n} | {w / 2 ** 20:.2f} | {w / total:.1%} |")
    par = sum(w for (w_, _), (n, w) in parts.items() if w_ != "serial") / total
    print(f"parallel fraction of the work (pool and BLAS threads): {par:.1%}; serial {1 - par:.1%}; Amdahl at 2 "
          f"threads: {1 / (1 - par / 2):.2f}x")


def counted_steps(out_dir):
    """Under callgrind: the kernel address of every launch into ``out_dir/map.json``, then ``STEPS`` steps with
    instrumentation on, dumped as one part."""
    from jitgrad.jit.graph_code import compiled_graph
    call, fn, args = b11_step()
    e = fn._entry_for(args, {})
    cg = compiled_graph(e.graph, e.gf.writes, e.gf.parallel, e.gf.disk_cache, e.gf.background)
    launches = launches_at_two(fn, args)
    with open(os.path.join(out_dir, "map.json"), "w") as f:
        json.dump({"pid": os.getpid(), "addresses": [int(a) for a in cg.F],
                   "launches": [[l.kind, where(l), l.work, l.label] for l in launches]}, f)

    def ctl(*a):
        subprocess.run(["callgrind_control", *a, str(os.getpid())], check=True, capture_output=True)
    ctl("-z")
    ctl("-i", "on")
    for _ in range(STEPS):
        call()
    ctl("-i", "off")
    ctl("-d", "steps")


_LINE = re.compile(r"\s*([\d,]+)\s+\([^)]*\)\s+(.*?):(\S+)(?:\s+\[(.*)\])?\s*$")


def instructions(script):
    """Run ``script --work b11 --under-callgrind`` under callgrind at one thread and print the instructions of one
    step per launch and per part: loops and jitgrad's small GEMM kernel, by where they run at two threads;
    OpenBLAS's code (its launches' records say where); the rest (Python, the entry).  A kernel's count holds
    the memset that clears its sums, which valgrind counts a byte an instruction (``rep stos``): an overcount."""
    out = tempfile.mkdtemp(prefix="step-work-")
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               JITGRAD_BLAS_CORETYPE=os.environ.get("JITGRAD_BLAS_CORETYPE", "keep"), JITGRAD_BUILD_FORKS="0",
               JITGRAD_BACKGROUND_COMPILE="0")
    subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                    f"--callgrind-out-file={out}/callgrind.out.%p", sys.executable, script, "--work", "b11",
                    "--under-callgrind", out], env=env, check=True, capture_output=True, timeout=1800)
    with open(os.path.join(out, "map.json")) as f:
        m = json.load(f)
    dump = f"{out}/callgrind.out.{m['pid']}.1"
    total, blas_n, by_address = 0, 0, {}
    # exclusive: the whole and OpenBLAS's code; inclusive: each kernel with the chunk functions it calls (a
    # parallel kernel's loop body is one) and the memset that clears its sums
    for inclusive in ("no", "yes"):
        text = subprocess.run(["callgrind_annotate", f"--inclusive={inclusive}", "--threshold=100", dump],
                              capture_output=True, text=True, check=True).stdout
        for line in text.splitlines():
            if "PROGRAM TOTALS" in line:
                total = int(line.split()[0].replace(",", "")) / STEPS
            g = _LINE.match(line)
            if not g:
                continue
            n, fn_name, obj = int(g.group(1).replace(",", "")) / STEPS, g.group(3).split("'")[0], g.group(4) or ""
            if inclusive == "no" and "openblas" in obj:
                blas_n += n
            elif inclusive == "yes" and fn_name.startswith("0x") and int(fn_name, 16) in m["addresses"]:
                a = int(fn_name, 16)        # ('2: a recursion level, already in the outer level's count)
                by_address[a] = max(by_address.get(a, 0), n)
    parts = {"BLAS (OpenBLAS)": blas_n}
    seen = set()
    print(f"# B11 compiled step, instructions of one step (callgrind, 1 thread, {STEPS} steps)")
    for i, (a, (kind, w_, work, label)) in enumerate(zip(m["addresses"], m["launches"])):
        n = by_address.get(a, 0) if a not in seen else 0
        seen.add(a)
        part = f"{'GEMMs' if kind in ('gemm', 'bgemm') else 'loops'}, {'pooled' if w_ == 'pool' else 'serial'}"
        parts[part] = parts.get(part, 0) + n
        note = "" if n else " (BLAS)" if "BLAS" in label else " (shared)" if a else ""
        print(f"{i:4d} {kind:7s} {w_:12s} {work:11.0f} {n:11.0f}{note:9s} {label[:80]}")
    parts["other (Python, the entry, runtime)"] = total - sum(parts.values())
    total = total or 1
    print("| part | instructions a step | share |\n| --- | --- | --- |")
    for k, v in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"| {k} | {v:,.0f} | {v / total:.1%} |")
    print(f"| total | {total:,.0f} | |")


def per_thread(script):
    """Run the same steps under callgrind at two threads, each thread counted apart (the pool's workers sleep at
    once, ``JITGRAD_POOL_SPIN=0``: a spin is instructions, not work) and print the instructions of one step per
    thread: the calling thread's and each worker's."""
    import glob
    out = tempfile.mkdtemp(prefix="step-work-")
    env = dict(os.environ, NUMBA_NUM_THREADS="2", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               JITGRAD_POOL_SPIN="0", JITGRAD_POOL_PACER="0",
               JITGRAD_BLAS_CORETYPE=os.environ.get("JITGRAD_BLAS_CORETYPE", "keep"), JITGRAD_BUILD_FORKS="0",
               JITGRAD_BACKGROUND_COMPILE="0")
    subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes",
                    f"--callgrind-out-file={out}/callgrind.out.%p", sys.executable, script, "--work", "b11",
                    "--under-callgrind", out], env=env, check=True, capture_output=True, timeout=1800)
    with open(os.path.join(out, "map.json")) as f:
        pid = json.load(f)["pid"]
    counts = {}
    for path in sorted(glob.glob(f"{out}/callgrind.out.{pid}.1-*")):
        with open(path) as f:
            n = max((int(x.split()[1]) for x in f if x.startswith(("summary:", "totals:"))), default=0)
        if n:
            counts[path.rsplit("-", 1)[1]] = n / STEPS
    print(f"# B11 compiled step at 2 threads, instructions of one step per thread (callgrind, {STEPS} steps)")
    for t, n in counts.items():
        print(f"thread {t}: {n:,.0f}")
    if len(counts) > 1:
        first, *rest = counts.values()
        print(f"the calling thread {first:,.0f}, the workers {sum(rest):,.0f}: "
              f"{sum(rest) / (first + sum(rest)):.1%} of the step's instructions off the calling thread")
