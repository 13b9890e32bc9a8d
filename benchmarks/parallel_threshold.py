"""Where a compiled kernel starts paying for the worker pool: the measurement behind ``workpool.PARALLEL_WORK``.

For loops of each kind a step runs (an elementwise chain, a plain add, softmax and LayerNorm rows, a batch of
attention-sized products) over a range of sizes, one fresh process times the serial and the parallel build of
the same graph in alternation (A, B, A, B, ... so load drifts hit both alike), and prints per kernel its work in
the plan's cost unit (``f.launches``), both medians and the gain.  The threshold it proposes is the smallest power
of two of work from which every measured kernel gains at least ``--gain`` (10%); at 1 thread there is nothing
to find.  Run it on a quiet machine, and say the load average with the figures:

    JITGRAD_BACKGROUND_COMPILE=0 python benchmarks/parallel_threshold.py [--reps 200] [--gain 0.1]
"""
import argparse
import os
import time

import numpy as np

import jitgrad as jg
from jitgrad.codegen.native import workpool

ap = argparse.ArgumentParser()
ap.add_argument("--reps", type=int, default=200)
ap.add_argument("--gain", type=float, default=0.1)
ap.add_argument("--quick", action="store_true", help="fewer sizes (a smoke run)")
args = ap.parse_args()


def chain(a):
    return jg.tanh(a) * jg.sigmoid(a) * 2.0


def plain(a):
    return a + 1.0


def softmax(a):
    return jg.softmax(a, dim=-1)


def layer_norm(a):
    return jg.nn.functional.layer_norm(a, (a.shape[-1],))


def attention_scores(a):
    return a @ a.transpose(-2, -1)


SIZES = [1 << s for s in range(13, 21)] if not args.quick else [1 << 14, 1 << 17]
CASES = [("tanh*sigmoid*2", chain, lambda n: (n,)),
         ("a+1", plain, lambda n: (n,)),
         ("softmax rows of 64", softmax, lambda n: (n // 64, 64)),
         ("layer_norm rows of 128", layer_norm, lambda n: (n // 128, 128)),
         ("q@k.T batch of 64x32", attention_scores, lambda n: (max(n // 2048, 2), 64, 32))]


def measure(fn, x):
    fs = {p: jg.compile(fn, backend="numba", parallel=p) for p in (False, True)}
    ref = fn(x).numpy()
    for f in fs.values():
        np.testing.assert_allclose(f(x).numpy(), ref, rtol=1e-4, atol=1e-5)
    times = {False: [], True: []}
    for _ in range(args.reps):
        for p, f in fs.items():
            t = time.perf_counter()
            f(x)
            times[p].append(time.perf_counter() - t)
    work = max((l.work for l in fs[True].launches(x) if l.parallel), default=0.0)
    return work, float(np.median(times[False])), float(np.median(times[True]))


print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, load average "
      f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}, pool threads {jg.get_num_threads()}; "
      f"current PARALLEL_WORK 2^{int(np.log2(workpool.PARALLEL_WORK))}")
rows = []
for name, fn, shape in CASES:
    for n in SIZES:
        x = jg.tensor(np.random.default_rng(0).standard_normal(shape(n)).astype(np.float32))
        work, ser, par = measure(fn, x)
        if work == 0:
            continue
        rows.append((work, ser, par))
        print(f"{name:24s} {str(tuple(x.shape)):16s} work 2^{np.log2(work):5.2f}  serial {ser * 1e6:8.1f} us  "
              f"parallel {par * 1e6:8.1f} us  gain {1 - par / ser:+6.1%}", flush=True)
best = None
for p in range(16, 30):
    if all(1 - par / ser >= args.gain for w, ser, par in rows if w >= 2 ** p):
        best = p
        break
print(f"smallest power of two of work from which every kernel gains >= {args.gain:.0%}: "
      f"{'2^' + str(best) if best is not None else 'none measured'}")
if best is not None:      # built kernels read the threshold per call: no rebuild needed to apply it
    print(f"apply it: JITGRAD_PARALLEL_WORK={2 ** best} (a process), or "
          f"jitgrad.codegen.native.workpool.set_min_work({2 ** best}) (at run time)")
