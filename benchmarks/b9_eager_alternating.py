"""B9's eager step at one and two threads and with the pool's eager rules varied, in one process, alternating blocks
of steps (1, 2, variant, ..., 1, 2, variant, ...) so that a noisy host's drift hits every configuration alike.

A diagnostic, not a user's figure (a user's step runs in a fresh process at default settings: ``b9_gpt.py``,
``scaling_model.py``): on a host whose speed drifts by a quarter between processes (the Intel host of 2026-12-01:
the same configuration gave 107-164 ms a step in fresh processes), only configurations compared within one process
show which of the pool's rules pays.  Each configuration's last step is then rerun from one saved state: every
configuration must give the same loss and parameters, bit for bit (the results do not depend on the thread count
or on which thread runs a block), and the script says so or fails; but the stacks split on Python threads, which
run NumPy's own stacks (another OpenBLAS build, whose kernels can differ).

    python benchmarks/b9_eager_alternating.py [--rounds 8] [--steps 4]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_model  # noqa: E402

gpt_model.jitgrad_as_torch()
import jitgrad as jg  # noqa: E402
import torch  # noqa: E402  (jitgrad, under torch's name)
from jitgrad.codegen.native import workpool  # noqa: E402
from jitgrad.jit import pooled_gemm  # noqa: E402

VOCAB, T, L, H, C, B = 65, 64, 4, 4, 128, 16


def configurations():
    """name -> the settings of one configuration (every other one at its default)."""
    return {"1 thread": dict(threads=1), "2 threads (default)": {},
            "2, stacks on Python threads": dict(stacks=False),
            "2, a product always wakes the pool": dict(wake=0),
            "2, products alone while workers sleep": dict(wake=1 << 62),
            "2, eager kernels serial": dict(eager=1 << 62)}


def apply(threads=2, stacks=True, wake=pooled_gemm.WAKE_MACS, eager=workpool.eager_min_work()):
    jg.set_num_threads(threads)
    pooled_gemm.STACKS = stacks
    pooled_gemm.WAKE_MACS = wake
    workpool.set_eager_min_work(eager)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=4, help="steps a block")
    args = ap.parse_args()
    defaults = dict(threads=2, stacks=True, wake=pooled_gemm.WAKE_MACS, eager=workpool.eager_min_work())
    torch.manual_seed(0)
    model = gpt_model.make_gpt(torch, VOCAB, T, C, H, L, dropout=0.0, sdpa=False)
    opt = gpt_model.make_optimizer(torch, model, lr=3e-4)
    step = gpt_model.make_step(torch, model, model, opt)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, VOCAB, (B, T), generator=g), torch.randint(0, VOCAB, (B, T), generator=g))
               for _ in range(8)]
    for i in range(10):
        step(*batches[i % 8])
    configs = configurations()
    times = {name: [] for name in configs}
    for _ in range(args.rounds):
        for name, kw in configs.items():
            apply(**{**defaults, **kw})
            for i in range(args.steps):
                t = time.perf_counter()
                step(*batches[i % 8])
                times[name].append(time.perf_counter() - t)
    # the same step from one saved state under every configuration: the same bits
    saved = ([p.detach().clone() for p in model.parameters()], opt.state_dict())
    results = {}
    for name, kw in configs.items():
        with torch.no_grad():
            for p, s in zip(model.parameters(), saved[0]):
                p.copy_(s)
        opt.load_state_dict(saved[1])
        apply(**{**defaults, **kw})
        loss = step(*batches[0])
        results[name] = loss.numpy().tobytes() + b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    apply(**defaults)
    # (stacks on Python threads run NumPy's stacks, whose OpenBLAS may run other kernels: their own bits)
    numpy_stacks = {name for name, kw in configs.items() if kw.get("stacks") is False}
    same = len({r for name, r in results.items() if name not in numpy_stacks}) == 1
    print(f"# B9 eager, {args.rounds} rounds of {args.steps} steps a configuration, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    base = np.median(times["1 thread"])
    for name, ts in times.items():
        med = np.median(ts)
        print(f"{name:40s} median {med * 1e3:7.1f} ms  p25 {np.percentile(ts, 25) * 1e3:7.1f} ms  "
              f"speedup over 1 thread {base / med:5.2f}x")
    print("loss and parameters after one step from one state:", "the same bits in every configuration" if same
          else "DIFFER: " + ", ".join(sorted(results)), f"(but {', '.join(sorted(numpy_stacks))}: NumPy's stacks)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
