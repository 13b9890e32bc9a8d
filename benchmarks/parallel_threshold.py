"""Where a compiled kernel starts paying for the worker pool: the measurement behind ``workpool.PARALLEL_WORK`` and
``workpool.PARALLEL_GRAIN``.

Every kernel is built once with the pool's thresholds at zero, so every loop is parallel-capable and tests its
work per call (``workpool.takes``: elements >= grain and elements x per-element cost >= min work); the timings
then only move the process-wide thresholds (``workpool.set_min_work``), so the serial and the pooled runs are the
same code, alternated (A, B, A, B, ... so load drifts hit both alike).

Kernels (the default): loops of each kind a step runs (an elementwise chain, a plain add, softmax and LayerNorm
rows, a batch of attention-sized products, and B11's pair loops: a gather of atom pairs with few elements and
much work each, the Gaussian features summed over neighbours) over a range of sizes; per kernel its work in the
plan's cost unit and its elements (``f.launches``), both medians and the gain.  Proposed: the thresholds (a power
of two of work, a power of two of elements) under which every kernel that takes the pool gains at least
``--gain`` (10%), the pair that puts the most gaining kernels on the pool.

Steps (``--step b11``, ``b1``, ``b9``): the whole compiled training step, timed at each pair of thresholds in
``--works`` x ``--grains`` and fully serial, alternating, with the pool rounds of one step; proposed: the fastest.

At 1 thread there is nothing to find.  Run it on a quiet machine at the thread count users run (both libraries),
and say the load average with the figures:

    NUMBA_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 JITGRAD_BACKGROUND_COMPILE=0 \\
        python benchmarks/parallel_threshold.py [--reps 200] [--gain 0.1] [--step b11]

Apply a result without editing code: ``JITGRAD_PARALLEL_WORK=<work> JITGRAD_PARALLEL_GRAIN=<elements>`` (a
process); as the default: ``PARALLEL_WORK`` and ``PARALLEL_GRAIN`` in ``jitgrad/codegen/native/workpool.py``.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jitgrad as jg  # noqa: E402
from jitgrad.codegen.native import workpool  # noqa: E402

OFF = 1 << 62           # a threshold no loop reaches: every chunk on the calling thread


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


ATOMS, GAUSSIANS = 32, 16
_I, _J = np.nonzero(~np.eye(ATOMS, dtype=bool))
_PAIRS = (jg.tensor(_I), jg.tensor(_J))
_MU = jg.tensor(np.linspace(0.0, 5.0, GAUSSIANS).astype(np.float32))


def pair_distances(x):
    """B11's gather over atom pairs (x: molecules x atoms x 3): few elements, indexed loads."""
    d = x[:, _PAIRS[0]] - x[:, _PAIRS[1]]
    return (d * d).sum(-1)


def pair_features(r):
    """B11's Gaussian features summed over neighbours (r: molecules x atoms x atoms-1)."""
    return jg.exp(-(r[..., None] - _MU) ** 2 / 0.5).sum(2)


def kernel_cases(quick):
    sizes = [1 << s for s in range(13, 21)] if not quick else [1 << 14, 1 << 17]
    molecules = [1, 2, 4, 8, 16, 32] if not quick else [2, 8]
    cases = [("tanh*sigmoid*2", chain, lambda n: (n,), sizes),
             ("a+1", plain, lambda n: (n,), sizes),
             ("softmax rows of 64", softmax, lambda n: (n // 64, 64), sizes),
             ("layer_norm rows of 128", layer_norm, lambda n: (n // 128, 128), sizes),
             ("q@k.T batch of 64x32", attention_scores, lambda n: (max(n // 2048, 2), 64, 32), sizes),
             ("B11 pair distances", pair_distances, lambda b: (b, ATOMS, 3), molecules),
             ("B11 pair features", pair_features, lambda b: (b, ATOMS, ATOMS - 1), molecules)]
    for name, fn, shape, ns in cases:
        for n in ns:
            yield name, fn, shape(n)


def timed_pair(call, settings, reps):
    """Medians of ``call()`` under each ``(min_work, grain)`` of ``settings``, alternated call by call."""
    times = {s: [] for s in settings}
    for _ in range(reps):
        for s in settings:
            workpool.set_min_work(*s)
            t = time.perf_counter()
            call()
            times[s].append(time.perf_counter() - t)
    return {s: statistics.median(v) for s, v in times.items()}


def measure_kernel(fn, x, reps):
    prev = workpool.set_min_work(0, 0)      # built with every loop parallel-capable, gated per call
    try:
        f = jg.compile(fn, backend="numba", background=False)
        ref = fn(x).numpy()
        for s in ((0, 0), (OFF, 0)):
            workpool.set_min_work(*s)
            np.testing.assert_allclose(f(x).numpy(), ref, rtol=1e-4, atol=1e-5)
        workpool.set_min_work(0, 0)
        pooled = [l for l in f.launches(x) if l.parallel]
        med = timed_pair(lambda: f(x), [(OFF, 0), (0, 0)], reps)
    finally:
        workpool.set_min_work(*prev)
    if not pooled:
        return None
    big = max(pooled, key=lambda l: l.work)
    return big.work, big.elements or int(np.prod(x.shape)), med[(OFF, 0)], med[(0, 0)]


def propose(rows, gain):
    """``(p, g)``: thresholds 2^p of work and 2^g of elements under which every row that takes the pool gains at
    least ``gain``, the pair that puts the most gaining rows on the pool (ties: the higher thresholds)."""
    best, best_key = None, None
    for p in range(12, 30):
        for g in range(8, 17):
            on = [(w, e, s, q) for w, e, s, q in rows if w >= 2 ** p and e >= 2 ** g]
            if any(1 - q / s < gain for w, e, s, q in on):
                continue
            key = (len(on), p, g)
            if best_key is None or key > best_key:
                best, best_key = (p, g), key
    return best


def step_builder(name):
    """``call()`` running one compiled training step of workload ``name``, built now (with the current
    thresholds), and its launch records' function."""
    if name == "b11":
        import force_field as W
        call, fn, args, _ = W.torch_style(jg, "compiled",
                                          compile_=lambda f: jg.compile(f, backend="numba", background=False))
        return call, (lambda: fn.launches(*args))
    if name == "b1":
        import harness as H
        import mlp
        x, y, ws = H.mlp_data(256, 784, 512, 10)
        step, _ = mlp.make_jitgrad(x, y, ws, "numba")
        call = lambda: step()        # noqa: E731
        return call, (lambda: [])
    if name == "b9":
        import gpt_model
        step, x, y = gpt_model.compiled_b9(jg)
        return (lambda: step(x, y)), (lambda: step.launches(x, y))
    raise SystemExit(f"unknown step {name!r}: b11, b1 or b9")


def measure_step(args):
    workpool.set_min_work(0, 0)
    call, launches = step_builder(args.step)
    for _ in range(5):
        call()
    settings = [(OFF, 0)] + [(1 << w, 1 << g) for w in args.works for g in args.grains]
    rounds = {}
    for s in settings:
        workpool.set_min_work(*s)
        r0, j0 = workpool.rounds(), workpool.joined()
        call()
        rounds[s] = workpool.rounds() - r0
        joined = workpool.joined() - j0
        if args.count:      # counted, not timed: the pool rounds a step wakes, and the launches that shared one
            print(f"{args.step} min work 2^{int(np.log2(max(s[0], 1))):2d}, grain 2^{int(np.log2(max(s[1], 1))):2d}: "
                  f"pool rounds a step {rounds[s]}, pooled launches that joined another's round {joined}")
    if args.count:
        return
    med = timed_pair(call, settings, args.reps)
    serial = med[(OFF, 0)]
    print(f"{args.step} step: serial (every loop on the calling thread) {serial * 1e3:8.3f} ms")
    for s in settings[1:]:
        print(f"  min work 2^{int(np.log2(s[0])):2d}, grain 2^{int(np.log2(s[1])):2d}: {med[s] * 1e3:8.3f} ms  "
              f"speedup {serial / med[s]:5.2f}x  pool rounds a step {rounds[s]}", flush=True)
    s = min(settings[1:], key=med.get)
    print(f"fastest: min work 2^{int(np.log2(s[0]))}, grain 2^{int(np.log2(s[1]))} ({serial / med[s]:.2f}x serial); "
          f"apply it: JITGRAD_PARALLEL_WORK={s[0]} JITGRAD_PARALLEL_GRAIN={s[1]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--gain", type=float, default=0.1)
    ap.add_argument("--quick", action="store_true", help="fewer sizes (a smoke run)")
    ap.add_argument("--step", default="", help="b11, b1 or b9: time a whole compiled step at each pair of thresholds")
    ap.add_argument("--count", action="store_true", help="with --step: count the pool rounds a step, time nothing")
    ap.add_argument("--works", type=int, nargs="+", default=[16, 18, 19, 20, 21, 23], help="powers of two of work")
    ap.add_argument("--grains", type=int, nargs="+", default=[10, 12, 15], help="powers of two of elements")
    args = ap.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}, pool threads {jg.get_num_threads()}; current "
          f"thresholds: work {workpool.min_work()}, grain {workpool.grain()}")
    if args.step:
        measure_step(args)
        return
    rows = []
    for name, fn, shape in kernel_cases(args.quick):
        x = jg.tensor(np.random.default_rng(0).uniform(0.0, 6.0, shape).astype(np.float32))
        got = measure_kernel(fn, x, args.reps)
        if got is None:
            continue
        rows.append(got)
        work, elements, ser, par = got
        print(f"{name:24s} {str(shape):16s} work 2^{np.log2(work):5.2f}  elements 2^{np.log2(elements):5.2f}  "
              f"serial {ser * 1e6:8.1f} us  pooled {par * 1e6:8.1f} us  gain {1 - par / ser:+6.1%}", flush=True)
    best = propose(rows, args.gain)
    if best is None:
        print(f"no thresholds under which every pooled kernel gains >= {args.gain:.0%}")
        return
    p, g = best
    print(f"thresholds under which every pooled kernel gains >= {args.gain:.0%}, the most of them pooled: "
          f"work 2^{p}, grain 2^{g}")
    # built kernels read the thresholds per call: no rebuild needed to apply them
    print(f"apply it: JITGRAD_PARALLEL_WORK={2 ** p} JITGRAD_PARALLEL_GRAIN={2 ** g} (a process), "
          f"workpool.set_min_work({2 ** p}, {2 ** g}) (at run time, before the steps are compiled), or "
          f"PARALLEL_WORK = 1 << {p}, PARALLEL_GRAIN = 1 << {g} in jitgrad/codegen/native/workpool.py (the default)")


if __name__ == "__main__":
    main()
