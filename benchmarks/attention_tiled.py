"""Key-tiled attention vs the untiled path vs PyTorch: scaled_dot_product_attention forward + backward.

    python benchmarks/attention_tiled.py --table               # every row, each in a fresh process
    python benchmarks/attention_tiled.py --impl tiled --mode compiled --T 4096

Shape: batch 1, 4 heads, head dim 64, float32, ``is_causal=True`` (``--no-causal`` for full attention); the
step is ``loss = (sdpa(q, k, v) * w).sum(); loss.backward()``.  One thread everywhere (OPENBLAS/OMP/NUMBA
threads 1, ``torch.set_num_threads(1)``).  Prints the minimum and median of ``--reps`` steps after ``--warmup``,
the process's peak RSS (``ru_maxrss``) and its RSS before the first step (the libraries and the inputs), and
the peak RSS of the timed steps alone ("steps peak": VmHWM reset after the warm-up, so a compiled row's build
is not in it) with the RSS before them ("before").  ``tiled`` / ``untiled`` force jitgrad's choice
(``jitgrad.nn.attention.attention_tiling``); torch picks its own CPU kernel (flash attention for these shapes).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

from machine import peak_rss_kb, reset_peak_rss, rss_kb

ap = argparse.ArgumentParser()
ap.add_argument("--impl", default="tiled", choices=["tiled", "untiled", "torch"])
ap.add_argument("--mode", default="eager", choices=["eager", "compiled"])
ap.add_argument("--T", type=int, default=2048)
ap.add_argument("--heads", type=int, default=4)
ap.add_argument("--dim", type=int, default=64)
ap.add_argument("--no-causal", action="store_true")
ap.add_argument("--dropout", type=float, default=0.0, help="dropout_p (jitgrad tiles it in eager mode only)")
ap.add_argument("--block-q", type=int, default=0)
ap.add_argument("--block-k", type=int, default=0)
ap.add_argument("--reps", type=int, default=5)
ap.add_argument("--warmup", type=int, default=1)
ap.add_argument("--json", action="store_true")
ap.add_argument("--table", action="store_true")
args = ap.parse_args()


def _rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _current_rss_mib():
    return rss_kb() / 1024


if args.table:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", MKL_NUM_THREADS="1",
               JITGRAD_BACKGROUND_COMPILE="0")
    rows = [(impl, mode) for impl, mode in (("torch", "eager"), ("untiled", "eager"), ("tiled", "eager"),
                                            ("untiled", "compiled"), ("tiled", "compiled"))]
    print(f"{'T':>5s} {'impl':8s} {'mode':9s} {'min ms':>9s} {'median ms':>10s} {'peak RSS':>9s} {'base RSS':>9s} "
          f"{'steps peak':>10s} {'before':>7s}")
    for T in (2048, 4096):
        for impl, mode in rows:
            cmd = [sys.executable, __file__, "--impl", impl, "--mode", mode, "--T", str(T), "--reps", str(args.reps),
                   "--warmup", str(args.warmup), "--json", "--dropout", str(args.dropout)] + \
                (["--no-causal"] if args.no_causal else [])
            r = subprocess.run(cmd, env=env, capture_output=True, text=True)
            line = next((x for x in r.stdout.splitlines() if x.startswith("{")), None)
            if r.returncode or line is None:
                print(f"{T:5d} {impl:8s} {mode:9s} failed: {r.stderr[-1500:]}")
                continue
            res = json.loads(line)
            print(f"{T:5d} {impl:8s} {mode:9s} {res['min_ms']:9.1f} {res['median_ms']:10.1f} "
                  f"{res['peak_rss_mib']:8.0f}M {res['base_rss_mib']:8.0f}M {res['steady_peak_rss_mib']:9.0f}M "
                  f"{res['steady_rss_mib']:6.0f}M", flush=True)
    sys.exit(0)

import numpy as np  # noqa: E402

rng = np.random.default_rng(0)
shape = (1, args.heads, args.T, args.dim)
arrays = [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]
w_np = rng.uniform(0.5, 1.5, shape).astype(np.float32)
causal = not args.no_causal

if args.impl == "torch":
    import torch
    torch.set_num_threads(1)
    xs = [torch.tensor(a, requires_grad=True) for a in arrays]
    w = torch.tensor(w_np)

    def step():
        out = torch.nn.functional.scaled_dot_product_attention(*xs, is_causal=causal, dropout_p=args.dropout)
        loss = (out * w).sum()
        loss.backward()
        return loss

    def reset():
        for x in xs:
            x.grad = None
    check = None
else:
    import jitgrad as jg
    import jitgrad.nn.functional as F
    from jitgrad.nn.attention import TILING
    TILING.min_score_bytes = TILING.eager_min_score_bytes = TILING.traced_dropout_min_score_bytes = \
        0 if args.impl == "tiled" else 1 << 62
    if args.block_q:
        TILING.block_q = args.block_q
    if args.block_k:
        TILING.block_k = args.block_k
    xs = [jg.tensor(a, requires_grad=True) for a in arrays]
    w = jg.tensor(w_np)

    def fstep(q, k, v, w):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, dropout_p=args.dropout)
        loss = (out * w).sum()
        loss.backward()
        return loss
    run = jg.compile(fstep, background=False) if args.mode == "compiled" else fstep

    def step():
        return run(*xs, w)

    def reset():
        for x in xs:
            x.grad = None

base = _current_rss_mib()
times = []
steady = None
for i in range(args.warmup + args.reps):
    if i == args.warmup:    # the build (compiled mode) and first-call allocations are behind us
        steady = (_current_rss_mib(), reset_peak_rss())
    reset()
    t0 = time.perf_counter()
    loss = step()
    g = xs[0].grad
    float(loss.detach())
    times.append(time.perf_counter() - t0)
times = times[args.warmup:]
res = {"impl": args.impl, "mode": args.mode, "T": args.T, "min_ms": 1e3 * min(times),
       "median_ms": 1e3 * sorted(times)[len(times) // 2], "peak_rss_mib": _rss_mib(), "base_rss_mib": base,
       "steady_rss_mib": steady[0], "steady_peak_rss_mib": peak_rss_kb() / 1024 if steady[1] else float("nan"),
       "loss": float(loss.detach()), "grad_q_norm": float(np.linalg.norm(np.asarray(g.detach().numpy(), np.float64)))}
if args.json:
    print(json.dumps(res))
else:
    print(res)
