"""A scaling model per workload: the measured serial and parallel parts of a step at 1 and 2 threads, and the step
predicted at 4, 8, 16 and 64 cores, for jitgrad and PyTorch side by side.

Each configuration runs in fresh processes, 1 and 2 threads alternating (1, 2, 1, 2, ... so load drifts hit both
alike), with the thread count set for every library (NUMBA_NUM_THREADS, OPENBLAS_NUM_THREADS, OMP_NUM_THREADS,
torch.set_num_threads); the figure per thread count is the median of the processes' median steps, and each
round's pair gives a speedup of its own (their range: how far the host's drift moves it).  Amdahl's model fitted
to the two points: ``T(n) = S + P / n`` with ``P = 2 (T1 - T2)`` and ``S = T1 - P`` (S at least 0); the prediction
is an upper bound on the speedup when more threads also cost more wake-ups.  Say the load average with the
figures (printed first): on a loaded machine the second thread is not a free core.

    python benchmarks/scaling_model.py [--rounds 3] [--steps 30] [--only b9]
    python benchmarks/scaling_model.py --in-process --rounds 6     # B9 compiled, set_num_threads(1) / (all) alternating
    python benchmarks/scaling_model.py --work       # B9's compiled step by its launch records (counted, no clock)
    python benchmarks/scaling_model.py --work --launches    # ... and every launch record, one a line
    python benchmarks/scaling_model.py --work b11 [--launches]     # B11's (force field) compiled step
    JITGRAD_BLAS_CORETYPE=keep python benchmarks/scaling_model.py --work b11 --instructions
                                            # ... and its instructions per launch, counted by callgrind at 1 thread
    JITGRAD_BLAS_CORETYPE=keep python benchmarks/scaling_model.py --work b11 --per-thread    # ... per thread, at 2
    python benchmarks/scaling_model.py --child b1 jitgrad compile --threads 2     # one process (internal)

Set ``JITGRAD_PARALLEL_WORK`` / ``JITGRAD_PARALLEL_GRAIN`` (``parallel_threshold.py``'s result) in the environment
to model a step at other pool thresholds: the children inherit them.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# (workload, library, mode): B9 through b9_gpt.py, B1 (the MLP step) and B11 (the force field's training step)
# through this script's child
CONFIGS = [("b9", "torch", "eager"), ("b9", "jitgrad", "compile-step"), ("b9", "jitgrad", "eager"),
           ("b1", "torch", "eager"), ("b1", "jitgrad", "compile"),
           ("b11", "torch", "eager"), ("b11", "jitgrad", "compile")]
PREDICT = (4, 8, 16, 64)


def b1_child(lib, mode, threads, steps):
    import harness as H
    import mlp
    x, y, ws = H.mlp_data(256, 784, 512, 10)
    if lib == "torch":
        import torch
        torch.set_num_threads(threads)
        step, _ = mlp.make_torch(x, y, ws)
    else:
        step, _ = mlp.make_jitgrad(x, y, ws, "numba" if mode == "compile" else None)
    return statistics.median(H.call_times(step, steps, warmup=5)) * 1e3


def b11_child(lib, mode, threads, steps):
    import harness as H
    import force_field as W
    if lib == "torch":
        import torch
        torch.set_num_threads(threads)
        call = W.torch_style(torch, "eager")[0]
    else:
        import jitgrad
        call = W.torch_style(jitgrad, "compiled" if mode == "compile" else "eager")[0]
    return statistics.median(H.call_times(call, steps, warmup=5)) * 1e3


CHILDREN = {"b1": b1_child, "b11": b11_child}


def b9_work(every=False):
    """B9's compiled step split by its launch records (``f.launches``): the work, in the plan's cost unit (a
    GEMM's: multiply-adds), of the steps on the pool, of BLAS GEMMs OpenBLAS threads, and of the serial rest;
    ``every``: each record first, one a line, and the pool rounds of one step."""
    import jitgrad
    import gpt_model
    step, x, y = gpt_model.compiled_b9(jitgrad)
    parts = {}
    if every:
        from jitgrad.codegen.native import workpool
        r0 = workpool.rounds()
        step(x, y)
        print(f"# pool rounds of one step: {workpool.rounds() - r0} ({workpool.threads()} workers)")
        for i, l in enumerate(step.launches(x, y)):
            print(f"{i:4d} {l.kind:7s} {'pool' if l.parallel else '-':4s} {l.threads} {l.work / 2 ** 20:10.3f} "
                  f"{l.routine:12s} {l.label[:100]}")
    for l in step.launches(x, y):
        where = "pool" if l.parallel else "BLAS threads" if l.threads > 1 else "serial"
        kind = "GEMM" if l.kind in ("gemm", "bgemm") else "loop"
        n, w = parts.get((where, kind), (0, 0.0))
        parts[(where, kind)] = (n + 1, w + l.work)
    print("| where | kind | launches | work (2^20 units) |\n| --- | --- | --- | --- |")
    for (where, kind), (n, w) in sorted(parts.items()):
        print(f"| {where} | {kind} | {n} | {w / 2 ** 20:.1f} |")


def b9_in_process(rounds, steps):
    """B9's compiled step built at the pool's size, then ``set_num_threads(1)`` and the pool's size alternating in
    blocks of ``steps`` steps in this one process (a diagnostic, not a user's figure: both counts see the host's
    same minutes, which fresh processes minutes apart do not; the one-thread step runs the two-thread layout, its
    split GEMMs' blocks one after the other on the calling thread, so its speedup reads a little high)."""
    import numpy as np
    import harness as H
    import jitgrad
    import gpt_model
    from jitgrad.codegen.native import workpool
    step, x, y = gpt_model.compiled_b9(jitgrad)
    n = workpool.default_threads()
    times = {1: [], n: []}
    print(f"# B9 compiled in one process, set_num_threads(1) and ({n}) alternating, {steps} steps a block")
    for r in range(rounds):
        ms, pooled = {}, {}
        for t in (1, n):
            jitgrad.set_num_threads(t)
            r0 = workpool.rounds()
            ms[t] = statistics.median(H.call_times(lambda: step(x, y), steps, warmup=2)) * 1e3
            times[t].append(ms[t])
            pooled[t] = (workpool.rounds() - r0) / (steps + 2)
        print(f"round {r}: 1 thread {ms[1]:.2f} ms ({pooled[1]:.0f} pool rounds a step), {n} threads "
              f"{ms[n]:.2f} ms ({pooled[n]:.0f}): {ms[1] / ms[n]:.2f}x", flush=True)
    one, many = float(np.median(times[1])), float(np.median(times[n]))
    each = [a / b for a, b in zip(times[1], times[n])]
    print(f"median: 1 thread {one:.2f} ms, {n} threads {many:.2f} ms, {one / many:.2f}x (rounds "
          f"{min(each):.2f}-{max(each):.2f}x)")


def run(workload, lib, mode, threads, steps):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), NUMBA_NUM_THREADS=str(threads),
               OMP_NUM_THREADS=str(threads), JITGRAD_BACKGROUND_COMPILE="0")
    if workload == "b9":
        cmd = [sys.executable, os.path.join(HERE, "b9_gpt.py"), "--lib", lib, "--mode", mode, "--steps",
               str(steps), "--threads", str(threads), "--json"]
    else:
        cmd = [sys.executable, __file__, "--child", workload, lib, mode, "--threads", str(threads), "--steps",
               str(steps)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    line = next((x for x in r.stdout.splitlines() if x.startswith("{")), None)
    if r.returncode or line is None:
        raise RuntimeError(f"{workload} {lib} {mode} at {threads}: failed\n{r.stderr[-2000:]}")
    return json.loads(line)["median_ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--only", default="")
    ap.add_argument("--child", nargs=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--work", nargs="?", const="b9", choices=["b9", "b11"])
    ap.add_argument("--launches", action="store_true", help="with --work: every launch record")
    ap.add_argument("--instructions", action="store_true", help="with --work b11: instructions per launch")
    ap.add_argument("--per-thread", action="store_true", help="with --work b11: instructions per thread, 2 threads")
    ap.add_argument("--under-callgrind", help=argparse.SUPPRESS)
    ap.add_argument("--in-process", action="store_true",
                    help="B9 compiled, 1 and all threads alternating in one process")
    args = ap.parse_args()
    if args.in_process:
        b9_in_process(args.rounds, args.steps)
        return
    if args.work == "b11":
        import step_work
        if args.under_callgrind:
            step_work.counted_steps(args.under_callgrind)
        elif args.per_thread:
            step_work.per_thread(__file__)
        elif args.instructions:
            step_work.instructions(__file__)
        else:
            step_work.b11_work(args.launches)
        return
    if args.work:
        b9_work(args.launches)
        return
    if args.child:
        print(json.dumps({"median_ms": CHILDREN[args.child[0]](*args.child[1:], args.threads, args.steps)}))
        return
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}; {args.rounds} rounds of fresh processes, 1 and 2 "
          f"threads alternating, {args.steps} steps each")
    print("| workload | 1 thread | 2 threads | speedup | a round's speedup | serial S | parallel P | "
          + " | ".join(f"{n} cores" for n in PREDICT) + " |")
    print("| --- " * (7 + len(PREDICT)) + "|")
    for workload, lib, mode in CONFIGS:
        if args.only and workload != args.only:
            continue
        got = {1: [], 2: []}
        for _ in range(args.rounds):
            for n in (1, 2):
                got[n].append(run(workload, lib, mode, n, args.steps))
        t1, t2 = statistics.median(got[1]), statistics.median(got[2])
        p = max(2 * (t1 - t2), 0.0)
        s = max(t1 - p, 0.0)
        pred = " | ".join(f"{s + p / n:.3g} ms" for n in PREDICT)
        # (each round's pair of processes, side by side in time: how far a noisy host moves the ratio)
        pairs = [a / b for a, b in zip(got[1], got[2])]
        print(f"| {workload.upper()} {lib} {mode} | {t1:.3g} ms | {t2:.3g} ms | {t1 / t2:.2f}x | "
              f"{min(pairs):.2f}-{max(pairs):.2f}x | {s:.3g} ms | {p:.3g} ms | {pred} |", flush=True)


if __name__ == "__main__":
    main()
