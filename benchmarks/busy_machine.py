"""Issue 16 deliver 5: compiled B1 and B2 on a quiet machine, then with one core taken by a spinning process;
eager B1 and B5 (``b1e``, ``b5e``: issue 28's eager thread policy) the same way; compiled B9 and B11 (``b9``,
``b11``: issue 32).  Each child also counts, per timed step, the pool rounds, the launches that shared another's
round and the launches the pool's busy rule kept on the calling thread (``workpool.busy_held``: on a quiet run it
should be 0).

    python benchmarks/busy_machine.py [b1] [b2] [b1e] [b5e] [b9] [b11] [--steps N] [--hogs K] [--pin-hog]

Each workload runs in its own fresh process (default settings, thread count included) twice: once quiet, once
while ``K`` (default 1) hog processes spin (``while True: pass``), started before the child and killed after it.
``--pin-hog`` pins the hogs to the last cores of this process's affinity mask (by default the scheduler places
them, as another user's job would be).  Each child checks its outputs against a float64 NumPy reference and
prints the median and 90th percentile of the per-step times.  The verdict is the busy/quiet ratio of medians
per workload; the target is at most ~2x (a step may lose the core taken from it, no more), not 5-10x (threads
waiting on descheduled spinners).

The worker pool's pacer (``JITGRAD_POOL_PACER``, inherited by the children; off by default) reports what it did:
its backoffs and the calls it held on the calling thread; ``JITGRAD_POOL_PACER=1 python benchmarks/busy_machine.py
b1 b2`` measures with it.  The BLAS pacer (``JITGRAD_BLAS_PACER=1``, off by default: it makes a GEMM's last bits
follow the load) likewise, for GEMMs OpenBLAS threads itself (eager ``b1e``'s).

Run it on an otherwise quiet machine: the script measures the CPU other processes use for a second before the
runs and warns when it is above 0.1 CPU (then the quiet figures are not quiet).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

_CHILD = r'''
import json, os, sys, time
import numpy as np
sys.path.insert(0, HERE)
which, steps = sys.argv[1], int(sys.argv[2])
import jitgrad as jg
if which in ("b1", "b1e", "b5e"):
    import harness as H, mlp
    x, y, ws = H.mlp_data(*((8, 16, 32, 4) if which == "b5e" else (256, 784, 512, 10)))
    ref = mlp.reference(x, y, ws)
    step, probe = mlp.make_jitgrad(x, y, ws, None if which.endswith("e") else "numba")
    got = probe(step())
    ok = bool(abs(got["loss"] - ref["loss"]) <= 1e-4 * max(1.0, abs(ref["loss"]))
              and np.abs(got["grad W3"] - ref["grad W3"]).max() <= 1e-3)
    run = step
elif which == "b11":
    import force_field as W
    run, _, _, _ = W.torch_style(jg, "compiled", compile_=lambda f: jg.compile(f, backend="numba", background=False))
    ok = bool(np.isfinite(float(run())))
elif which == "b9":
    import gpt_model
    step9, x9, y9 = gpt_model.compiled_b9(jg)
    ok = bool(np.isfinite(float(step9(x9, y9))))
    run = lambda: step9(x9, y9)
else:
    import b2_workload as B2
    x0, w0, b0 = B2.inputs()
    x = jg.tensor(x0); w = jg.tensor(w0, requires_grad=True); b = jg.tensor(b0, requires_grad=True)
    f = jg.compile(B2.step(jg), backend="numba")
    r = f(x, w, b)
    ok = B2.matches((float(r[0]), r[1].numpy(), r[2].numpy()), B2.reference(x0, w0, b0))
    del r
    run = lambda: f(x, w, b)
for _ in range(10):
    run()
from jitgrad.codegen.native import pool_pacer, threads, workpool
ts = []
r0, h0, j0 = workpool.rounds(), workpool.busy_held(), workpool.joined()
for _ in range(steps):
    t0 = time.perf_counter(); run(); ts.append(time.perf_counter() - t0)
ts = np.array(ts) * 1e3
counted = {"rounds_per_step": (workpool.rounds() - r0) / steps, "joined_per_step": (workpool.joined() - j0) / steps,
           "busy_held_per_step": (workpool.busy_held() - h0) / steps}
from jitgrad.ir.ops import blas
print("RESULT " + json.dumps({"median_ms": float(np.median(ts)), "p90_ms": float(np.percentile(ts, 90)),
                              "min_ms": float(ts.min()), "ok": ok, "layer": threads.layer(),
                              "pool_pacer": pool_pacer.POOL_PACER, "pool_backoffs": pool_pacer.STATS["pool_backoffs"],
                              "pool_held_calls": pool_pacer.STATS["held_calls"],
                              "blas_backoffs": blas.STATS["blas_backoffs"], **counted,
                              "threads": int(os.environ.get("NUMBA_NUM_THREADS") or len(os.sched_getaffinity(0)))}))
'''


def _cpu_ticks():
    with open("/proc/stat") as fh:
        v = [int(x) for x in fh.readline().split()[1:]]
    return sum(v), v[3] + v[4]          # all, idle + iowait


def others_cpu(seconds=1.0) -> float:
    """CPUs busy over ``seconds`` while this process sleeps (Linux ``/proc/stat``); NaN elsewhere."""
    try:
        a0, i0 = _cpu_ticks()
        time.sleep(seconds)
        a1, i1 = _cpu_ticks()
    except OSError:
        return float("nan")
    return (a1 - a0 - (i1 - i0)) / max(a1 - a0, 1) * os.cpu_count()


def run_child(which, steps):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               JITGRAD_BACKGROUND_COMPILE="0")
    code = f"HERE = {HERE!r}\n" + _CHILD
    r = subprocess.run([sys.executable, "-c", code, which, str(steps)], env=env, capture_output=True, text=True,
                       timeout=1800)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": (r.stderr or r.stdout)[-800:]}


def start_hogs(k, pin):
    procs = []
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    for n in range(k):
        p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        if pin and cores:
            os.sched_setaffinity(p.pid, {cores[-1 - n % len(cores)]})
        procs.append(p)
    time.sleep(0.5)                     # let the hogs reach the run queue
    return procs


def stop_hogs(procs):
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workloads", nargs="*", default=["b1", "b2"],
                    help="b1, b2, b9, b11 (compiled), b1e, b5e (eager B1, eager B5)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--hogs", type=int, default=1)
    ap.add_argument("--pin-hog", action="store_true")
    a = ap.parse_args(argv)
    bad = set(a.workloads) - {"b1", "b2", "b9", "b11", "b1e", "b5e"}
    if bad:
        ap.error(f"unknown workloads {sorted(bad)}: choose from b1, b2, b9, b11, b1e, b5e")
    busy = others_cpu()
    print(f"CPUs other processes used in the last second: {busy:.2f} of {os.cpu_count()}"
          + ("  (NOT QUIET: the quiet figures below are not quiet)" if busy > 0.1 else ""), flush=True)
    verdicts = []
    for w in a.workloads:
        quiet = run_child(w, a.steps)
        hogs = start_hogs(a.hogs, a.pin_hog)
        try:
            loaded = run_child(w, a.steps)
        finally:
            stop_hogs(hogs)
        print(f"{w} quiet: {quiet}", flush=True)
        print(f"{w} with {a.hogs} spinning hog(s){' (pinned)' if a.pin_hog else ''}: {loaded}", flush=True)
        if "median_ms" in quiet and "median_ms" in loaded:
            ratio = loaded["median_ms"] / quiet["median_ms"]
            ok = quiet["ok"] and loaded["ok"]
            verdicts.append((w, ratio, ok))
            print(f"{w} busy/quiet = {ratio:.2f}x median, {loaded['p90_ms'] / quiet['p90_ms']:.2f}x p90 "
                  f"(target <= ~2x){'' if ok else '  OUTPUTS WRONG'}", flush=True)
    return verdicts


if __name__ == "__main__":
    main()
