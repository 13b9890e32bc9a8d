"""Counts, never times: what one compiled B9 step asks of the worker pool.

Per warm step of B9's compiled step (``gpt_model.py``, default shape; ``--workload b1``: B1's), in this process:
the pool rounds (``workpool.rounds``), the rounds in which the calling thread ran a chunk itself
(``workpool.caller_rounds``), the parallel launches of the step's records (``step.launches``), every thread's
context switches from ``/proc/self/task/*/status`` (voluntary: the thread slept, so something had to wake it;
nonvoluntary: the scheduler took its core), split between the calling thread and the others; the serial stretches
between two rounds (the work, in the plan's cost units, of the launches between two pooled ones: what the pool's
spin must outlast); on jitgrad's own pool (``spin_pool.py``, the default) its counters per step: the futex sleeps
of the workers and of the caller (each with its wake call), the waits a spin ended, the busy signs raised
(``busy``: a pool thread crowded off its core, ``busy_sign.py``) and the run-queue samples taken (``samples``).

    NUMBA_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 JITGRAD_BACKGROUND_COMPILE=0 python benchmarks/pool_wakeups.py
    ... --steps 20 --layers 4 --json

``--pin-caller`` keeps the calling thread on the first core for the counted steps (the pool's worker is on the
second), so the counts do not depend on where a loaded machine's scheduler put it.  A process-wide count of futex
calls or context switches (the build's too) is the difference between runs with ``--steps N`` and ``--steps 0``.
"""
import argparse
import importlib.util
import json
import os
import sys
import threading

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--json", action="store_true")
ap.add_argument("--workload", choices=("b9", "b1"), default="b9", help="B9's GPT step (default) or B1's MLP step "
                "(no launch records then)")
ap.add_argument("--pin-caller", action="store_true",
                help="run the calling thread on the first core only (the pool leaves it to the caller): counts "
                     "that do not depend on where a loaded machine's scheduler put it")
args = ap.parse_args()

import jitgrad as jg                                        # noqa: E402
from jitgrad.codegen.native import workpool                 # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("gpt_model", os.path.join(here, "gpt_model.py"))
gpt_model = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpt_model)


def switches() -> dict:
    """tid -> (voluntary, nonvoluntary) context switches of every thread of this process."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        d = dict(line.split(":", 1) for line in lines if ":" in line)
        out[int(tid)] = (int(d["voluntary_ctxt_switches"]), int(d["nonvoluntary_ctxt_switches"]))
    return out


if args.workload == "b1":      # B1's MLP step (benchmarks/b1_mlp.py's shape)
    sys.path.insert(0, here)
    import harness                                          # noqa: E402
    import mlp                                              # noqa: E402
    run, _ = mlp.make_jitgrad(*harness.mlp_data(256, 784, 512, 10), "numba")
    for _ in range(3):
        float(run())
    launches = []

    def one_step():
        return float(run())
else:
    jg.manual_seed(0)
    model = gpt_model.make_gpt(jg, 65, 64, 128, 4, args.layers, dropout=0.0, sdpa=False)
    opt = gpt_model.make_optimizer(jg, model, lr=3e-4)
    step = jg.compile(gpt_model.make_step(jg, model, model, opt), backend="numba")
    g = jg.Generator().manual_seed(1)
    x, y = jg.randint(0, 65, (16, 64), generator=g), jg.randint(0, 65, (16, 64), generator=g)
    for _ in range(3):
        float(step(x, y))
    launches = step.launches(x, y)

    def one_step():
        return float(step(x, y))
if args.pin_caller:     # after the pool started: its workers take their cores from this thread's mask
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
caller_rounds = getattr(workpool, "caller_rounds", lambda: 0)
me = threading.get_native_id()
spin = getattr(workpool, "spinning", lambda: None)()
p0 = spin.stats() if spin else {}
s0, r0, c0 = switches(), workpool.rounds(), caller_rounds()
loss = None
for _ in range(args.steps):
    loss = one_step()
s1, r1, c1 = switches(), workpool.rounds(), caller_rounds()
p1 = spin.stats() if spin else {}
n = max(1, args.steps)


def per_step(who):
    vol = sum(s1[t][0] - s0.get(t, (0, 0))[0] for t in s1 if who(t))
    inv = sum(s1[t][1] - s0.get(t, (0, 0))[1] for t in s1 if who(t))
    return round(vol / n, 1), round(inv / n, 1)


# the serial stretches between two pooled rounds (the work of the launches between them, the plan's cost units):
# what a worker's spin must outlast for the next round to find it awake (spin_pool.SPIN_US)
gaps, run, started = [], 0.0, False
for la in launches:
    if la.parallel:
        if started:
            gaps.append(run)
        run, started = 0.0, True
    else:
        run += la.work
out = {"threads": workpool.threads(), "queues": getattr(workpool, "queues", workpool.threads)(),
       "steps": args.steps, "launches": len(launches), "parallel_launches": sum(1 for la in launches if la.parallel),
       "rounds_per_step": (r1 - r0) / n, "caller_rounds_per_step": (c1 - c0) / n,
       "caller_switches_per_step": per_step(lambda t: t == me),
       "other_switches_per_step": per_step(lambda t: t != me),
       "each_thread_per_step": sorted(per_step(lambda t, u=u: t == u) for u in s1 if u != me),
       "gaps": len(gaps), "gaps_over_2.5e6_5e6_1e7": [sum(g > t for g in gaps) for t in (2.5e6, 5e6, 1e7)],
       "longest_gap": max(gaps, default=0.0), "pool": "spin" if spin else "workqueue",
       "spin_pool_per_step": {k: round((p1[k] - p0[k]) / n, 1) for k in p1}, "loss": loss}
print(json.dumps(out) if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))
sys.stdout.flush()
