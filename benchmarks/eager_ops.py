"""Eager per-op overhead beside PyTorch eager: 8x8 float32 micro-ops and B5E (MLP 16-32-4, batch 8, one SGD step).

Run in a fresh process: ``python benchmarks/eager_ops.py [--rounds N]``.  jitgrad and PyTorch are timed in the same
process, interleaved round by round (a loaded machine slows both alike, so the ratio stays meaningful); each round
takes the best of a few repeats of ``n`` calls, and the table shows the median over rounds.  Both libraries run on
one thread (``OPENBLAS_NUM_THREADS=1``, ``torch.set_num_threads(1)``), so by default the clock is the calling
thread's CPU time (``time.thread_time``): on a host with more runnable processes than cores, wall time mostly
measures waiting for a core (``--clock wall`` times wall-clock instead).  Without torch installed, jitgrad's column is
printed alone with a note.  Targets (issue 28): each micro-op <= 1.5x PyTorch eager (basic indexing <= 2x), B5E <=
1.3x.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import harness as H  # noqa: E402
import mlp  # noqa: E402

TARGETS = {"x[2:5]": 2.0, "B5E: MLP 16-32-4, batch 8, SGD step": 1.3}


def _cases(lib):
    """[(name, callable, calls per timing)] for ``lib`` (jitgrad or torch) on the same 8x8 float32 data."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 8), dtype=np.float32)
    b = rng.standard_normal((8, 8), dtype=np.float32)
    y = lib.tensor(b)
    x = lib.tensor(a, requires_grad=True)
    w = lib.tensor(b, requires_grad=True)
    xs = lib.tensor(a)

    def fwd_bwd():
        (x @ w).tanh().sum().backward()
        x.grad = None
        w.grad = None
    return [("y + y (no grad)", lambda: y + y, 2000),
            ("x + y, x requires grad", lambda: x + y, 2000),
            ("x @ y, with grad", lambda: x @ y, 2000),
            ("x.tanh(), with grad", lambda: x.tanh(), 2000),
            ("(x @ y).tanh().sum().backward()", fwd_bwd, 300),
            ("x[2:5]", lambda: xs[2:5], 2000)]


def _b5e(which):
    x, y, ws = H.mlp_data(8, 16, 32, 4)
    step, _ = mlp.make_jitgrad(x, y, ws, backend=None) if which == "jitgrad" else mlp.make_torch(x, y, ws)
    return ("B5E: MLP 16-32-4, batch 8, SGD step", step, 100)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every call count (0.1 for a smoke run)")
    ap.add_argument("--clock", choices=("thread", "wall"), default="thread",
                    help="thread: the calling thread's CPU time (default); wall: perf_counter")
    args = ap.parse_args(argv)
    clock = time.thread_time if args.clock == "thread" else time.perf_counter
    import jitgrad as jg
    libs = {"jitgrad": jg}
    torch = None
    if H.have("torch"):
        import torch
        torch.set_num_threads(1)
        libs["torch"] = torch
    cases = {name: _cases(lib) + [_b5e(name)] for name, lib in libs.items()}
    times = {name: [[] for _ in cases[name]] for name in libs}
    for _ in range(args.rounds):
        for i in range(len(cases["jitgrad"])):
            for name in libs:       # interleaved: each case, jitgrad then torch, in every round
                _, fn, n = cases[name][i]
                fn()
                times[name][i].append(H.best_per_call(fn, max(1, int(n * args.scale)), args.repeats, clock))
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"eager per-op overhead, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {load}, "
          f"{args.rounds} rounds x best of {args.repeats}, medians, {args.clock} clock")
    if torch is None:
        print("(torch not installed: jitgrad alone, no ratio)")
    print(f"{'workload':40s} {'jitgrad':>10s} {'torch':>10s} {'ratio':>7s} {'target':>7s}")
    for i, (label, _, _) in enumerate(cases["jitgrad"]):
        j = statistics.median(times["jitgrad"][i])
        line = f"{label:40s} {j * 1e6:8.2f}us"
        if torch is not None:
            t = statistics.median(times["torch"][i])
            target = TARGETS.get(label, 1.5)
            line += f" {t * 1e6:8.2f}us {j / t:6.2f}x {target:6.1f}x" + ("" if j / t <= target else "  MISSED")
        print(line)


if __name__ == "__main__":
    main()
